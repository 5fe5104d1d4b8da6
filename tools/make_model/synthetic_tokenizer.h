// A small but real byte-level BPE vocabulary (GPT-2 style) for synthetic models: every byte has a token, a
// few dozen English merges on top, ChatML control tokens, and unused filler up to the model's vocab size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cellm::synthetic {

// GGUF's tokenizer.ggml.token_type values.
enum TokenType : int32_t { token_normal = 1, token_control = 3, token_unused = 5 };

struct Vocabulary {
    std::vector<std::string> tokens;  // token id -> text in GPT-2's byte-to-unicode alphabet
    std::vector<int32_t> types;       // TokenType per token
    std::vector<std::string> merges;  // "left right", highest priority first
    uint32_t bos_id = 0;              // <|im_start|>
    uint32_t eos_id = 0;              // <|im_end|>
};

// GPT-2's printable stand-in for a byte ("Ġ" for a space), UTF-8 encoded.
std::string byte_symbol(uint8_t byte);

// Byte symbols (token id = byte value), merges, specials, then filler; throws std::invalid_argument when
// `n_vocab` cannot hold the fixed tokens.
Vocabulary build_vocabulary(uint32_t n_vocab);

// ChatML, as SmolLM2-Instruct uses it.
extern const char* const chatml_template;

}  // namespace cellm::synthetic
