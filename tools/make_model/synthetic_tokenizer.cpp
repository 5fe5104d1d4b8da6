#include "synthetic_tokenizer.h"

#include <stdexcept>
#include <string_view>

namespace cellm::synthetic {
namespace {

// Common English pairs, highest priority first, written in byte symbols ("Ġ" is a space). Each side is a
// byte symbol or the result of an earlier merge.
constexpr std::string_view merge_rules[] = {
    "Ġ t", "h e", "i n", "e r", "a n", "Ġ a", "o n", "r e", "Ġt he", "Ġ s", "o u", "e n", "Ġ w", "i s",
    "a t", "Ġ o", "Ġ c", "o r", "e s", "in g", "Ġ b", "Ġ f", "i t", "Ġ m", "Ġ h", "l l", "Ġ p", "e d",
    "Ġo f", "Ġa n", "Ġan d", "Ġ i", "Ġ d", "Ġ l", "Ġ n", "Ġ T", "Ġ I", "Ġ H", "l o", "Ġw h", "Ġ y",
    "Ġy ou", "Ġi s", "Ġt o", "Ġi n", "Ġh e", "Ġ g", "a r", "Ġs t", "l e",
};

constexpr std::string_view special_tokens[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else {  // the byte alphabet stays below U+0800
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

}  // namespace

const char* const chatml_template =
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

std::string byte_symbol(uint8_t byte) {
    // Printable Latin-1 bytes stand for themselves; the rest map, in byte order, to U+0100 onwards.
    const auto printable = [](uint32_t b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; };
    uint32_t cp = byte;
    if (!printable(byte)) {
        cp = 256;
        for (uint32_t b = 0; b < byte; ++b) cp += printable(b) ? 0 : 1;
    }
    std::string out;
    append_utf8(out, cp);
    return out;
}

Vocabulary build_vocabulary(uint32_t n_vocab) {
    Vocabulary v;
    for (uint32_t b = 0; b < 256; ++b) v.tokens.push_back(byte_symbol(static_cast<uint8_t>(b)));
    for (std::string_view rule : merge_rules) {
        const size_t space = rule.find(' ');
        v.merges.emplace_back(rule);
        v.tokens.push_back(std::string(rule.substr(0, space)) + std::string(rule.substr(space + 1)));
    }
    v.types.assign(v.tokens.size(), token_normal);
    for (std::string_view special : special_tokens) {
        v.tokens.emplace_back(special);
        v.types.push_back(token_control);
    }
    v.bos_id = static_cast<uint32_t>(v.tokens.size() - 2);
    v.eos_id = static_cast<uint32_t>(v.tokens.size() - 1);
    if (n_vocab < v.tokens.size()) {
        throw std::invalid_argument("vocab size " + std::to_string(n_vocab) + " is below the " +
                                    std::to_string(v.tokens.size()) + " tokens the synthetic tokenizer needs");
    }
    for (uint32_t i = static_cast<uint32_t>(v.tokens.size()); i < n_vocab; ++i) {
        v.tokens.push_back("<|unused_" + std::to_string(i) + "|>");
        v.types.push_back(token_unused);
    }
    return v;
}

}  // namespace cellm::synthetic
