// Pattern table and PCRE2 matching for the pre-tokenizer. The patterns are llama.cpp's (llama-vocab.cpp), which
// are HF's tokenizer.json patterns with case-insensitive groups spelled out; PCRE2 runs them directly with
// Unicode classes, where llama.cpp needs hand-written splitters or collapsed-category tricks.
#include "tokenize/pretokenizer.h"

#include "error.h"

#include <pcre2.h>

#include <algorithm>
#include <array>

namespace cellm {

namespace {

constexpr std::string_view gpt2_words = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
constexpr std::string_view llama3_words =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view qwen2_words =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen 3.5: Qwen 2's split with combining marks (\\p{M}) kept inside words.
constexpr std::string_view qwen35_words =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view gpt4o_words =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?"
    "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view single_digits = "\\p{N}";

struct KnownPreTokenizer {
    std::vector<std::string_view> names;
    std::vector<std::string_view> patterns;
    PreTokenizerTraits traits;
};

// Every pre name llama.cpp maps to one of these pattern sets; names whose vocabularies need more than the
// split and the traits (separators, BOS suppression) are left out until a model needs them.
const std::vector<KnownPreTokenizer>& known_pre_tokenizers() {
    static const std::vector<KnownPreTokenizer> table = {
        {{"default"},
         {"[\\p{P}\\$\\+<=>\\^~\\|]+", gpt2_words, "\\p{N}+", "[0-9][0-9][0-9]"}, {}},
        {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"},
         {llama3_words}, {.ignore_merges = true, .default_add_bos = true}},
        {{"dbrx", "smaug-bpe"}, {llama3_words}, {}},
        {{"deepseek-llm"},
         {"[\r\n]",
          "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
          "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
          "\\s+$",
          "[一-龥ࠀ-一가-퟿]+",
          "\\p{N}+"}, {}},
        {{"deepseek-coder"},
         {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"}, {}},
        {{"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"},
         {"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
          "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
          "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
         {}},
        {{"falcon"},
         {"[\\p{P}\\$\\+<=>\\^~\\|`]+", gpt2_words, "[0-9][0-9][0-9]"}, {}},
        {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
         {single_digits, gpt2_words}, {}},
        {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
          "modern-bert", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4"},
         {gpt2_words}, {}},
        {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open"},
         {qwen2_words}, {}},
        {{"qwen35"}, {qwen35_words}, {}},
        // BPE merges run over whole lines; only newlines split (merges never cross one).
        {{"gemma4", "granite-embed-multi-311m"},
         {"[^\\n]+|[\\n]+"},
         {.always_add_bos = true, .spm_style = true, .whole_newline_runs = true}},
        {{"poro-chat", "bloom", "gpt3-finnish"}, {" ?[^(\\s|.,!?…。，、।۔،)]+"}, {}},
        {{"viking"}, {" ?[^(\\s|.,!?…。，、।۔،)]+", single_digits}, {}},
        {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, {gpt4o_words}, {}},
    };
    return table;
}

std::string known_names() {
    std::string out;
    for (const auto& known : known_pre_tokenizers()) {
        for (const auto name : known.names) out += (out.empty() ? "" : ", ") + std::string(name);
    }
    return out;
}

}  // namespace

struct PreTokenizer::Pattern {
    pcre2_code* code = nullptr;
    ~Pattern() { pcre2_code_free(code); }
};

std::unique_ptr<PreTokenizer> PreTokenizer::for_name(std::string_view pre) {
    const std::string_view name = pre.empty() ? "default" : pre;
    for (const auto& known : known_pre_tokenizers()) {
        if (std::find(known.names.begin(), known.names.end(), name) != known.names.end()) {
            return std::make_unique<PreTokenizer>(known.patterns, known.traits);
        }
    }
    throw Error("tokenizer.ggml.pre: unknown pre-tokenizer '" + std::string(name) + "' (known: " + known_names() +
                ")");
}

PreTokenizer::PreTokenizer(std::span<const std::string_view> patterns, PreTokenizerTraits traits)
    : traits_(traits) {
    // DOLLAR_ENDONLY: '$' means the end of the piece (as in std::regex), never "before a final newline".
    constexpr uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_NO_UTF_CHECK;
    for (const auto source : patterns) {
        auto pattern = std::make_unique<Pattern>();
        int error = 0;
        PCRE2_SIZE error_offset = 0;
        pattern->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(), options, &error,
                                      &error_offset, nullptr);
        if (!pattern->code) {
            std::array<PCRE2_UCHAR, 256> message{};
            pcre2_get_error_message(error, message.data(), message.size());
            throw Error("pre-tokenizer pattern '" + std::string(source) + "' does not compile at offset " +
                        std::to_string(error_offset) + ": " + reinterpret_cast<const char*>(message.data()));
        }
        pcre2_jit_compile(pattern->code, PCRE2_JIT_COMPLETE);  // interpreted matching still works if JIT fails
        patterns_.push_back(std::move(pattern));
    }
}

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
    // Pieces are byte ranges of `text`; each pattern re-splits every piece of the previous one, matching
    // inside the piece alone so lookaheads and '$' stop at its end.
    std::vector<std::pair<size_t, size_t>> pieces;
    if (!text.empty()) pieces.emplace_back(0, text.size());
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(nullptr, &pcre2_match_data_free);
    for (const auto& pattern : patterns_) {
        match.reset(pcre2_match_data_create_from_pattern(pattern->code, nullptr));
        if (!match) throw Error("pre-tokenizer: out of memory for PCRE2 match data");
        std::vector<std::pair<size_t, size_t>> next;
        for (const auto& [begin, end] : pieces) {
            const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data() + begin);
            const size_t length = end - begin;
            size_t cursor = 0;  // end of the last emitted piece
            size_t start = 0;   // where the next search starts
            while (start < length) {
                const int rc = pcre2_match(pattern->code, subject, length, start, PCRE2_NO_UTF_CHECK, match.get(),
                                           nullptr);
                if (rc == PCRE2_ERROR_NOMATCH) break;
                if (rc < 0) {
                    std::array<PCRE2_UCHAR, 256> message{};
                    pcre2_get_error_message(rc, message.data(), message.size());
                    throw Error(std::string("pre-tokenizer: regex match failed: ") +
                                reinterpret_cast<const char*>(message.data()));
                }
                const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
                const size_t match_begin = ovector[0];
                const size_t match_end = ovector[1];
                if (match_end == match_begin) {
                    // An empty match produces no piece; step over one whole character.
                    start = match_begin + 1;
                    while (start < length && (subject[start] & 0xC0) == 0x80) ++start;
                    continue;
                }
                if (match_begin > cursor) next.emplace_back(begin + cursor, begin + match_begin);
                next.emplace_back(begin + match_begin, begin + match_end);
                cursor = start = match_end;
            }
            if (cursor < length) next.emplace_back(begin + cursor, end);
        }
        pieces = std::move(next);
    }
    std::vector<std::string> words;
    words.reserve(pieces.size());
    for (const auto& [begin, end] : pieces) words.emplace_back(text.substr(begin, end - begin));
    return words;
}

}  // namespace cellm
