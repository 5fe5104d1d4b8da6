// Pre-tokenization for byte-level BPE: the regex splits that cut text into the words BPE merges within,
// selected by tokenizer.ggml.pre exactly as llama.cpp (llama-vocab.cpp) selects them.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cellm {

// Per-pre-tokenizer behaviour besides the split patterns (llama.cpp keeps these next to the pre name).
struct PreTokenizerTraits {
    bool ignore_merges = false;    // a word that is already a token is taken whole, without merging
    bool default_add_bos = false;  // tokenizer.ggml.add_bos_token overrides it when present
    bool always_add_bos = false;   // BOS even where tokenizer.ggml.add_bos_token says false (Gemma 4)
    // SentencePiece-style BPE (Gemma 4): spaces are spelled U+2581 before splitting, symbols are UTF-8
    // characters rather than GPT-2 byte-level characters, and a character missing from the vocabulary falls back
    // to <0xXX> byte tokens.
    bool spm_style = false;
    bool whole_newline_runs = false;  // a word of newlines that is a token is taken whole, without merging
};

class PreTokenizer {
public:
    // The pre-tokenizer llama.cpp maps `pre` to ("default" when empty). Throws cellm::Error naming an unknown
    // pre name.
    static std::unique_ptr<PreTokenizer> for_name(std::string_view pre);
    // A pre-tokenizer running `patterns` one after another, each splitting the pieces of the previous one
    // (matches and the text between them both become pieces, as HF's Split with behavior "isolated").
    explicit PreTokenizer(std::span<const std::string_view> patterns, PreTokenizerTraits traits = {});
    ~PreTokenizer();
    PreTokenizer(const PreTokenizer&) = delete;
    PreTokenizer& operator=(const PreTokenizer&) = delete;

    // Splits valid UTF-8 text (see utf8::sanitize) into words; concatenated they give back `text`.
    std::vector<std::string> split(std::string_view text) const;
    const PreTokenizerTraits& traits() const { return traits_; }

private:
    struct Pattern;
    std::vector<std::unique_ptr<Pattern>> patterns_;
    PreTokenizerTraits traits_;
};

}  // namespace cellm
