// libFuzzer target: the tool-call parser and parse_tools. Byte 0 picks the format; the rest is generated text,
// fed to ToolCallParser in pieces whose lengths come from the input's own bytes, and also read as a `tools`
// array. Nothing may escape but cellm::Error (parse_tools) and nlohmann's parse errors; the parser itself must
// never throw, and its content and calls must be the same as when the text is fed whole. Tools that parse get
// their call grammar in every format, which must compile (short of the grammar engine's size limits). The parser
// gets a fixed set of tools, whose schemas type QwenXml's parameter values.
#include "grammar/grammar.h"
#include "tools/tool.h"
#include "tools/tool_call_parser.h"
#include "tools/tool_format.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

using cellm::tools::ToolCallParser;
using cellm::tools::ToolFormat;

constexpr int kFormats = 6;  // ToolFormat's values

const std::vector<cellm::tools::Tool>& parser_tools() {
    static const std::vector<cellm::tools::Tool> tools = cellm::tools::parse_tools(nlohmann::ordered_json::parse(R"([
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
            "s": {"type": "string"}, "n": {"type": "integer"}, "b": {"type": "boolean"}, "e": {"enum": ["x", "y"]},
            "o": {"type": "object"}, "u": {"type": ["string", "null"]}, "a": {"anyOf": [{"type": "number"},
            {"type": "array"}]}}, "required": ["s"]}}},
        {"type": "function", "function": {"name": "g", "parameters": {"type": "object"}}}])"));
    return tools;
}

struct Result {
    std::string content;
    std::vector<cellm::ToolCall> calls;
    std::string deltas;  // every delta's text, in order
};

Result run(ToolFormat format, std::string_view text, std::string_view splits) {
    ToolCallParser parser(format, "c", parser_tools());
    Result out;
    auto take = [&](const std::vector<ToolCallParser::Delta>& deltas) {
        for (const auto& d : deltas) out.deltas += d.text;
    };
    size_t pos = 0, k = 0;
    while (pos < text.size()) {
        size_t n = splits.empty() ? text.size() : 1 + static_cast<uint8_t>(splits[k++ % splits.size()]) % 16;
        take(parser.feed(text.substr(pos, n)));
        pos += n;
    }
    take(parser.finish());
    out.content = parser.content();
    out.calls = parser.calls();
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const auto format = static_cast<ToolFormat>(data[0] % kFormats);
    const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
    const Result whole = run(format, text, {});
    const Result pieces = run(format, text, text);
    if (whole.content != pieces.content || whole.deltas != pieces.deltas || whole.calls.size() != pieces.calls.size())
        std::abort();
    for (size_t i = 0; i < whole.calls.size(); ++i)
        if (whole.calls[i].name != pieces.calls[i].name || whole.calls[i].arguments != pieces.calls[i].arguments)
            std::abort();

    std::vector<cellm::tools::Tool> tools;
    try {
        tools = cellm::tools::parse_tools(nlohmann::ordered_json::parse(text));
    } catch (const cellm::Error&) {
    } catch (const nlohmann::json::exception&) {
    }
    if (tools.empty()) return 0;
    for (int f = 0; f < kFormats; ++f) {
        std::string gbnf;
        try {
            gbnf = cellm::tools::call_grammar(static_cast<ToolFormat>(f), tools, {cellm::tools::ToolChoice::Required, {}},
                                              true)
                       .gbnf;
        } catch (const cellm::tools::ToolError&) {
            continue;
        }
        try {
            cellm::grammar::Grammar::from_gbnf(gbnf);
        } catch (const cellm::grammar::GrammarError& e) {
            const std::string what = e.what();
            if (what.find("large") == std::string::npos && what.find("limit") == std::string::npos) std::abort();
        }
    }
    return 0;
}
