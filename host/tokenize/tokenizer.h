// Text <-> token ids for a model, built from the GGUF-vocabulary metadata of its model view, with the same
// results as llama.cpp (llama-vocab.cpp): special tokens split out first, then the model's encoder, byte-level
// BPE ("gpt2") or SentencePiece ("llama", sentencepiece.h).
#pragma once

#include <cellm/tensor.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cellm {

// Immutable once built: encode, decode and the queries may be called from several threads at once.
class Tokenizer {
public:
    // Reads tokenizer.ggml.* and tokenizer.chat_template. Throws cellm::Error naming the missing or malformed
    // key (or the unsupported tokenizer model / pre-tokenizer).
    static std::unique_ptr<Tokenizer> from_model(const cellm_model_view& model);
    ~Tokenizer();
    Tokenizer(const Tokenizer&) = delete;
    Tokenizer& operator=(const Tokenizer&) = delete;

    // Token ids of `text`. add_bos prepends BOS (the caller decides, e.g. add_bos() unless the chat template
    // already wrote it); parse_special turns control-token text such as "<|im_start|>" into its token.
    // User-defined tokens are always matched whole, as in llama.cpp. Malformed UTF-8 reads as U+FFFD.
    std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;

    // The bytes a token stands for (byte-level decoded, or U+2581 read as a space, or a <0xXX> byte token's
    // byte); control, user-defined and unknown tokens give their text, unused ones nothing. Throws cellm::Error for an id outside the vocabulary.
    const std::string& token_bytes(int32_t id) const;
    // The token's spelling in the vocabulary (byte-level encoded, or with U+2581 for spaces).
    const std::string& token_text(int32_t id) const;
    // Concatenated token_bytes (what a streaming printer shows; no space clean-up). Throws for a bad id.
    std::string decode(std::span<const int32_t> ids) const;
    // The id spelled `text` in the vocabulary, or -1.
    int32_t find_token(std::string_view text) const;

    int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
    int32_t bos() const { return bos_; }  // -1 when the model has none
    int32_t eos() const { return eos_; }
    int32_t eot() const { return eot_; }
    bool add_bos() const { return add_bos_; }
    // eos, eot, eom and the end-of-turn tokens llama.cpp recognises by text (<|im_end|>, <|eot_id|>, ...).
    bool is_end_of_generation(int32_t id) const;
    // Control, user-defined or unknown tokens: the ones split out of text before the encoder runs.
    bool is_special(int32_t id) const;
    const std::string& model() const { return model_; }
    const std::string& pre() const { return pre_; }
    const std::string& chat_template() const { return chat_template_; }  // empty when the model has none

    // Splits a piece of text without special tokens into ids (one per tokenizer model).
    class Encoder {
    public:
        virtual ~Encoder() = default;
        virtual void encode(std::string_view text, std::vector<int32_t>& out) const = 0;
    };

    // llama.cpp's token attributes (a bit set, since EOG detection adds CONTROL to a token's own type).
    enum Attr : uint32_t {
        attr_undefined = 0,
        attr_unknown = 1u << 0,
        attr_unused = 1u << 1,
        attr_normal = 1u << 2,
        attr_control = 1u << 3,
        attr_user_defined = 1u << 4,
        attr_byte = 1u << 5,
    };

private:
    struct Token {
        std::string text;   // vocabulary spelling
        std::string bytes;  // what it decodes to
        uint32_t attr = attr_normal;
    };

    Tokenizer() = default;
    void check_id(int32_t id) const;

    std::vector<Token> tokens_;
    std::unordered_map<std::string, int32_t> ids_;
    std::vector<int32_t> specials_;  // split-out tokens, longest text first
    std::vector<int32_t> end_of_generation_;
    std::unique_ptr<Encoder> encoder_;
    std::string model_, pre_, chat_template_;
    int32_t bos_ = -1, eos_ = -1, eot_ = -1, eom_ = -1;
    bool add_bos_ = false;
    bool add_space_prefix_ = false;  // SentencePiece: a space before text at the start or after a special token
};

// Streaming-safe detokenization: returns only valid UTF-8 and holds back an incomplete tail (an emoji split
// across tokens comes out whole once its last byte arrives). Malformed bytes, which a model can generate, come
// out as U+FFFD, as utf8::sanitize reads them.
class StreamDecoder {
public:
    explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
    std::string push(int32_t id);
    // Whatever is held back (end of generation), an incomplete character as U+FFFD.
    std::string flush();

private:
    const Tokenizer& tokenizer_;
    std::string pending_;
};

}  // namespace cellm
