// The body both tokenizer targets share. Input: byte 0 = flags (bit 0 add_bos, bit 1 parse_special, bits 2..3
// pick one of the prepared tokenizers), bytes 1..2 = text length n (little endian, clipped), then n bytes of
// text to encode, then 16-bit values read as token ids to stream-decode (a few of them outside the vocabulary).
#pragma once

#include "error.h"
#include "tokenize/tokenizer.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace cellm::fuzz {

inline void run_tokenizer(const Tokenizer& tok, uint8_t flags, std::string_view text, const uint8_t* id_bytes, size_t n_id_bytes) {
    const std::vector<int32_t> ids = tok.encode(text, (flags & 1) != 0, (flags & 2) != 0);
    for (const int32_t id : ids) {
        if (id < 0 || id >= tok.n_vocab()) {
            std::fprintf(stderr, "encode produced id %d outside [0, %d)\n", id, tok.n_vocab());
            std::abort();
        }
    }
    // Decoding what encode produced must work, and streaming must give the same bytes in the end.
    const std::string whole = tok.decode(ids);
    StreamDecoder stream(tok);
    std::string streamed;
    for (const int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    if (streamed != whole) {
        std::fprintf(stderr, "StreamDecoder output differs from decode\n");
        std::abort();
    }

    // Arbitrary ids: valid ones decode, invalid ones throw cellm::Error, both through StreamDecoder.
    const int32_t n = tok.n_vocab();
    StreamDecoder any(tok);
    for (size_t i = 0; i + 1 < n_id_bytes; i += 2) {
        const int32_t raw = id_bytes[i] | (id_bytes[i + 1] << 8);
        const int32_t id = raw % (n + 8) - 4;
        try {
            any.push(id);
            (void)tok.token_text(id);
            (void)tok.is_special(id);
            (void)tok.is_end_of_generation(id);
        } catch (const Error&) {
            if (id >= 0 && id < n) {
                std::fprintf(stderr, "valid id %d rejected\n", id);
                std::abort();
            }
        }
    }
    any.flush();
}

inline void run_input(const std::vector<std::unique_ptr<Tokenizer>>& toks, const uint8_t* data, size_t size) {
    if (size < 3) return;
    const uint8_t flags = data[0];
    size_t n_text = static_cast<size_t>(data[1] | (data[2] << 8));
    data += 3;
    size -= 3;
    if (n_text > size) n_text = size;
    const Tokenizer& tok = *toks[(flags >> 2) % toks.size()];
    run_tokenizer(tok, flags, std::string_view(reinterpret_cast<const char*>(data), n_text), data + n_text, size - n_text);
}

}  // namespace cellm::fuzz
