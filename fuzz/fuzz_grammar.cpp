// libFuzzer target: GBNF grammars (parse, lower to bytes, token-mask compile) and the matcher running on them.
// The input is a grammar, then optionally a NUL byte and text to feed; the vocabulary is small and fixed so
// every compile stays quick. Every rejection must be a GrammarError; anything else escaping is a finding, as is
// a mask that disagrees with the recognizer.
#include "grammar_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    cellm::grammar::fuzz::run(std::string_view(reinterpret_cast<const char*>(data), size), cellm::grammar::fuzz::Kind::Gbnf);
    return 0;
}
