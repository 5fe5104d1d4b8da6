// SentencePiece-style BPE (GGUF tokenizer model "llama": Llama 2, Gemma), the way llama.cpp's llm_tokenizer_spm
// runs it: spaces become U+2581, the text splits into UTF-8 characters, and the adjacent pair whose joined
// spelling is a token with the highest score merges first (leftmost on ties) until no pair is a token; a
// character that is still not a token falls back to its <0xXX> byte tokens.
#pragma once

#include "tokenize/tokenizer.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cellm {

// `ids` maps spellings to ids and must outlive the encoder; scores[id] is each token's merge score (never NaN);
// unk, a valid id, stands for a byte that has no byte token (where llama.cpp would throw).
std::unique_ptr<Tokenizer::Encoder> make_sentencepiece_encoder(const std::unordered_map<std::string, int32_t>& ids,
                                                               std::vector<float> scores, int32_t unk);

// The spelling of the byte token for `byte`: "<0x0A>".
std::string byte_token_text(unsigned char byte);
// Text as SentencePiece spells it: every space as U+2581.
std::string sentencepiece_escape(std::string_view text);
// A normal token's text as it reads: U+2581 back to a space.
std::string sentencepiece_unescape(std::string_view text);

}  // namespace cellm
