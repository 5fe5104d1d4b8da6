#include "base64.h"

#include <array>
#include <cstdio>
#include <string>

namespace cellm::server {

namespace {

constexpr uint8_t kNotInAlphabet = 0xff;

// Each byte's 6-bit value, or kNotInAlphabet.
constexpr std::array<uint8_t, 256> make_values() {
    std::array<uint8_t, 256> values{};
    values.fill(kNotInAlphabet);
    constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < alphabet.size(); ++i) {
        values[static_cast<unsigned char>(alphabet[i])] = static_cast<uint8_t>(i);
    }
    return values;
}
constexpr std::array<uint8_t, 256> kValues = make_values();

size_t padding_of(std::string_view text) {
    if (text.empty() || text.back() != '=') return 0;
    return text.size() >= 2 && text[text.size() - 2] == '=' ? 2 : 1;
}

std::string describe(char c) {
    char out[32];
    const auto byte = static_cast<unsigned char>(c);
    if (byte > 0x20 && byte < 0x7f) {
        std::snprintf(out, sizeof out, "'%c'", c);
    } else {
        std::snprintf(out, sizeof out, "byte 0x%02x", byte);
    }
    return out;
}

}  // namespace

size_t base64_decoded_size(std::string_view text) {
    const size_t full = text.size() / 4 * 3;
    const size_t padding = padding_of(text);
    return full >= padding ? full - padding : 0;
}

std::vector<uint8_t> decode_base64(std::string_view text) {
    // Characters first: a stray one (a line break, say) says more than the length it puts off.
    const size_t data_chars = text.size() - padding_of(text);
    std::vector<uint8_t> out;
    out.reserve(base64_decoded_size(text));
    uint32_t bits = 0;  // the low `n_bits` bits are decoded but not yet written
    int n_bits = 0;
    for (size_t i = 0; i < data_chars; ++i) {
        const uint8_t value = kValues[static_cast<unsigned char>(text[i])];
        if (value == kNotInAlphabet) {
            if (text[i] == '=') throw Base64Error("padding '=' at offset " + std::to_string(i) + " is not at the end");
            const bool url_safe = text[i] == '-' || text[i] == '_';
            throw Base64Error("invalid character " + describe(text[i]) + " at offset " + std::to_string(i) +
                              (url_safe ? " (this is URL-safe base64; standard base64 uses + and /)" : ""));
        }
        bits = (bits << 6) | value;
        n_bits += 6;
        if (n_bits >= 8) {
            n_bits -= 8;
            out.push_back(static_cast<uint8_t>(bits >> n_bits));
        }
    }
    if (text.size() % 4 != 0) {
        throw Base64Error("its length, " + std::to_string(text.size()) +
                          " characters, is not a multiple of 4 (base64 is padded with '=')");
    }
    // Before one '=' 2 bits are left over, before two 4; a canonical encoder leaves them 0.
    if ((bits & ((1u << n_bits) - 1)) != 0) {
        throw Base64Error("the last character before the padding, " + describe(text[data_chars - 1]) + " at offset " +
                          std::to_string(data_chars - 1) + ", has bits set beyond the data's last byte");
    }
    return out;
}

}  // namespace cellm::server
