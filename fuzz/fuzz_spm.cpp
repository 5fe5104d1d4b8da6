// libFuzzer target: the SentencePiece tokenizer ("llama"). The synthetic models only carry a byte-level BPE
// vocabulary, so this one is derived from it the way a SentencePiece model spells the same pieces: every
// multi-byte merge result becomes a piece (U+2581 for spaces, earlier merges scoring higher), plus <unk>, <s>,
// </s>, Gemma's turn markers and the 256 <0xXX> byte tokens. Tokenizers with and without add_space_prefix.
// Input layout: tokenizer_fuzz.h.
#include "synthetic_tokenizer.h"
#include "tokenizer_fuzz.h"
#include "vocab_view.h"

#include <cstdio>
#include <map>
#include <set>

namespace {

std::vector<std::unique_ptr<cellm::Tokenizer>> tokenizers;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const cellm::synthetic::Vocabulary vocab = cellm::synthetic::build_vocabulary(512);
    std::map<std::string, char> byte_of;  // GPT-2 byte symbol -> byte
    for (int b = 0; b < 256; ++b) byte_of[cellm::synthetic::byte_symbol(static_cast<uint8_t>(b))] = static_cast<char>(b);
    const std::string marker = "\xe2\x96\x81";

    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "<start_of_turn>", "<end_of_turn>"};
    std::vector<int32_t> types = {2, 3, 3, 3, 3};
    std::vector<float> scores(5, 0.0f);
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", b);
        tokens.push_back(name);
        types.push_back(6);
        scores.push_back(0.0f);
    }
    std::set<std::string> seen(tokens.begin(), tokens.end());
    const auto add_piece = [&](const std::string& piece, float score) {
        if (piece.empty() || !seen.insert(piece).second) return;
        tokens.push_back(piece);
        types.push_back(1);
        scores.push_back(score);
    };
    for (const char* c : {"a", "b", "c", "d", "e", "h", "i", "l", "o", "r", "t", "w", " "}) {
        add_piece(std::string(c) == " " ? marker : std::string(c), -1000.0f);
    }
    for (size_t i = 0; i < vocab.merges.size(); ++i) {
        // "left right" in byte symbols -> the joined raw bytes, spaces as the marker.
        std::string joined, raw;
        for (const char ch : vocab.merges[i]) {
            if (ch != ' ') joined += ch;
        }
        for (size_t at = 0; at < joined.size();) {
            size_t len = 1;
            while (at + len <= joined.size() && byte_of.find(joined.substr(at, len)) == byte_of.end()) ++len;
            if (at + len > joined.size()) break;
            const char byte = byte_of[joined.substr(at, len)];
            raw += byte == ' ' ? marker : std::string(1, byte);
            at += len;
        }
        add_piece(raw, -static_cast<float>(i + 1));
    }
    for (const bool space_prefix : {true, false}) {
        cellm::fuzz::VocabView v;
        v.string("tokenizer.ggml.model", "llama");
        v.string("tokenizer.ggml.pre", "default");
        v.strings("tokenizer.ggml.tokens", tokens);
        v.i32s("tokenizer.ggml.token_type", types);
        v.f32s("tokenizer.ggml.scores", scores);
        v.u32("tokenizer.ggml.bos_token_id", 1);
        v.u32("tokenizer.ggml.eos_token_id", 2);
        v.u32("tokenizer.ggml.unknown_token_id", 0);
        v.boolean("tokenizer.ggml.add_space_prefix", space_prefix);
        tokenizers.push_back(cellm::Tokenizer::from_model(v.view()));
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    cellm::fuzz::run_input(tokenizers, data, size);
    return 0;
}
