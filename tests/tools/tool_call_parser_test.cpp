// ToolCallParser on recorded-style outputs of every format, each fed whole, byte by byte and in random pieces.
#include "feed.h"

#include <gtest/gtest.h>

namespace cellm::tools {
namespace {

using test::parse;
using test::Parsed;

void expect_call(const Parsed& p, size_t i, const std::string& name, const std::string& arguments) {
    ASSERT_GT(p.calls.size(), i);
    EXPECT_EQ(p.calls[i].name, name);
    EXPECT_EQ(p.calls[i].arguments, arguments);
    EXPECT_EQ(p.calls[i].id, "call_" + std::to_string(i));
}

// ---- Hermes ----------------------------------------------------------------------------------------------------

TEST(ToolParserHermes, PlainText) {
    Parsed p = parse(ToolFormat::Hermes, "The weather is <b>nice</b> today, 3 < 4.\n");
    EXPECT_EQ(p.content, "The weather is <b>nice</b> today, 3 < 4.\n");
    EXPECT_TRUE(p.calls.empty());
    EXPECT_FALSE(p.truncated);
}

TEST(ToolParserHermes, OneCall) {
    Parsed p = parse(ToolFormat::Hermes,
                     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n"
                     "</tool_call>");
    EXPECT_EQ(p.content, "");
    ASSERT_EQ(p.calls.size(), 1u);
    expect_call(p, 0, "get_weather", "{\"city\": \"Paris\", \"days\": [1, 2]}");
}

TEST(ToolParserHermes, ParallelCalls) {
    Parsed p = parse(ToolFormat::Hermes,
                     "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
                     "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": \"}\\\"{\"}}\n</tool_call>\n");
    EXPECT_EQ(p.content, "");
    ASSERT_EQ(p.calls.size(), 2u);
    expect_call(p, 0, "a", "{}");
    expect_call(p, 1, "b", "{\"x\": \"}\\\"{\"}");
}

TEST(ToolParserHermes, ContentThenCall) {
    Parsed p = parse(ToolFormat::Hermes,
                     "Let me look that up.\n\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"cellm\"}}\n"
                     "</tool_call>");
    EXPECT_EQ(p.content, "Let me look that up.");
    expect_call(p, 0, "search", "{\"q\": \"cellm\"}");
}

TEST(ToolParserHermes, ContentBetweenAndAfterCalls) {
    Parsed p = parse(ToolFormat::Hermes,
                     "A <tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call> B <tool_call>{\"name\":\"g\","
                     "\"arguments\":{\"k\":1}}</tool_call> C");
    EXPECT_EQ(p.content, "A B C");
    ASSERT_EQ(p.calls.size(), 2u);
    expect_call(p, 1, "g", "{\"k\":1}");
}

TEST(ToolParserHermes, MalformedStructureIsContent) {
    // Qwen 3.5's XML form, a wrong key order, a non-object arguments value, an unterminated name.
    for (const char* text : {"<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>",
                             "<tool_call>{\"arguments\": {}, \"name\": \"f\"}</tool_call>",
                             "<tool_call>{\"name\": \"f\", \"arguments\": \"x\"}</tool_call>",
                             "<tool_call>{\"name\": 7, \"arguments\": {}}</tool_call> tail"}) {
        Parsed p = parse(ToolFormat::Hermes, text);
        EXPECT_EQ(p.content, text);
        EXPECT_TRUE(p.calls.empty());
        EXPECT_TRUE(p.names.empty());
        EXPECT_FALSE(p.truncated);
    }
}

TEST(ToolParserHermes, MalformedArgumentsAreDropped) {
    Parsed p = parse(ToolFormat::Hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": tru}}\n</tool_call>ok");
    EXPECT_TRUE(p.calls.empty());
    EXPECT_TRUE(p.malformed);
    EXPECT_EQ(p.names.at(0), "f");
    EXPECT_EQ(p.arguments.at(0), "{\"a\": tru}");
    EXPECT_EQ(p.content, "ok");
}

TEST(ToolParserHermes, TruncatedMidArguments) {
    Parsed p = parse(ToolFormat::Hermes, "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"text\": \"hel");
    EXPECT_EQ(p.content, "Sure.");
    EXPECT_TRUE(p.calls.empty());
    EXPECT_TRUE(p.truncated);
    EXPECT_EQ(p.names.at(0), "f");
    EXPECT_EQ(p.arguments.at(0), "{\"text\": \"hel");
}

TEST(ToolParserHermes, TruncatedBeforeTheName) {
    Parsed p = parse(ToolFormat::Hermes, "Hi <tool_call>\n{\"na");
    EXPECT_EQ(p.content, "Hi");
    EXPECT_TRUE(p.truncated);
    EXPECT_TRUE(p.names.empty());
}

TEST(ToolParserHermes, PartialMarkerAtTheEndIsContent) {
    Parsed p = parse(ToolFormat::Hermes, "x <tool_ca");
    EXPECT_EQ(p.content, "x <tool_ca");
    EXPECT_FALSE(p.truncated);
}

TEST(ToolParserHermes, MissingCloseMarker) {
    Parsed p = parse(ToolFormat::Hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n");
    expect_call(p, 0, "f", "{\"a\": 1}");
    EXPECT_EQ(p.content, "");
    EXPECT_FALSE(p.truncated);
    Parsed q = parse(ToolFormat::Hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_c");
    expect_call(q, 0, "f", "{\"a\": 1}");
    EXPECT_EQ(q.content, "");
}

TEST(ToolParserHermes, UnicodeInArguments) {
    Parsed p = parse(ToolFormat::Hermes,
                     "<tool_call>\n{\"name\": \"translate\", \"arguments\": {\"text\": \"héllo 世界 😀\", \"esc\": "
                     "\"\\u00e9\"}}\n</tool_call>");
    expect_call(p, 0, "translate", "{\"text\": \"héllo 世界 😀\", \"esc\": \"\\u00e9\"}");
}

TEST(ToolParserHermes, EscapedName) {
    Parsed p = parse(ToolFormat::Hermes, "<tool_call>{\"name\": \"a\\u005fb\", \"arguments\": {}}</tool_call>");
    expect_call(p, 0, "a_b", "{}");
}

// ---- SmolLM2 ---------------------------------------------------------------------------------------------------

TEST(ToolParserSmolLM2, PlainText) {
    Parsed p = parse(ToolFormat::SmolLM2, "Hello! I am SmolLM. <3\n");
    EXPECT_EQ(p.content, "Hello! I am SmolLM. <3\n");
}

TEST(ToolParserSmolLM2, OneCall) {
    Parsed p = parse(ToolFormat::SmolLM2,
                     "<tool_call>[\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n]</tool_call>");
    EXPECT_EQ(p.content, "");
    expect_call(p, 0, "get_weather", "{\"city\": \"Oslo\"}");
}

TEST(ToolParserSmolLM2, ParallelCalls) {
    Parsed p = parse(ToolFormat::SmolLM2,
                     "<tool_call>[{\"name\": \"a\", \"arguments\": {\"n\": 1}}, {\"name\": \"b\", \"arguments\": "
                     "{\"s\": \"]\"}}]</tool_call>");
    ASSERT_EQ(p.calls.size(), 2u);
    expect_call(p, 0, "a", "{\"n\": 1}");
    expect_call(p, 1, "b", "{\"s\": \"]\"}");
    EXPECT_EQ(p.content, "");
}

TEST(ToolParserSmolLM2, EmptyListIsNothing) {
    Parsed p = parse(ToolFormat::SmolLM2, "<tool_call>[]</tool_call>");
    EXPECT_EQ(p.content, "");
    EXPECT_TRUE(p.calls.empty());
    EXPECT_FALSE(p.truncated);
}

TEST(ToolParserSmolLM2, ContentThenCall) {
    Parsed p = parse(ToolFormat::SmolLM2, "Checking. <tool_call>[{\"name\": \"f\", \"arguments\": {}}]</tool_call>");
    EXPECT_EQ(p.content, "Checking.");
    expect_call(p, 0, "f", "{}");
}

TEST(ToolParserSmolLM2, MalformedJson) {
    Parsed p = parse(ToolFormat::SmolLM2, "<tool_call>[{\"name\": \"f\", \"arguments\": {\"a\": 1,}}]</tool_call>");
    EXPECT_TRUE(p.calls.empty());
    EXPECT_TRUE(p.malformed);
    Parsed q = parse(ToolFormat::SmolLM2, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>");
    EXPECT_EQ(q.content, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>");
    // After a complete call, text that does not go on with the list is read as text again.
    Parsed r = parse(ToolFormat::SmolLM2, "<tool_call>[{\"name\": \"f\", \"arguments\": {}}, oops");
    expect_call(r, 0, "f", "{}");
    EXPECT_EQ(r.content, " oops");
}

TEST(ToolParserSmolLM2, TruncatedMidArguments) {
    Parsed p = parse(ToolFormat::SmolLM2, "<tool_call>[{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", "
                                          "\"arguments\": {\"q\": [1, 2");
    ASSERT_EQ(p.calls.size(), 1u);
    expect_call(p, 0, "a", "{}");
    EXPECT_TRUE(p.truncated);
    EXPECT_EQ(p.names.at(1), "b");
}

TEST(ToolParserSmolLM2, UnicodeInArguments) {
    Parsed p = parse(ToolFormat::SmolLM2, "<tool_call>[{\"name\": \"f\", \"arguments\": {\"city\": \"Zürich\"}}]</tool_call>");
    expect_call(p, 0, "f", "{\"city\": \"Zürich\"}");
}

// ---- Llama3 and Gemma3 -----------------------------------------------------------------------------------------

class ToolParserJsonAnswer : public ::testing::TestWithParam<ToolFormat> {};

TEST_P(ToolParserJsonAnswer, PlainText) {
    Parsed p = parse(GetParam(), "  In JSON, an object looks like {\"a\": 1}. Use `jq`.\n");
    EXPECT_EQ(p.content, "  In JSON, an object looks like {\"a\": 1}. Use `jq`.\n");
    EXPECT_TRUE(p.calls.empty());
}

TEST_P(ToolParserJsonAnswer, OneCall) {
    Parsed p = parse(GetParam(), "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}");
    EXPECT_EQ(p.content, "");
    expect_call(p, 0, "get_weather", "{\"city\": \"Rome\"}");
}

TEST_P(ToolParserJsonAnswer, LeadingWhitespaceFenceAndArgumentsKey) {
    for (const char* text : {"\n\n{\"name\": \"f\", \"parameters\": {\"a\": 1}}\n",
                             "```json\n{\"name\": \"f\", \"parameters\": {\"a\": 1}}\n```",
                             " ```\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n```\n",
                             "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": 1}}"}) {
        Parsed p = parse(GetParam(), text);
        EXPECT_EQ(p.content, "") << text;
        ASSERT_EQ(p.calls.size(), 1u) << text;
        expect_call(p, 0, "f", "{\"a\": 1}");
    }
}

TEST_P(ToolParserJsonAnswer, NotACallIsContent) {
    for (const char* text : {"{\"name\": \"Bob\", \"age\": 30}", "```json\n{\"name\": \"Bob\"}\n```",
                             "```python\nprint(1)\n```", "{\"name\": \"f\", \"parameters\": [1]}"}) {
        Parsed p = parse(GetParam(), text);
        EXPECT_EQ(p.content, text);
        EXPECT_TRUE(p.calls.empty());
        EXPECT_FALSE(p.truncated);
    }
}

TEST_P(ToolParserJsonAnswer, ContentThenCall) {
    Parsed p = parse(GetParam(), "I'll check.\n{\"name\": \"f\", \"parameters\": {}}");
    EXPECT_EQ(p.content, "I'll check.");
    expect_call(p, 0, "f", "{}");
}

TEST_P(ToolParserJsonAnswer, CallsOneAfterAnother) {
    // Llama 3 has no parallel form; calls written one after another are read one by one.
    Parsed p = parse(GetParam(), "{\"name\": \"a\", \"parameters\": {}}\n{\"name\": \"b\", \"parameters\": {\"x\": 2}}");
    ASSERT_EQ(p.calls.size(), 2u);
    expect_call(p, 1, "b", "{\"x\": 2}");
    EXPECT_EQ(p.content, "");
}

TEST_P(ToolParserJsonAnswer, MalformedJson) {
    Parsed p = parse(GetParam(), "{\"name\": \"f\", \"parameters\": {\"a\": 01}}");
    EXPECT_TRUE(p.calls.empty());
    EXPECT_TRUE(p.malformed);
    EXPECT_EQ(p.content, "");
}

TEST_P(ToolParserJsonAnswer, Truncated) {
    Parsed p = parse(GetParam(), "{\"name\": \"f\", \"parameters\": {\"a\": \"x");
    EXPECT_TRUE(p.calls.empty());
    EXPECT_TRUE(p.truncated);
    Parsed q = parse(GetParam(), "```json\n{\"name\": \"f");
    EXPECT_TRUE(q.truncated);
    EXPECT_EQ(q.content, "");
    Parsed r = parse(GetParam(), "{\"nam");
    EXPECT_FALSE(r.truncated);
    EXPECT_EQ(r.content, "{\"nam");
}

TEST_P(ToolParserJsonAnswer, UnicodeInArguments) {
    Parsed p = parse(GetParam(), "{\"name\": \"f\", \"parameters\": {\"q\": \"ñandú — 東京\"}}");
    expect_call(p, 0, "f", "{\"q\": \"ñandú — 東京\"}");
}

INSTANTIATE_TEST_SUITE_P(Formats, ToolParserJsonAnswer, ::testing::Values(ToolFormat::Llama3, ToolFormat::Gemma3),
                         [](const auto& param_info) { return param_info.param == ToolFormat::Llama3 ? "Llama3" : "Gemma3"; });

// ---- FunctionGemma ---------------------------------------------------------------------------------------------

TEST(ToolParserFunctionGemma, PlainText) {
    Parsed p = parse(ToolFormat::FunctionGemma, "I can't do that <sorry>.");
    EXPECT_EQ(p.content, "I can't do that <sorry>.");
}

TEST(ToolParserFunctionGemma, OneCall) {
    Parsed p = parse(ToolFormat::FunctionGemma,
                     "<start_function_call>call:get_current_weather{location:<escape>Tokyo, {JP}<escape>,days:3,"
                     "metric:true,extra:null,tags:[<escape>a<escape>,2.5],nested:{k:<escape>v<escape>}}"
                     "<end_function_call>");
    EXPECT_EQ(p.content, "");
    expect_call(p, 0, "get_current_weather",
                "{\"location\":\"Tokyo, {JP}\",\"days\":3,\"metric\":true,\"extra\":null,\"tags\":[\"a\",2.5],"
                "\"nested\":{\"k\":\"v\"}}");
}

TEST(ToolParserFunctionGemma, ParallelCallsAndContent) {
    Parsed p = parse(ToolFormat::FunctionGemma,
                     "Sure: <start_function_call>call:a{}<end_function_call><start_function_call>call:b{x:<escape>"
                     "<end_function_call><escape>}<end_function_call>");
    EXPECT_EQ(p.content, "Sure:");
    ASSERT_EQ(p.calls.size(), 2u);
    expect_call(p, 0, "a", "{}");
    expect_call(p, 1, "b", "{\"x\":\"<end_function_call>\"}");
}

TEST(ToolParserFunctionGemma, MalformedIsContent) {
    for (const char* text : {"<start_function_call>call:f{a:}<end_function_call>",
                             "<start_function_call>f{a:1}<end_function_call>",
                             "<start_function_call>call:f{a:1<end_function_call>"}) {
        Parsed p = parse(ToolFormat::FunctionGemma, text);
        EXPECT_EQ(p.content, text);
        EXPECT_TRUE(p.calls.empty());
    }
}

TEST(ToolParserFunctionGemma, Truncated) {
    Parsed p = parse(ToolFormat::FunctionGemma, "ok <start_function_call>call:f{a:<escape>long te");
    EXPECT_EQ(p.content, "ok");
    EXPECT_TRUE(p.truncated);
    EXPECT_TRUE(p.names.empty());
}

TEST(ToolParserFunctionGemma, UnicodeAndBareWords) {
    Parsed p = parse(ToolFormat::FunctionGemma,
                     "<start_function_call>call:f{city:<escape>São Paulo 🌧<escape>,unit:celsius}<end_function_call>");
    expect_call(p, 0, "f", "{\"city\":\"São Paulo 🌧\",\"unit\":\"celsius\"}");
}

// ---- QwenXml ---------------------------------------------------------------------------------------------------

std::vector<Tool> xml_tools() {
    return parse_tools(nlohmann::ordered_json::parse(R"([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
            "zip": {"type": "string"}, "unit": {"enum": ["c", "f"]}, "opts": {"type": "object"},
            "tags": {"type": "array", "items": {"type": "number"}}, "note": {"type": ["string", "null"]}},
            "required": ["city"]}}},
        {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "code": {"type": "string"}}}}},
        {"type": "function", "function": {"name": "ping"}}])"));
}

Parsed parse_xml(const std::string& text) { return parse(ToolFormat::QwenXml, text, xml_tools()); }

TEST(ToolParserQwenXml, PlainText) {
    const std::string text = "Use <b>bold</b>, <function=x> and <parameter=y> as you like; 3 < 4.\n";
    Parsed p = parse_xml(text);
    EXPECT_EQ(p.content, text);
    EXPECT_TRUE(p.calls.empty());
    EXPECT_FALSE(p.truncated);
}

TEST(ToolParserQwenXml, OneCall) {
    Parsed p = parse_xml("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                         "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>");
    EXPECT_EQ(p.content, "");
    ASSERT_EQ(p.calls.size(), 1u);
    expect_call(p, 0, "get_weather", "{\"city\": \"Paris\", \"days\": 3}");
    EXPECT_FALSE(p.truncated);
    EXPECT_FALSE(p.malformed);
}

TEST(ToolParserQwenXml, ArgumentsStreamPerParameter) {
    ToolCallParser parser(ToolFormat::QwenXml, "c", xml_tools());
    auto d = parser.feed("<tool_call>\n<function=get_weather>\n<parameter=city>\nPa");
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].kind, ToolCallParser::Delta::CallStart);
    EXPECT_EQ(d[0].text, "get_weather");
    d = parser.feed("ris\n</parameter>\n<parameter=days>\n3\n</parameter>\n");
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].text, "{\"city\": \"Paris\", \"days\": 3");
    d = parser.feed("</function>\n</tool_call>");
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].text, "}");
    EXPECT_TRUE(parser.finish().empty());
}

TEST(ToolParserQwenXml, TwoCalls) {
    Parsed p = parse_xml("<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n"
                         "</tool_call>\n<tool_call>\n<function=ping>\n</function>\n</tool_call>\n");
    EXPECT_EQ(p.content, "");
    ASSERT_EQ(p.calls.size(), 2u);
    expect_call(p, 0, "get_weather", "{\"city\": \"Oslo\"}");
    expect_call(p, 1, "ping", "{}");
}

TEST(ToolParserQwenXml, ContentBeforeAndBetween) {
    Parsed p = parse_xml("<think>\nThe user wants weather.\n</think>\n\nLet me check.\n\n<tool_call>\n<function=ping>\n"
                         "</function>\n</tool_call> then <tool_call><function=ping></function></tool_call>");
    EXPECT_EQ(p.content, "<think>\nThe user wants weather.\n</think>\n\nLet me check. then");
    ASSERT_EQ(p.calls.size(), 2u);
    expect_call(p, 1, "ping", "{}");
}

TEST(ToolParserQwenXml, MultiLineStringValues) {
    // One newline after <parameter=K> and one before </parameter> are the template's; the rest is the value,
    // markup-like text included.
    Parsed p = parse_xml("<tool_call>\n<function=write_file>\n<parameter=path>\n/tmp/a b.py\n</parameter>\n"
                         "<parameter=code>\ndef f(x):\n    return x < 2 and \"</function>\"\n\n<parameter=y>\n"
                         "</param\n\n</parameter>\n</function>\n</tool_call>");
    expect_call(p, 0, "write_file",
                "{\"path\": \"/tmp/a b.py\", \"code\": \"def f(x):\\n    return x < 2 and \\\"</function>\\\"\\n\\n"
                "<parameter=y>\\n</param\\n\"}");
}

TEST(ToolParserQwenXml, ValuesTypedBySchema) {
    Parsed p = parse_xml("<tool_call>\n<function=get_weather>\n<parameter=city>\n3\n</parameter>\n"
                         "<parameter=days>\n 7 \n</parameter>\n<parameter=metric>\nTrue\n</parameter>\n"
                         "<parameter=zip>\n01234\n</parameter>\n<parameter=unit>\nc\n</parameter>\n"
                         "<parameter=opts>\n{\"a\": [1, 2], \"b\": {\"c\": null}}\n</parameter>\n"
                         "<parameter=tags>\n[1.5, 2]\n</parameter>\n<parameter=note>\nnull\n</parameter>\n"
                         "</function>\n</tool_call>");
    expect_call(p, 0, "get_weather",
                "{\"city\": \"3\", \"days\": 7, \"metric\": true, \"zip\": \"01234\", \"unit\": \"c\", \"opts\": "
                "{\"a\":[1,2],\"b\":{\"c\":null}}, \"tags\": [1.5,2], \"note\": null}");
    // A value that is not what its schema admits stays text; a string the schema admits beside null stays one.
    Parsed q = parse_xml("<tool_call>\n<function=get_weather>\n<parameter=city>\ntrue\n</parameter>\n"
                         "<parameter=days>\nthree\n</parameter>\n<parameter=metric>\n\"yes\"\n</parameter>\n"
                         "<parameter=note>\nrain\n</parameter>\n<parameter=opts>\n[1]\n</parameter>\n</function>\n"
                         "</tool_call>");
    expect_call(q, 0, "get_weather",
                "{\"city\": \"true\", \"days\": \"three\", \"metric\": \"\\\"yes\\\"\", \"note\": \"rain\", "
                "\"opts\": \"[1]\"}");
}

TEST(ToolParserQwenXml, WithoutSchema) {
    const std::string text = "<tool_call>\n<function=get_weather>\n<parameter=x>\n42\n</parameter>\n<parameter=y>\n"
                             "true\n</parameter>\n<parameter=z>\nhello world\n</parameter>\n<parameter=w>\n{\"k\": "
                             "null}\n</parameter>\n<parameter=s>\n\"q\"\n</parameter>\n<parameter=t>\nTrue\n"
                             "</parameter>\n<parameter=e>\n\n</parameter>\n</function>\n</tool_call>";
    const std::string want = "{\"x\": 42, \"y\": true, \"z\": \"hello world\", \"w\": {\"k\":null}, \"s\": \"q\", "
                             "\"t\": \"True\", \"e\": \"\"}";
    // No tools given, and parameters the function's schema does not declare: read the same way.
    expect_call(parse(ToolFormat::QwenXml, text), 0, "get_weather", want);
    expect_call(parse_xml(text), 0, "get_weather", want);
    expect_call(parse(ToolFormat::QwenXml, "<tool_call><function=nope><parameter=a b>\n-0.5e1\n</parameter>"
                                           "</function></tool_call>"),
                0, "nope", "{\"a b\": -5.0}");
}

TEST(ToolParserQwenXml, JsonBodyAsHermes) {
    Parsed p = parse_xml("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>");
    EXPECT_EQ(p.content, "");
    expect_call(p, 0, "get_weather", "{\"city\": \"Rome\"}");
}

TEST(ToolParserQwenXml, Truncated) {
    Parsed p = parse_xml("Sure.\n<tool_call>\n<function=write_file>\n<parameter=code>\nprint(1)\n</param");
    EXPECT_EQ(p.content, "Sure.");
    EXPECT_TRUE(p.calls.empty());
    EXPECT_TRUE(p.truncated);
    EXPECT_EQ(p.names.at(0), "write_file");
    EXPECT_EQ(p.arguments.count(0), 0u);
    Parsed q = parse_xml("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</func");
    EXPECT_TRUE(q.calls.empty());
    EXPECT_TRUE(q.truncated);
    EXPECT_EQ(q.arguments.at(0), "{\"city\": \"Paris\"");
    EXPECT_EQ(q.content, "");
    for (const char* text : {"Hi <tool_call>\n<function=get_we", "Hi <tool_call>\n<func", "Hi <tool_call>",
                             "Hi <tool_call><function=ping>\n<parameter=ci"}) {
        Parsed r = parse_xml(text);
        EXPECT_EQ(r.content, "Hi") << text;
        EXPECT_TRUE(r.truncated) << text;
        EXPECT_TRUE(r.calls.empty()) << text;
    }
}

TEST(ToolParserQwenXml, MissingCloseMarkers) {
    // </tool_call> also closes the function; after </function> a missing </tool_call> is not waited for.
    Parsed p = parse_xml("<tool_call>\n<function=get_weather>\n<parameter=city>\nLima\n</parameter>\n</tool_call> ok");
    expect_call(p, 0, "get_weather", "{\"city\": \"Lima\"}");
    EXPECT_EQ(p.content, " ok");
    Parsed q = parse_xml("<tool_call>\n<function=ping>\n</function>\nDone.");
    expect_call(q, 0, "ping", "{}");
    EXPECT_EQ(q.content, "Done.");
    EXPECT_FALSE(q.truncated);
}

TEST(ToolParserQwenXml, Malformed) {
    // A body that is not parameters: the call is dropped through its closing markup.
    for (const char* text : {"<tool_call>\n<function=get_weather>\n{\"city\": \"Paris\"}\n</function>\n</tool_call>ok",
                             "<tool_call>\n<function=get_weather>\n<parameter=>\nx\n</parameter>\n</function>ok",
                             "<tool_call>\n<function=get_weather>\n<city>Paris</city>\n</tool_call>ok"}) {
        Parsed p = parse_xml(text);
        EXPECT_TRUE(p.calls.empty()) << text;
        EXPECT_TRUE(p.malformed) << text;
        EXPECT_FALSE(p.truncated) << text;
        EXPECT_EQ(p.names.at(0), "get_weather") << text;
        EXPECT_EQ(p.content, "ok") << text;
    }
    Parsed q = parse_xml("<tool_call>\n<function=ping>\noops and the turn ends");
    EXPECT_TRUE(q.malformed);
    EXPECT_EQ(q.content, "");
    // Broken before the name is known: content, as the other formats.
    for (const char* text : {"<tool_call>\n<function=bad name>\n</function>\n</tool_call>",
                             "<tool_call>\n<function=>\n</function>\n</tool_call>", "<tool_call>\nhello</tool_call>"}) {
        Parsed r = parse_xml(text);
        EXPECT_EQ(r.content, text);
        EXPECT_TRUE(r.names.empty());
        EXPECT_FALSE(r.truncated);
    }
}

TEST(ToolParserQwenXml, Unicode) {
    Parsed p = parse_xml("<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo 🌧 東京\n</parameter>\n"
                         "</function>\n</tool_call>");
    expect_call(p, 0, "get_weather", "{\"city\": \"São Paulo 🌧 東京\"}");
}

// ---- robustness ------------------------------------------------------------------------------------------------

TEST(ToolParser, LongHeldTextGivesUp) {
    std::string text = "<tool_call>" + std::string(10000, ' ') + "x";
    Parsed p = parse(ToolFormat::Hermes, text);
    EXPECT_EQ(p.content, text);
}

TEST(ToolParser, FeedAfterFinishIsIgnored) {
    ToolCallParser parser(ToolFormat::Hermes, "c");
    parser.feed("a");
    parser.finish();
    EXPECT_TRUE(parser.feed("b").empty());
    EXPECT_TRUE(parser.finish().empty());
    EXPECT_EQ(parser.content(), "a");
}

TEST(ToolParser, InvalidUtf8NeverThrows) {
    for (ToolFormat f : {ToolFormat::Hermes, ToolFormat::SmolLM2, ToolFormat::Llama3, ToolFormat::Gemma3,
                         ToolFormat::FunctionGemma, ToolFormat::QwenXml}) {
        ToolCallParser parser(f, "c", xml_tools());
        EXPECT_NO_THROW({
            parser.feed("<tool_call><function=get_weather><parameter=city>\n\xff\n</parameter><parameter=\xfe>\n"
                        "\xc3\n</parameter></function></tool_call>");
            parser.feed("<start_function_call>call:f{a:<escape>\xff\xfe<escape>}<end_function_call>");
            parser.feed("<tool_call>{\"name\": \"\xff\", \"arguments\": {\"a\": \"\xc3\"}}</tool_call>");
            parser.feed("{\"name\": \"f\", \"parameters\": {\"\xff\": 1}}");
            parser.finish();
        });
    }
}

}  // namespace
}  // namespace cellm::tools
