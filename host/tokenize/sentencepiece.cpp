#include "tokenize/sentencepiece.h"

#include "tokenize/utf8.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <queue>

namespace cellm {

namespace {

constexpr std::string_view whitespace_marker = "\xe2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
    std::string out;
    out.reserve(text.size());
    size_t begin = 0;
    for (size_t at = text.find(from); at != std::string_view::npos; at = text.find(from, begin)) {
        out.append(text, begin, at - begin).append(to);
        begin = at + from.size();
    }
    return out.append(text.substr(begin));
}

class SentencePieceEncoder final : public Tokenizer::Encoder {
public:
    SentencePieceEncoder(const std::unordered_map<std::string, int32_t>& ids, std::vector<float> scores, int32_t unk)
        : ids_(ids), scores_(std::move(scores)) {
        for (size_t b = 0; b < 256; ++b) {
            byte_token_[b] = lookup(byte_token_text(static_cast<unsigned char>(b)));
            if (byte_token_[b] < 0) byte_token_[b] = lookup(std::string(1, static_cast<char>(b)));
            if (byte_token_[b] < 0) byte_token_[b] = unk;
        }
    }

    void encode(std::string_view raw, std::vector<int32_t>& out) const override {
        const std::string text = sentencepiece_escape(raw);
        // One symbol per UTF-8 character (the caller passes valid UTF-8).
        std::vector<Symbol> symbols;
        for (size_t pos = 0; pos < text.size();) {
            const auto lead = static_cast<unsigned char>(text[pos]);
            const size_t len = std::min(utf8::sequence_length(lead), text.size() - pos);
            const auto index = static_cast<int32_t>(symbols.size());
            symbols.push_back({lookup(text.substr(pos, len)), index - 1, pos + len < text.size() ? index + 1 : -1,
                               static_cast<uint32_t>(pos), static_cast<uint32_t>(len)});
            pos += len;
        }
        std::priority_queue<Bigram> queue;
        const auto try_add_bigram = [&](int32_t left, int32_t right) {
            if (left < 0 || right < 0) return;
            const uint32_t size = symbols[left].n_bytes + symbols[right].n_bytes;
            const int32_t id = lookup(text.substr(symbols[left].begin, size));
            if (id >= 0) queue.push({scores_[id], left, right, size, id});
        };
        for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add_bigram(i - 1, i);
        while (!queue.empty()) {
            const Bigram bigram = queue.top();
            queue.pop();
            Symbol& left = symbols[bigram.left];
            Symbol& right = symbols[bigram.right];
            // Stale entries: a side was merged away or has grown since the pair was queued (symbols only grow,
            // so an unchanged total size means an unchanged pair).
            if (left.n_bytes == 0 || right.n_bytes == 0 || left.n_bytes + right.n_bytes != bigram.size) continue;
            left.id = bigram.id;
            left.n_bytes += right.n_bytes;
            right.n_bytes = 0;
            left.next = right.next;
            if (right.next >= 0) symbols[right.next].prev = bigram.left;
            try_add_bigram(left.prev, bigram.left);
            try_add_bigram(bigram.left, left.next);
        }
        for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
            const Symbol& symbol = symbols[i];
            if (symbol.id >= 0) {
                out.push_back(symbol.id);
                continue;
            }
            // Only single characters can be missing from the vocabulary: merges always form tokens.
            for (uint32_t b = symbol.begin; b < symbol.begin + symbol.n_bytes; ++b) {
                out.push_back(byte_token_[static_cast<unsigned char>(text[b])]);
            }
        }
    }

private:
    struct Symbol {
        int32_t id;    // the token this symbol spells, -1 for a character missing from the vocabulary
        int32_t prev;  // neighbours, -1 at the ends
        int32_t next;
        uint32_t begin;    // byte offset in the escaped text
        uint32_t n_bytes;  // 0 once merged into its left neighbour
    };
    struct Bigram {
        float score;
        int32_t left, right;
        uint32_t size;
        int32_t id;
        // Highest score first, then leftmost: the order llama.cpp merges in.
        bool operator<(const Bigram& other) const {
            return score < other.score || (score == other.score && left > other.left);
        }
    };

    int32_t lookup(const std::string& text) const {
        const auto it = ids_.find(text);
        return it == ids_.end() ? -1 : it->second;
    }

    const std::unordered_map<std::string, int32_t>& ids_;
    std::vector<float> scores_;
    std::array<int32_t, 256> byte_token_{};  // <0xXX>, else the byte as a one-character token, else unknown
};

}  // namespace

std::unique_ptr<Tokenizer::Encoder> make_sentencepiece_encoder(const std::unordered_map<std::string, int32_t>& ids,
                                                               std::vector<float> scores, int32_t unk) {
    return std::make_unique<SentencePieceEncoder>(ids, std::move(scores), unk);
}

std::string byte_token_text(unsigned char byte) {
    std::array<char, 7> hex{};
    std::snprintf(hex.data(), hex.size(), "<0x%02X>", static_cast<unsigned>(byte));
    return hex.data();
}

std::string sentencepiece_escape(std::string_view text) { return replace_all(text, " ", whitespace_marker); }

std::string sentencepiece_unescape(std::string_view text) { return replace_all(text, whitespace_marker, " "); }

}  // namespace cellm
