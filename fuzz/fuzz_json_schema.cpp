// libFuzzer target: JSON Schema to grammar (json_schema.cpp, regex.cpp for `pattern`), then the compiled grammar
// and its matcher as fuzz_grammar runs them. The input is the schema, then optionally a NUL byte and text to feed.
#include "grammar_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    cellm::grammar::fuzz::run(std::string_view(reinterpret_cast<const char*>(data), size),
                              cellm::grammar::fuzz::Kind::JsonSchema);
    return 0;
}
