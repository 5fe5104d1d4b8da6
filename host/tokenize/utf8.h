// UTF-8 helpers shared by the tokenizer, the pre-tokenizer and the streaming decoder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cellm::utf8 {

inline constexpr uint32_t replacement_char = 0xFFFD;

// Length of the sequence a lead byte announces (1 for ASCII and for stray continuation bytes).
inline size_t sequence_length(unsigned char lead) {
    if (lead < 0x80) return 1;
    if ((lead & 0xE0) == 0xC0) return 2;
    if ((lead & 0xF0) == 0xE0) return 3;
    if ((lead & 0xF8) == 0xF0) return 4;
    return 1;
}

inline void append(std::string& out, uint32_t cpt) {
    if (cpt < 0x80) {
        out += static_cast<char>(cpt);
    } else if (cpt < 0x800) {
        out += static_cast<char>(0xC0 | (cpt >> 6));
        out += static_cast<char>(0x80 | (cpt & 0x3F));
    } else if (cpt < 0x10000) {
        out += static_cast<char>(0xE0 | (cpt >> 12));
        out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cpt & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cpt >> 18));
        out += static_cast<char>(0x80 | ((cpt >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cpt & 0x3F));
    }
}

// Decodes the code point at `pos` and advances past it. Like llama.cpp, a malformed byte yields U+FFFD and
// consumes one byte; surrogates and values past U+10FFFF also become U+FFFD so the result is valid UTF-8.
inline uint32_t next(std::string_view s, size_t& pos) {
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
    const unsigned char lead = byte(pos);
    const size_t len = sequence_length(lead);
    if (len == 1) {
        ++pos;
        return lead < 0x80 ? lead : replacement_char;
    }
    if (pos + len > s.size()) {
        ++pos;
        return replacement_char;
    }
    uint32_t cpt = lead & (0x7F >> len);
    for (size_t i = 1; i < len; ++i) {
        if ((byte(pos + i) & 0xC0) != 0x80) {
            ++pos;
            return replacement_char;
        }
        cpt = (cpt << 6) | (byte(pos + i) & 0x3F);
    }
    pos += len;
    if ((cpt >= 0xD800 && cpt <= 0xDFFF) || cpt > 0x10FFFF) return replacement_char;
    return cpt;
}

// `s` with every malformed sequence replaced by U+FFFD (and overlong forms re-encoded), as llama.cpp reads it.
inline std::string sanitize(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t pos = 0; pos < s.size();) append(out, next(s, pos));
    return out;
}

}  // namespace cellm::utf8
