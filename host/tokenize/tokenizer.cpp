// Vocabulary loading, special-token handling and byte-level BPE, following llama.cpp's llama-vocab.cpp so
// the ids match it token for token (SentencePiece lives in sentencepiece.cpp).
#include "tokenize/tokenizer.h"

#include "error.h"
#include "tokenize/pretokenizer.h"
#include "tokenize/sentencepiece.h"
#include "tokenize/utf8.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <queue>
#include <utility>

namespace cellm {

namespace {

// ---- Metadata access ----------------------------------------------------------------------------------------

std::string_view view_of(const cellm_string_ref& s) { return {s.data, static_cast<size_t>(s.len)}; }

class Metadata {
public:
    explicit Metadata(const cellm_model_view& model) : model_(model) {}

    const cellm_meta_value* find(std::string_view key) const {
        if (!model_.meta && model_.n_meta > 0) throw Error("model view has metadata count but no entries");
        for (uint64_t i = 0; i < model_.n_meta; ++i) {
            const auto& kv = model_.meta[i];
            if ((kv.key.data || kv.key.len == 0) && view_of(kv.key) == key) return &kv.value;
        }
        return nullptr;
    }

    std::optional<std::string> string(std::string_view key) const {
        const auto* value = find(key);
        if (!value) return std::nullopt;
        if (value->type != CELLM_VALUE_STRING) throw Error(std::string(key) + ": expected a string");
        return std::string(checked(value->v.str, key));
    }

    std::optional<bool> boolean(std::string_view key) const {
        const auto* value = find(key);
        if (!value) return std::nullopt;
        if (value->type != CELLM_VALUE_BOOL) throw Error(std::string(key) + ": expected a bool");
        return value->v.u64 != 0;
    }

    // A token id key; nullopt when absent, Error when not an integer.
    std::optional<int64_t> integer(std::string_view key) const {
        const auto* value = find(key);
        if (!value) return std::nullopt;
        switch (value->type) {
        case CELLM_VALUE_U8: case CELLM_VALUE_U16: case CELLM_VALUE_U32: case CELLM_VALUE_U64:
            return value->v.u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                       ? std::numeric_limits<int64_t>::max()
                       : static_cast<int64_t>(value->v.u64);
        case CELLM_VALUE_I8: case CELLM_VALUE_I16: case CELLM_VALUE_I32: case CELLM_VALUE_I64:
            return value->v.i64;
        default:
            throw Error(std::string(key) + ": expected an integer");
        }
    }

    // The array at `key` after checking its element type; nullopt when absent.
    std::optional<std::pair<const void*, uint64_t>> array(std::string_view key, cellm_value_type elem) const {
        const auto* value = find(key);
        if (!value) return std::nullopt;
        if (value->type != CELLM_VALUE_ARRAY || value->v.arr.elem_type != elem) {
            throw Error(std::string(key) + ": expected an array of " +
                        (elem == CELLM_VALUE_STRING ? "strings" : elem == CELLM_VALUE_F32 ? "float32" : "int32"));
        }
        if (value->v.arr.count > 0 && !value->v.arr.data) throw Error(std::string(key) + ": array has no data");
        return std::make_pair(value->v.arr.data, value->v.arr.count);
    }

    static std::string_view checked(const cellm_string_ref& s, std::string_view key) {
        if (!s.data && s.len > 0) throw Error(std::string(key) + ": string has no data");
        return view_of(s);
    }

private:
    const cellm_model_view& model_;
};

// ---- Byte-level encoding (GPT-2's bytes_to_unicode) ---------------------------------------------------------

struct ByteLevel {
    std::array<std::string, 256> byte_text;  // the printable character each byte is spelled as
    std::array<int16_t, 512> cpt_byte;       // inverse: code point -> byte, -1 for other code points

    ByteLevel() {
        cpt_byte.fill(-1);
        uint32_t next_unprintable = 256;
        for (uint32_t b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            const uint32_t cpt = printable ? b : next_unprintable++;
            utf8::append(byte_text[b], cpt);
            cpt_byte[cpt] = static_cast<int16_t>(b);
        }
    }

    // A normal token's bytes; code points outside the table are kept visible as llama.cpp does.
    std::string decode(std::string_view text) const {
        std::string out;
        for (size_t pos = 0; pos < text.size();) {
            const size_t start = pos;
            const uint32_t cpt = utf8::next(text, pos);
            if (cpt < cpt_byte.size() && cpt_byte[cpt] >= 0) {
                out += static_cast<char>(cpt_byte[cpt]);
                continue;
            }
            out += "[UNK_BYTE_0x";
            for (size_t i = start; i < pos; ++i) {
                std::array<char, 3> hex{};
                std::snprintf(hex.data(), hex.size(), "%02x", static_cast<unsigned char>(text[i]));
                out += hex.data();
            }
            out += std::string(text) + "]";
        }
        return out;
    }
};

const ByteLevel& byte_level() {
    static const ByteLevel table;
    return table;
}

// ---- BPE --------------------------------------------------------------------------------------------------

// Merges ranked pairs of symbols within each pre-tokenized word, lowest rank first, as llama.cpp's
// llm_tokenizer_bpe does. Symbols start as bytes spelled GPT-2's byte-level way, or (SentencePiece-style
// vocabularies, PreTokenizerTraits::spm_style) as UTF-8 characters with spaces spelled U+2581.
class BpeEncoder final : public Tokenizer::Encoder {
public:
    BpeEncoder(const std::unordered_map<std::string, int32_t>& ids, std::unique_ptr<PreTokenizer> pre,
               std::span<const cellm_string_ref> merges)
        : ids_(ids), pre_(std::move(pre)), spm_style_(pre_->traits().spm_style) {
        const auto& bytes = byte_level();
        for (size_t b = 0; b < 256; ++b) {
            byte_token_[b] = lookup(spm_style_ ? byte_token_text(static_cast<unsigned char>(b)) : bytes.byte_text[b]);
        }
        merges_.reserve(merges.size());
        for (size_t rank = 0; rank < merges.size(); ++rank) {
            const auto merge = Metadata::checked(merges[rank], "tokenizer.ggml.merges");
            const auto where = [&] { return "tokenizer.ggml.merges[" + std::to_string(rank) + "] '" +
                                             std::string(merge) + "'"; };
            const size_t space = merge.find(' ', 1);
            if (space == std::string_view::npos) throw Error(where() + ": expected two tokens separated by a space");
            const std::string left(merge.substr(0, space)), right(merge.substr(space + 1));
            const int32_t left_id = lookup(left), right_id = lookup(right), merged_id = lookup(left + right);
            if (left_id < 0 || right_id < 0 || merged_id < 0) {
                throw Error(where() + ": refers to '" + (left_id < 0 ? left : right_id < 0 ? right : left + right) +
                            "', which is not in tokenizer.ggml.tokens");
            }
            merges_.try_emplace(pair_key(left_id, right_id), Merge{static_cast<int32_t>(rank), merged_id});
        }
    }

    void encode(std::string_view text, std::vector<int32_t>& out) const override {
        const std::string escaped = spm_style_ ? sentencepiece_escape(text) : std::string();
        for (const auto& word : pre_->split(spm_style_ ? std::string_view(escaped) : text)) encode_word(word, out);
    }

private:
    struct Merge {
        int32_t rank;
        int32_t result;
    };
    struct Symbol {
        int32_t id;      // -1 for a character that is not in the vocabulary
        int32_t prev;    // neighbours in the word, -1 at the ends
        int32_t next;
        uint32_t begin;  // where its bytes start in the word
        uint32_t n_bytes;  // 0 once merged into its left neighbour
    };
    struct Bigram {
        int32_t rank, left, right, left_id, right_id;
        // Lowest rank first, then leftmost: the order llama.cpp merges in.
        bool operator<(const Bigram& other) const {
            return rank > other.rank || (rank == other.rank && left > other.left);
        }
    };

    static uint64_t pair_key(int32_t left, int32_t right) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
    }

    int32_t lookup(const std::string& text) const {
        const auto it = ids_.find(text);
        return it == ids_.end() ? -1 : it->second;
    }

    // The word as the vocabulary spells it.
    std::string spelled(const std::string& word) const {
        if (spm_style_) return word;
        std::string out;
        for (const char c : word) out += byte_level().byte_text[static_cast<unsigned char>(c)];
        return out;
    }

    void encode_word(const std::string& word, std::vector<int32_t>& out) const {
        const auto& traits = pre_->traits();
        const bool newline_run = traits.whole_newline_runs && word.find_first_not_of('\n') == std::string::npos;
        if (traits.ignore_merges || newline_run) {
            if (const int32_t id = lookup(spelled(word)); id >= 0) {
                out.push_back(id);
                return;
            }
        }
        // One symbol per byte (byte-level encoding spells every byte as one character) or per UTF-8 character.
        std::vector<Symbol> symbols;
        symbols.reserve(word.size());
        for (size_t pos = 0; pos < word.size();) {
            const size_t length =
                spm_style_ ? std::min(word.size() - pos, utf8::sequence_length(static_cast<unsigned char>(word[pos])))
                           : 1;
            const int32_t id = spm_style_ ? lookup(word.substr(pos, length))
                                          : byte_token_[static_cast<unsigned char>(word[pos])];
            const auto index = static_cast<int32_t>(symbols.size());
            symbols.push_back({id, index - 1, pos + length < word.size() ? index + 1 : -1,
                               static_cast<uint32_t>(pos), static_cast<uint32_t>(length)});
            pos += length;
        }
        std::priority_queue<Bigram> queue;
        const auto add_bigram = [&](int32_t left, int32_t right) {
            if (left < 0 || right < 0 || symbols[left].id < 0 || symbols[right].id < 0) return;
            const auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
            if (it != merges_.end()) queue.push({it->second.rank, left, right, symbols[left].id, symbols[right].id});
        };
        const auto n = static_cast<int32_t>(symbols.size());
        for (int32_t i = 1; i < n; ++i) add_bigram(i - 1, i);
        while (!queue.empty()) {
            const Bigram bigram = queue.top();
            queue.pop();
            Symbol& left = symbols[bigram.left];
            Symbol& right = symbols[bigram.right];
            // Stale entries: one side was merged away or has grown since the pair was queued.
            if (left.n_bytes == 0 || right.n_bytes == 0 || left.id != bigram.left_id || right.id != bigram.right_id) {
                continue;
            }
            left.id = merges_.at(pair_key(bigram.left_id, bigram.right_id)).result;
            left.n_bytes += right.n_bytes;
            right.n_bytes = 0;
            left.next = right.next;
            if (right.next >= 0) symbols[right.next].prev = bigram.left;
            add_bigram(left.prev, bigram.left);
            add_bigram(bigram.left, left.next);
        }
        for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = symbols[i].next) {
            const Symbol& symbol = symbols[i];
            if (symbol.id >= 0) {
                out.push_back(symbol.id);
            } else if (spm_style_) {
                // A character missing from the vocabulary: its bytes' <0xXX> tokens, where the vocabulary has them.
                for (uint32_t b = symbol.begin; b < symbol.begin + symbol.n_bytes; ++b) {
                    if (const int32_t id = byte_token_[static_cast<unsigned char>(word[b])]; id >= 0) out.push_back(id);
                }
            } else {
                // A byte missing from the vocabulary: llama.cpp tries each char of its spelling as a token.
                for (const char c : byte_level().byte_text[static_cast<unsigned char>(word[symbol.begin])]) {
                    if (const int32_t id = lookup(std::string(1, c)); id >= 0) out.push_back(id);
                }
            }
        }
    }

    const std::unordered_map<std::string, int32_t>& ids_;
    std::unique_ptr<PreTokenizer> pre_;
    bool spm_style_;
    std::array<int32_t, 256> byte_token_{};  // the byte's own token, -1 where the vocabulary has none
    std::unordered_map<uint64_t, Merge> merges_;
};

// ---- Special tokens llama.cpp recognises by text ------------------------------------------------------------

// End-of-turn spellings: the first present becomes eot when tokenizer.ggml.eot_token_id is absent.
constexpr std::array<std::string_view, 11> eot_texts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>",
    "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"};
// Every spelling that ends generation.
constexpr std::array<std::string_view, 22> end_of_generation_texts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~["};
// Fill-in-the-middle pad / repo / file-separator tokens also end generation.
constexpr std::array<std::string_view, 11> fim_end_texts = {
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
    "<REPO>", "<reponame>", "<|file_sep|>"};

uint32_t attr_of_type(int32_t type) {
    switch (type) {  // GGUF token types
    case 1: return Tokenizer::attr_normal;
    case 2: return Tokenizer::attr_unknown;
    case 3: return Tokenizer::attr_control;
    case 4: return Tokenizer::attr_user_defined;
    case 5: return Tokenizer::attr_unused;
    case 6: return Tokenizer::attr_byte;
    default: return Tokenizer::attr_undefined;
    }
}

}  // namespace

// ---- Loading --------------------------------------------------------------------------------------------------

std::unique_ptr<Tokenizer> Tokenizer::from_model(const cellm_model_view& model) {
    const Metadata meta(model);
    std::unique_ptr<Tokenizer> tok(new Tokenizer());

    const auto kind = meta.string("tokenizer.ggml.model");
    if (!kind) throw Error("tokenizer.ggml.model: missing (the model file has no tokenizer)");
    tok->model_ = *kind;
    // "gpt2" is byte-level BPE, "gemma4" BPE over SentencePiece-style text (always its own pre-tokenizer),
    // "llama" SentencePiece.
    const bool sentencepiece = tok->model_ == "llama";
    if (!sentencepiece && tok->model_ != "gpt2" && tok->model_ != "gemma4") {
        throw Error("tokenizer model '" + tok->model_ + "' is not supported yet (supported: gpt2, gemma4, llama)");
    }
    tok->pre_ = tok->model_ == "gemma4" ? "gemma4" : meta.string("tokenizer.ggml.pre").value_or("");
    tok->chat_template_ = meta.string("tokenizer.chat_template").value_or("");

    const auto tokens = meta.array("tokenizer.ggml.tokens", CELLM_VALUE_STRING);
    if (!tokens) throw Error("tokenizer.ggml.tokens: missing");
    const auto n_tokens = tokens->second;
    if (n_tokens == 0) throw Error("tokenizer.ggml.tokens: bad token count 0");
    // The format plugins' own limit (plugins/formats/limits.h), checked again here: a plugin of another origin
    // may hand a view without it.
    constexpr uint64_t max_vocab = uint64_t{1} << 22;
    if (n_tokens > max_vocab) {
        throw Error("tokenizer.ggml.tokens: vocabulary size " + std::to_string(n_tokens) + " exceeds the limit of " +
                    std::to_string(max_vocab));
    }
    const auto* texts = static_cast<const cellm_string_ref*>(tokens->first);
    // Numeric arrays point into the file and need not be aligned: read elements with memcpy.
    const void* types = nullptr;
    if (const auto type_array = meta.array("tokenizer.ggml.token_type", CELLM_VALUE_I32)) {
        if (type_array->second < n_tokens) {
            throw Error("tokenizer.ggml.token_type: " + std::to_string(type_array->second) + " entries for " +
                        std::to_string(n_tokens) + " tokens");
        }
        types = type_array->first;
    }

    tok->tokens_.resize(n_tokens);
    tok->ids_.reserve(n_tokens);
    for (uint64_t i = 0; i < n_tokens; ++i) {
        auto& token = tok->tokens_[i];
        token.text = std::string(Metadata::checked(texts[i], "tokenizer.ggml.tokens"));
        if (token.text.empty()) token.text = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp names them
        int32_t type = 0;
        if (types != nullptr) std::memcpy(&type, static_cast<const char*>(types) + i * sizeof(int32_t), sizeof(type));
        token.attr = types ? attr_of_type(type) : attr_normal;
        tok->ids_[token.text] = static_cast<int32_t>(i);  // a repeated spelling maps to its last id
    }

    // Special ids: llama.cpp's defaults are 11 for BOS and EOS with byte-level BPE, none with gemma4, and BOS 1,
    // EOS 2, UNK 0 with SentencePiece; an out-of-range id in the file is ignored with a warning (llama.cpp too), a wrongly typed
    // one is an error.
    const auto special_id = [&](std::string_view key, int32_t fallback) {
        int32_t id = fallback < tok->n_vocab() ? fallback : -1;
        if (const auto value = meta.integer(key)) {
            if (*value >= 0 && *value < tok->n_vocab()) {
                id = static_cast<int32_t>(*value);
            } else {
                spdlog::warn("{} = {} is outside the vocabulary of {} tokens; ignored", key, *value, tok->n_vocab());
            }
        }
        return id;
    };
    const int32_t bpe_default = tok->model_ == "gemma4" ? -1 : 11;
    tok->bos_ = special_id("tokenizer.ggml.bos_token_id", sentencepiece ? 1 : bpe_default);
    tok->eos_ = special_id("tokenizer.ggml.eos_token_id", sentencepiece ? 2 : bpe_default);
    tok->eot_ = special_id("tokenizer.ggml.eot_token_id", -1);
    tok->eom_ = special_id("tokenizer.ggml.eom_token_id", -1);
    const int32_t unk = special_id("tokenizer.ggml.unknown_token_id", sentencepiece ? 0 : -1);

    // SentencePiece has no pre-tokenizer; it adds BOS and (unless the file says otherwise) a leading space.
    std::unique_ptr<PreTokenizer> pre;
    if (!sentencepiece) pre = PreTokenizer::for_name(tok->pre_);
    const bool default_add_bos = sentencepiece || pre->traits().default_add_bos;
    tok->add_bos_ = meta.boolean("tokenizer.ggml.add_bos_token").value_or(default_add_bos) ||
                    (pre && pre->traits().always_add_bos);
    tok->add_space_prefix_ = sentencepiece && meta.boolean("tokenizer.ggml.add_space_prefix").value_or(true);

    const auto mark_control = [&](int32_t id) {
        tok->tokens_[id].attr |= attr_control;
        return id;
    };
    if (tok->eot_ < 0) {
        for (const auto text : eot_texts) {
            if (const int32_t id = tok->find_token(text); id >= 0) {
                tok->eot_ = mark_control(id);
                break;
            }
        }
    }
    if (tok->eom_ < 0) {
        if (const int32_t id = tok->find_token("<|eom_id|>"); id >= 0) tok->eom_ = mark_control(id);
    }
    const auto add_end = [&](int32_t id) {
        if (id >= 0 && !tok->is_end_of_generation(id)) tok->end_of_generation_.push_back(id);
    };
    for (const auto& texts_list : {std::span<const std::string_view>(fim_end_texts),
                                   std::span<const std::string_view>(end_of_generation_texts)}) {
        for (const auto text : texts_list) {
            if (const int32_t id = tok->find_token(text); id >= 0) add_end(mark_control(id));
        }
    }
    for (const int32_t id : {tok->eos_, tok->eot_, tok->eom_}) add_end(id);
    // gpt-oss renders these in its output, so they stay text even when typed control.
    for (const auto text : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
        if (const int32_t id = tok->find_token(text); id >= 0) tok->tokens_[id].attr = attr_user_defined;
    }

    const auto& bytes = byte_level();
    for (size_t i = 0; i < n_tokens; ++i) {
        auto& token = tok->tokens_[i];
        if (token.attr & (attr_control | attr_user_defined | attr_unknown)) {
            token.bytes = token.text;
            tok->specials_.push_back(static_cast<int32_t>(i));
        } else if (token.attr & attr_normal) {
            const bool spm_spelled = sentencepiece || pre->traits().spm_style;
            token.bytes = spm_spelled ? sentencepiece_unescape(token.text) : bytes.decode(token.text);
        } else if ((token.attr & attr_byte) && token.text.size() == 6 && token.text.starts_with("<0x")) {
            unsigned value = 0;  // "<0xXX>" byte tokens; a malformed one decodes to nothing
            const auto digits = std::string_view(token.text).substr(3, 2);
            const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value, 16);
            if (error == std::errc() && end == digits.data() + digits.size()) {
                token.bytes = std::string(1, static_cast<char>(value));
            }
        }
    }
    std::stable_sort(tok->specials_.begin(), tok->specials_.end(), [&](int32_t a, int32_t b) {
        return tok->tokens_[a].text.size() > tok->tokens_[b].text.size();
    });

    if (sentencepiece) {
        const auto score_array = meta.array("tokenizer.ggml.scores", CELLM_VALUE_F32);
        if (!score_array) throw Error("tokenizer.ggml.scores: missing (SentencePiece needs its scores)");
        if (score_array->second < n_tokens) {
            throw Error("tokenizer.ggml.scores: " + std::to_string(score_array->second) + " entries for " +
                        std::to_string(n_tokens) + " tokens");
        }
        std::vector<float> scores(n_tokens);
        std::memcpy(scores.data(), score_array->first, n_tokens * sizeof(float));
        for (size_t i = 0; i < n_tokens; ++i) {
            if (std::isnan(scores[i])) throw Error("tokenizer.ggml.scores[" + std::to_string(i) + "] is NaN");
        }
        tok->encoder_ = make_sentencepiece_encoder(tok->ids_, std::move(scores), unk);
        return tok;
    }
    std::span<const cellm_string_ref> merges;
    if (const auto merge_array = meta.array("tokenizer.ggml.merges", CELLM_VALUE_STRING)) {
        merges = {static_cast<const cellm_string_ref*>(merge_array->first), merge_array->second};
    } else {
        throw Error("tokenizer.ggml.merges: missing (byte-level BPE needs its merges)");
    }
    tok->encoder_ = std::make_unique<BpeEncoder>(tok->ids_, std::move(pre), merges);
    return tok;
}

Tokenizer::~Tokenizer() = default;

// ---- Encoding and decoding --------------------------------------------------------------------------------------

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
    const std::string clean = utf8::sanitize(text);

    // Split special tokens out, longest first; what lies between them stays text for the encoder.
    struct Fragment {
        int32_t token;  // -1 for text
        size_t begin, end;
    };
    std::vector<Fragment> fragments;
    if (!clean.empty()) fragments.push_back({-1, 0, clean.size()});
    for (const int32_t special : specials_) {
        const auto& token = tokens_[special];
        if (!parse_special && (token.attr & (attr_control | attr_unknown))) continue;  // user-defined still split
        std::vector<Fragment> next;
        for (const auto& fragment : fragments) {
            if (fragment.token >= 0) {
                next.push_back(fragment);
                continue;
            }
            size_t begin = fragment.begin;
            while (begin < fragment.end) {
                const size_t found = std::string_view(clean.data(), fragment.end).find(token.text, begin);
                if (found == std::string_view::npos) break;
                if (found > begin) next.push_back({-1, begin, found});
                next.push_back({special, found, found + token.text.size()});
                begin = found + token.text.size();
            }
            if (begin < fragment.end) next.push_back({-1, begin, fragment.end});
        }
        fragments = std::move(next);
    }

    std::vector<int32_t> ids;
    if (add_bos) {
        if (bos_ < 0) throw Error("the model has no BOS token (tokenizer.ggml.bos_token_id)");
        ids.push_back(bos_);
    }
    bool after_special = true;  // the start of the text counts as following a special token
    for (const auto& fragment : fragments) {
        if (fragment.token >= 0) {
            ids.push_back(fragment.token);
            after_special = true;
            continue;
        }
        const auto piece = std::string_view(clean).substr(fragment.begin, fragment.end - fragment.begin);
        if (add_space_prefix_ && after_special) {
            std::string prefixed(1, ' ');
            prefixed.append(piece);
            encoder_->encode(prefixed, ids);
        } else {
            encoder_->encode(piece, ids);
        }
        after_special = false;
    }
    return ids;
}

void Tokenizer::check_id(int32_t id) const {
    if (id < 0 || id >= n_vocab()) {
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(n_vocab()) +
                    " tokens");
    }
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
    check_id(id);
    return tokens_[id].bytes;
}

const std::string& Tokenizer::token_text(int32_t id) const {
    check_id(id);
    return tokens_[id].text;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
    std::string out;
    for (const int32_t id : ids) out += token_bytes(id);
    return out;
}

int32_t Tokenizer::find_token(std::string_view text) const {
    const auto it = ids_.find(std::string(text));
    return it == ids_.end() ? -1 : it->second;
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
    return std::find(end_of_generation_.begin(), end_of_generation_.end(), id) != end_of_generation_.end();
}

bool Tokenizer::is_special(int32_t id) const {
    return id >= 0 && id < n_vocab() && (tokens_[id].attr & (attr_control | attr_user_defined | attr_unknown));
}

// ---- Streaming ----------------------------------------------------------------------------------------------------

std::string StreamDecoder::push(int32_t id) {
    pending_ += tokenizer_.token_bytes(id);
    // Find where a trailing, still incomplete character starts (at most 3 bytes back).
    size_t keep_from = pending_.size();
    for (size_t back = 1; back <= 3 && back <= pending_.size(); ++back) {
        const auto byte = static_cast<unsigned char>(pending_[pending_.size() - back]);
        if ((byte & 0xC0) == 0x80) continue;  // continuation byte: keep looking for its lead
        if (utf8::sequence_length(byte) > back) keep_from = pending_.size() - back;
        break;
    }
    // Tokens can spell malformed UTF-8 (byte-fallback pieces in an order no text has); what leaves is valid.
    std::string out = utf8::sanitize(std::string_view(pending_).substr(0, keep_from));
    pending_.erase(0, keep_from);
    return out;
}

std::string StreamDecoder::flush() {
    return utf8::sanitize(std::exchange(pending_, {}));
}

}  // namespace cellm
