// Runs a ToolCallParser over a text split in several ways and checks that every split gives the same result.
#pragma once

#include "tools/tool_call_parser.h"

#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

namespace cellm::tools {
// gtest's name for a format parameter.
inline void PrintTo(ToolFormat format, std::ostream* os) { *os << tool_format_name(format); }
}  // namespace cellm::tools

namespace cellm::tools::test {

struct Parsed {
    std::string content;           // content deltas concatenated
    std::vector<ToolCall> calls;   // parser.calls()
    std::map<int32_t, std::string> names, arguments;  // from the deltas, by call index
    bool truncated = false;
    bool malformed = false;
};

// One run over `pieces`, checking the deltas' own rules on the way. `tools`: as the parser's constructor takes.
inline Parsed run_pieces(ToolFormat format, const std::vector<std::string>& pieces, const std::vector<Tool>& tools = {}) {
    ToolCallParser parser(format, "call_", tools);
    Parsed out;
    auto take = [&](const std::vector<ToolCallParser::Delta>& deltas) {
        for (const auto& d : deltas) {
            switch (d.kind) {
            case ToolCallParser::Delta::Content:
                EXPECT_FALSE(d.text.empty());
                out.content += d.text;
                break;
            case ToolCallParser::Delta::CallStart:
                EXPECT_EQ(out.names.count(d.index), 0u) << "call announced twice";
                EXPECT_EQ(d.id, "call_" + std::to_string(d.index));
                out.names[d.index] = d.text;
                break;
            case ToolCallParser::Delta::Arguments:
                EXPECT_EQ(out.names.count(d.index), 1u) << "arguments before the call's name";
                out.arguments[d.index] += d.text;
                break;
            }
        }
    };
    for (const std::string& piece : pieces) take(parser.feed(piece));
    take(parser.finish());
    EXPECT_EQ(out.content, parser.content());
    out.calls = parser.calls();
    out.truncated = parser.truncated();
    out.malformed = parser.malformed();
    for (const ToolCall& call : out.calls) {
        const int32_t index = std::stoi(call.id.substr(5));
        EXPECT_EQ(out.names[index], call.name);
        EXPECT_EQ(out.arguments[index], call.arguments);
    }
    return out;
}

inline void expect_same(const Parsed& a, const Parsed& b, const std::string& how) {
    EXPECT_EQ(a.content, b.content) << how;
    ASSERT_EQ(a.calls.size(), b.calls.size()) << how;
    for (size_t i = 0; i < a.calls.size(); ++i) {
        EXPECT_EQ(a.calls[i].id, b.calls[i].id) << how;
        EXPECT_EQ(a.calls[i].name, b.calls[i].name) << how;
        EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments) << how;
    }
    EXPECT_EQ(a.names, b.names) << how;
    EXPECT_EQ(a.arguments, b.arguments) << how;
    EXPECT_EQ(a.truncated, b.truncated) << how;
    EXPECT_EQ(a.malformed, b.malformed) << how;
}

// The text whole, byte by byte, and in random splits: all must agree. Returns the whole-text result.
inline Parsed parse(ToolFormat format, const std::string& text, const std::vector<Tool>& tools = {}) {
    Parsed whole = run_pieces(format, {text}, tools);
    std::vector<std::string> bytes;
    for (char c : text) bytes.emplace_back(1, c);
    expect_same(whole, run_pieces(format, bytes, tools), "byte by byte: " + text);
    std::mt19937 rng(1234);
    for (int round = 0; round < 8; ++round) {
        std::vector<std::string> pieces;
        for (size_t pos = 0; pos < text.size();) {
            size_t n = std::uniform_int_distribution<size_t>(1, 9)(rng);
            pieces.push_back(text.substr(pos, n));
            pos += n;
        }
        expect_same(whole, run_pieces(format, pieces, tools), "random split: " + text);
    }
    return whole;
}

}  // namespace cellm::tools::test
