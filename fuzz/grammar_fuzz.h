// What fuzz_grammar and fuzz_json_schema share: compile the grammar for a small vocabulary (bytes, a few words
// and multi-byte pieces), then feed the text token by token, checking each mask against the recognizer.
#pragma once

#include "grammar/grammar.h"
#include "grammar/matcher.h"

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

namespace cellm::grammar::fuzz {

enum class Kind { Gbnf, JsonSchema };

inline std::shared_ptr<const TokenVocabulary> vocabulary() {
    static const auto v = [] {
        std::vector<std::string> tokens{"<eos>"};
        for (int c = 1; c < 256; ++c) tokens.emplace_back(1, static_cast<char>(c));
        for (const char* w : {"\":", "\",\"", "{\"", "\"}", "true", "null", "12", "\xc3\xa9", "\xe2\x82", "ab", "\\u"})
            tokens.emplace_back(w);
        return std::make_shared<const TokenVocabulary>(std::move(tokens), std::vector<int32_t>{0});
    }();
    return v;
}

// `input` is the grammar text, then optionally a NUL byte and the text to feed.
inline void run(std::string_view input, Kind kind) {
    const size_t nul = input.find('\0');
    const std::string_view grammar_text = input.substr(0, nul);
    const std::string_view feed = nul == std::string_view::npos ? std::string_view{} : input.substr(nul + 1);
    std::shared_ptr<const CompiledGrammar> compiled;
    try {
        Grammar g = kind == Kind::Gbnf ? Grammar::from_gbnf(grammar_text) : Grammar::from_json_schema(grammar_text, {.validation = (input.size() & 1) != 0});
        compiled = std::make_shared<const CompiledGrammar>(std::move(g), vocabulary());
    } catch (const GrammarError&) {
        return;
    }
    GrammarMatcher matcher(compiled);
    Recognizer reference(compiled->grammar());
    std::vector<uint64_t> mask(vocabulary()->mask_words());
    // Feed byte tokens (ids 1..255 are the single bytes); each must be in the mask exactly when the recognizer
    // takes it.
    for (size_t i = 0; i < feed.size() && i < 256; ++i) {
        const auto byte = static_cast<uint8_t>(feed[i]);
        matcher.fill_mask(mask);
        Recognizer copy = reference;
        const bool expected = byte != 0 && copy.feed(std::string_view(&feed[i], 1));
        const bool in_mask = byte != 0 && (mask[byte / 64] >> (byte % 64) & 1);
        if (expected != in_mask) std::abort();
        if (!expected) return;
        if (!matcher.accept_token(byte)) std::abort();
        reference = std::move(copy);
        if (matcher.can_end() != reference.accepting()) std::abort();
    }
}

}  // namespace cellm::grammar::fuzz
