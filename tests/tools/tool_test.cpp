// parse_tools and parse_tool_choice: OpenAI's shapes, and errors that name the field.
#include "tools/tool.h"

#include <gtest/gtest.h>

namespace cellm::tools {
namespace {

using Json = nlohmann::ordered_json;

Json weather_tool() {
    return Json::parse(R"({"type": "function", "function": {"name": "get_weather", "description": "Weather now",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})");
}

// The ToolError's param for `tools`, or "" when it parses.
std::string tools_error(const Json& tools) {
    try {
        parse_tools(tools);
    } catch (const ToolError& e) {
        EXPECT_EQ(std::string(e.what()).rfind(e.param() + ": ", 0), 0u) << e.what();
        return e.param();
    }
    return "";
}

TEST(ToolParse, ReadsOpenAITools) {
    Json tools = Json::array({weather_tool(), Json::parse(R"({"type": "function", "function": {"name": "now"}})")});
    std::vector<Tool> parsed = parse_tools(tools);
    ASSERT_EQ(parsed.size(), 2u);
    EXPECT_EQ(parsed[0].name, "get_weather");
    EXPECT_EQ(parsed[0].description, "Weather now");
    EXPECT_EQ(parsed[0].parameters["required"][0], "city");
    EXPECT_EQ(parsed[1].parameters, Json::parse(R"({"type": "object", "properties": {}})"));
    EXPECT_TRUE(parse_tools(Json()).empty());
    EXPECT_TRUE(parse_tools(Json::array()).empty());
}

TEST(ToolParse, ParametersWithoutTypeBecomeObjects) {
    Json tools = Json::array({Json::parse(R"({"type": "function", "function": {"name": "f",
        "parameters": {"properties": {"a": {"type": "integer"}}}}})")});
    EXPECT_EQ(parse_tools(tools)[0].parameters["type"], "object");
}

TEST(ToolParse, ToolsJsonRoundTrips) {
    Json tools = Json::array({weather_tool()});
    EXPECT_EQ(tools_json(parse_tools(tools)), tools);
}

TEST(ToolParse, ErrorsNameTheField) {
    EXPECT_EQ(tools_error(Json::object()), "tools");
    EXPECT_EQ(tools_error(Json("x")), "tools");
    Json t = Json::array({weather_tool(), 3});
    EXPECT_EQ(tools_error(t), "tools[1]");
    t[1] = Json::parse(R"({"type": "retrieval", "function": {"name": "f"}})");
    EXPECT_EQ(tools_error(t), "tools[1].type");
    t[1] = Json::parse(R"({"function": {"name": "f"}})");
    EXPECT_EQ(tools_error(t), "tools[1].type");
    t[1] = Json::parse(R"({"type": "function"})");
    EXPECT_EQ(tools_error(t), "tools[1].function");
    for (const char* bad : {R"("")", R"("has space")", R"("a.b")", R"(7)", R"("é")",
                            "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\""}) {
        t[1] = Json::parse(std::string(R"({"type": "function", "function": {"name": )") + bad + "}}");
        EXPECT_EQ(tools_error(t), "tools[1].function.name") << bad;
    }
    t[1] = Json::parse(R"({"type": "function", "function": {"name": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}})");
    EXPECT_EQ(tools_error(t), "");
    t[1] = weather_tool();
    EXPECT_EQ(tools_error(t), "tools[1].function.name");  // not unique
    t[1] = Json::parse(R"({"type": "function", "function": {"name": "f", "description": 3}})");
    EXPECT_EQ(tools_error(t), "tools[1].function.description");
    for (const char* bad : {R"([])", R"("object")", R"({"type": "string"})", R"({"type": "object", "not": {}})",
                            R"({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}})",
                            R"({"type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 1}}, "required": ["a"]})"}) {
        t[1] = Json::parse(std::string(R"({"type": "function", "function": {"name": "f", "parameters": )") + bad + "}}");
        EXPECT_EQ(tools_error(t), "tools[1].function.parameters") << bad;
    }
}

TEST(ToolParse, GrammarErrorsKeepTheirMessage) {
    Json t = Json::array({Json::parse(R"({"type": "function", "function": {"name": "f",
        "parameters": {"type": "object", "properties": {"a": {"not": {"type": "string"}}}}}})")});
    try {
        parse_tools(t);
        FAIL();
    } catch (const ToolError& e) {
        EXPECT_NE(std::string(e.what()).find("\"not\""), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("/properties/a"), std::string::npos) << e.what();
    }
}

TEST(ToolChoiceParse, Kinds) {
    std::vector<Tool> tools = parse_tools(Json::array({weather_tool()}));
    EXPECT_EQ(parse_tool_choice(Json(), tools).kind, ToolChoice::Auto);
    EXPECT_EQ(parse_tool_choice(Json(), {}).kind, ToolChoice::None);
    EXPECT_EQ(parse_tool_choice(Json("none"), tools).kind, ToolChoice::None);
    EXPECT_EQ(parse_tool_choice(Json("auto"), tools).kind, ToolChoice::Auto);
    EXPECT_EQ(parse_tool_choice(Json("required"), tools).kind, ToolChoice::Required);
    ToolChoice named = parse_tool_choice(Json::parse(R"({"type": "function", "function": {"name": "get_weather"}})"), tools);
    EXPECT_EQ(named.kind, ToolChoice::Named);
    EXPECT_EQ(named.name, "get_weather");
}

TEST(ToolChoiceParse, Errors) {
    std::vector<Tool> tools = parse_tools(Json::array({weather_tool()}));
    for (const char* bad : {R"("sometimes")", R"(3)", R"({"type": "function", "function": {"name": "other"}})",
                            R"({"type": "function"})", R"({"type": "tool", "function": {"name": "get_weather"}})",
                            R"({"type": "function", "function": {"name": 3}})", R"([])"}) {
        try {
            parse_tool_choice(Json::parse(bad), tools);
            ADD_FAILURE() << bad;
        } catch (const ToolError& e) {
            EXPECT_EQ(e.param(), "tool_choice") << bad;
        }
    }
    EXPECT_THROW(parse_tool_choice(Json("required"), {}), ToolError);
    EXPECT_THROW(parse_tool_choice(Json("auto"), {}), ToolError);
    EXPECT_EQ(parse_tool_choice(Json("none"), {}).kind, ToolChoice::None);
    EXPECT_THROW(parse_tool_choice(Json::parse(R"({"type": "function", "function": {"name": "f"}})"), {}), ToolError);
}

}  // namespace
}  // namespace cellm::tools
