// Format detection on real model templates, the prompts for templates without tools, and the call grammars:
// what they accept and reject, and that the parser reads every accepted call back.
#include "feed.h"
#include "grammar/grammar.h"
#include "tools/tool_format.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace cellm::tools {
namespace {

using Json = nlohmann::ordered_json;

// ---- detection -------------------------------------------------------------------------------------------------

std::filesystem::path templates_dir() {
    const char* cache = std::getenv("CELLM_CACHE");
    const char* home = std::getenv("HOME");
    std::filesystem::path root = cache ? cache : std::filesystem::path(home ? home : "") / ".cache/cellm";
    return root / "llamacpp-src/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates";
}

std::string read_template(const std::string& name) {
    std::ifstream in(templates_dir() / name);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

bool no_tokens(std::string_view) { return false; }

TEST(ToolFormatDetect, RealTemplates) {
    if (!std::filesystem::exists(templates_dir()))
        GTEST_SKIP() << "no llama.cpp templates under " << templates_dir() << " (set CELLM_CACHE)";
    struct Case {
        const char* file;
        ChatTemplateKind kind;
        std::optional<ToolFormat> format;
        bool renders;
    };
    const Case cases[] = {
        {"Qwen-Qwen2.5-7B-Instruct.jinja", ChatTemplateKind::ChatML, ToolFormat::Hermes, true},
        {"Qwen-Qwen3-0.6B.jinja", ChatTemplateKind::ChatML, ToolFormat::Hermes, true},
        {"Qwen-QwQ-32B.jinja", ChatTemplateKind::ChatML, ToolFormat::Hermes, true},
        // <tool_call><function=N><parameter=K>: Qwen 3.5, Qwen3-Coder and the families that took their form.
        {"Qwen3.5-4B.jinja", ChatTemplateKind::ChatML, ToolFormat::QwenXml, true},
        {"Qwen3-Coder.jinja", ChatTemplateKind::ChatML, ToolFormat::QwenXml, true},
        {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", ChatTemplateKind::ChatML, ToolFormat::QwenXml, true},
        {"StepFun3.5-Flash.jinja", ChatTemplateKind::ChatML, ToolFormat::QwenXml, true},
        {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", ChatTemplateKind::ChatML, ToolFormat::Hermes, true},
        {"meta-llama-Llama-3.1-8B-Instruct.jinja", ChatTemplateKind::Llama3, ToolFormat::Llama3, true},
        {"meta-llama-Llama-3.2-3B-Instruct.jinja", ChatTemplateKind::Llama3, ToolFormat::Llama3, true},
        {"meta-llama-Llama-3.3-70B-Instruct.jinja", ChatTemplateKind::Llama3, ToolFormat::Llama3, true},
        {"google-gemma-2-2b-it.jinja", ChatTemplateKind::Gemma, ToolFormat::Gemma3, false},
        {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", ChatTemplateKind::Plain, std::nullopt, false},
    };
    for (const Case& c : cases) {
        const std::string source = read_template(c.file);
        ASSERT_FALSE(source.empty()) << c.file;
        std::optional<ToolFormat> format = detect_tool_format(source, c.kind, no_tokens);
        EXPECT_EQ(format, c.format) << c.file;
        if (format) {
            EXPECT_EQ(template_renders_tools(*format, source), c.renders) << c.file;
        }
    }
}

TEST(ToolFormatDetect, WithoutTemplatesOrByVocabulary) {
    const std::string smollm2 =
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
        "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
        "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
    EXPECT_EQ(detect_tool_format(smollm2, ChatTemplateKind::ChatML, no_tokens), ToolFormat::SmolLM2);
    EXPECT_FALSE(template_renders_tools(ToolFormat::SmolLM2, smollm2));
    EXPECT_EQ(detect_tool_format("", ChatTemplateKind::Gemma, no_tokens), ToolFormat::Gemma3);
    EXPECT_EQ(detect_tool_format("", ChatTemplateKind::ChatML, no_tokens), ToolFormat::SmolLM2);
    EXPECT_EQ(detect_tool_format("", ChatTemplateKind::Plain, no_tokens), std::nullopt);
    EXPECT_EQ(detect_tool_format("", ChatTemplateKind::Llama3, no_tokens), std::nullopt);
    // Llama 3.0: the header markers but no tools.
    EXPECT_EQ(detect_tool_format("{{ '<|start_header_id|>' + message['role'] }}", ChatTemplateKind::Llama3, no_tokens),
              std::nullopt);
    auto function_gemma_vocab = [](std::string_view token) { return token == "<start_function_call>"; };
    EXPECT_EQ(detect_tool_format("{{ '<start_of_turn>' }}", ChatTemplateKind::Gemma, function_gemma_vocab),
              ToolFormat::FunctionGemma);
    EXPECT_EQ(detect_tool_format("{%- if tools %}<start_function_declaration>{{ '<start_function_call>' }}",
                                 ChatTemplateKind::Gemma, no_tokens),
              ToolFormat::FunctionGemma);
    EXPECT_EQ(detect_tool_format("", ChatTemplateKind::Gemma, nullptr), ToolFormat::Gemma3);
    EXPECT_TRUE(template_renders_tools(ToolFormat::FunctionGemma, "{% for tool in tools %}"));
    EXPECT_FALSE(template_renders_tools(ToolFormat::Gemma3, "{% for tool in tools %}"));
}

// ---- prepare_messages ------------------------------------------------------------------------------------------

std::vector<Tool> clock_tools() {
    return parse_tools(Json::parse(R"([{"type": "function", "function": {"name": "now", "description": "Time now"}}])"));
}

std::vector<ChatMessage> conversation() {
    ChatMessage call{"assistant", ""};
    call.tool_calls = {{"call_0", "now", "{}"}};
    ChatMessage result{"tool", "12:00"};
    result.tool_call_id = "call_0";
    result.name = "now";
    return {{"system", "Be brief."}, {"user", "Time?"}, call, result, {"user", "Thanks"}};
}

void expect_messages(const std::vector<ChatMessage>& got, const std::vector<std::pair<std::string, std::string>>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].role, want[i].first) << i;
        EXPECT_EQ(got[i].content, want[i].second) << i;
        EXPECT_TRUE(got[i].tool_calls.empty()) << i;
    }
}

TEST(ToolPrepare, Gemma3) {
    expect_messages(
        prepare_messages(ToolFormat::Gemma3, false, clock_tools(), conversation()),
        {{"system",
          "You have access to functions. If you decide to invoke any of the function(s), you MUST put it in the format "
          "of\n{\"name\": function name, \"parameters\": dictionary of argument name and its value}\n\nYou SHOULD NOT "
          "include any other text in the response if you call a function\n[\n  {\n    \"name\": \"now\",\n    "
          "\"description\": \"Time now\",\n    \"parameters\": {\n      \"type\": \"object\",\n      \"properties\": "
          "{}\n    }\n  }\n]\n\nBe brief."},
         {"user", "Time?"},
         {"assistant", "{\"name\": \"now\", \"parameters\": {}}"},
         {"user", "```tool_output\n12:00\n```\n\nThanks"}});
}

TEST(ToolPrepare, SmolLM2) {
    expect_messages(
        prepare_messages(ToolFormat::SmolLM2, false, clock_tools(), conversation()),
        {{"system",
          "You are an expert in composing functions. You are given a question and a set of possible functions.\nBased "
          "on the question, you will need to make one or more function/tool calls to achieve the purpose.\nIf none of "
          "the functions can be used, point it out and refuse to answer.\nIf the given question lacks the parameters "
          "required by the function, also point it out.\n\nYou have access to the following tools:\n<tools>[{\"type\":"
          "\"function\",\"function\":{\"name\":\"now\",\"description\":\"Time now\",\"parameters\":{\"type\":\"object\","
          "\"properties\":{}}}}]</tools>\n\nThe output MUST strictly adhere to the following format, and NO other text "
          "MUST be included.\nThe example format is as follows. Please make sure the parameter type is correct. If no "
          "function call is needed, please make the tool calls an empty list '[]'.\n<tool_call>[\n{\"name\": "
          "\"func_name1\", \"arguments\": {\"argument1\": \"value1\", \"argument2\": \"value2\"}},\n... (more tool calls "
          "as required)\n]</tool_call>\n\nBe brief."},
         {"user", "Time?"},
         {"assistant", "<tool_call>[\n{\"name\": \"now\", \"arguments\": {}}\n]</tool_call>"},
         {"user", "<tool_response>\n12:00\n</tool_response>"},
         {"user", "Thanks"}});
}

TEST(ToolPrepare, ParallelCallsAndResults) {
    ChatMessage call{"assistant", "Checking."};
    call.tool_calls = {{"a", "now", "{}"}, {"b", "now", " {\"tz\": \"UTC\"} "}};
    std::vector<ChatMessage> messages = {{"user", "Time?"}, call, {"tool", "12:00"}, {"tool", "13:00"}};
    auto hermes = prepare_messages(ToolFormat::Hermes, false, {}, messages);
    expect_messages(hermes, {{"user", "Time?"},
                             {"assistant", "Checking.\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n"
                                           "<tool_call>\n{\"name\": \"now\", \"arguments\": {\"tz\": \"UTC\"}}\n</tool_call>"},
                             {"user", "<tool_response>\n12:00\n</tool_response>\n<tool_response>\n13:00\n</tool_response>"}});
    auto smol = prepare_messages(ToolFormat::SmolLM2, false, {}, messages);
    EXPECT_EQ(smol[1].content, "Checking.\n<tool_call>[\n{\"name\": \"now\", \"arguments\": {}},\n{\"name\": \"now\", "
                               "\"arguments\": {\"tz\": \"UTC\"}}\n]</tool_call>");
    auto gemma = prepare_messages(ToolFormat::Gemma3, false, {}, messages);
    expect_messages(gemma, {{"user", "Time?"},
                            {"assistant", "Checking.\n{\"name\": \"now\", \"parameters\": {}}\n{\"name\": \"now\", "
                                          "\"parameters\": {\"tz\": \"UTC\"}}"},
                            {"user", "```tool_output\n12:00\n```\n```tool_output\n13:00\n```"}});
    auto llama = prepare_messages(ToolFormat::Llama3, false, {}, messages);
    expect_messages(llama, {{"user", "Time?"},
                            {"assistant", "Checking.\n{\"name\": \"now\", \"parameters\": {}}\n{\"name\": \"now\", "
                                          "\"parameters\": {\"tz\": \"UTC\"}}"},
                            {"ipython", "12:00"},
                            {"ipython", "13:00"}});
    auto xml = prepare_messages(ToolFormat::QwenXml, false, {}, messages);
    expect_messages(xml, {{"user", "Time?"},
                          {"assistant", "Checking.\n<tool_call>\n<function=now>\n</function>\n</tool_call>\n"
                                        "<tool_call>\n<function=now>\n<parameter=tz>\nUTC\n</parameter>\n</function>\n"
                                        "</tool_call>"},
                          {"user", "<tool_response>\n12:00\n</tool_response>\n<tool_response>\n13:00\n</tool_response>"}});
    auto fg = prepare_messages(ToolFormat::FunctionGemma, false, {}, messages);
    expect_messages(fg, {{"user", "Time?"},
                         {"assistant", "Checking.\n<start_function_call>call:now{}<end_function_call>"
                                       "<start_function_call>call:now{tz:<escape>UTC<escape>}<end_function_call>"},
                         {"user", "<start_function_response>response:function{value:<escape>12:00<escape>}"
                                  "<end_function_response>\n<start_function_response>response:function{value:<escape>"
                                  "13:00<escape>}<end_function_response>"}});
}

TEST(ToolPrepare, GemmaTurnsStillAlternate) {
    ChatMessage call{"assistant", ""};
    call.tool_calls = {{"a", "now", "{}"}, {"b", "now", "{}"}};
    std::vector<ChatMessage> messages = {{"system", "S"}, {"user", "Time?"}, call, {"tool", "1"}, {"tool", "2"},
                                         {"user", "And now?"}, call, {"tool", "3"}};
    std::vector<ChatMessage> prepared = prepare_messages(ToolFormat::Gemma3, false, clock_tools(), messages);
    const std::string prompt = render_chat(ChatTemplateKind::Gemma, prepared, true);
    EXPECT_NE(prompt.find("<start_of_turn>user\n```tool_output\n1\n```\n```tool_output\n2\n```\n\nAnd now?<end_of_turn>"),
              std::string::npos)
        << prompt;
    EXPECT_TRUE(prompt.ends_with("<end_of_turn>\n<start_of_turn>model\n")) << prompt;
}

TEST(ToolPrepare, QwenXmlWritesValuesAsItsTemplate) {
    // Strings as is, any other value as JSON (the template's `tojson` / `string`); arguments that are not an
    // object give no parameters.
    ChatMessage call{"assistant", ""};
    call.tool_calls = {{"a", "f", R"({"s": "two\nlines", "n": 3, "b": true, "o": {"k": [1, null]}})"}, {"b", "g", "[1]"}};
    auto xml = prepare_messages(ToolFormat::QwenXml, false, {}, {{"user", "Go"}, call});
    expect_messages(xml, {{"user", "Go"},
                          {"assistant", "<tool_call>\n<function=f>\n<parameter=s>\ntwo\nlines\n</parameter>\n"
                                        "<parameter=n>\n3\n</parameter>\n<parameter=b>\ntrue\n</parameter>\n"
                                        "<parameter=o>\n{\"k\":[1,null]}\n</parameter>\n</function>\n</tool_call>\n"
                                        "<tool_call>\n<function=g>\n</function>\n</tool_call>"}});
    auto prompt = prepare_messages(ToolFormat::QwenXml, false, clock_tools(), {{"user", "Time?"}});
    ASSERT_EQ(prompt.size(), 2u);
    EXPECT_EQ(prompt[0].content.rfind("# Tools\n\nYou have access to the following functions:\n\n<tools>\n{\"type\":"
                                      "\"function\",\"function\":{\"name\":\"now\"",
                                      0),
              0u)
        << prompt[0].content;
    EXPECT_NE(prompt[0].content.find("<tool_call>\n<function=example_function_name>\n"), std::string::npos);
    EXPECT_TRUE(prompt[0].content.ends_with("</IMPORTANT>"));
}

TEST(ToolPrepare, TemplatesThatRenderToolsGetTheConversationUnchanged) {
    std::vector<ChatMessage> messages = conversation();
    auto same = prepare_messages(ToolFormat::Hermes, true, clock_tools(), messages);
    ASSERT_EQ(same.size(), messages.size());
    EXPECT_EQ(same[2].tool_calls.size(), 1u);
    EXPECT_EQ(same[0].content, "Be brief.");
}

TEST(ToolPrepare, FallbackPromptsForTemplatesWithoutTools) {
    std::vector<ChatMessage> messages = {{"user", "Time?"}};
    auto hermes = prepare_messages(ToolFormat::Hermes, false, clock_tools(), messages);
    ASSERT_EQ(hermes.size(), 2u);
    EXPECT_EQ(hermes[0].role, "system");
    EXPECT_EQ(hermes[0].content,
              "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
              "function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\":\"function\",\"function\":{"
              "\"name\":\"now\",\"description\":\"Time now\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}\n"
              "</tools>\n\nFor each function call, return a json object with function name and arguments within "
              "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
              "<args-json-object>}\n</tool_call>");
    auto llama = prepare_messages(ToolFormat::Llama3, false, clock_tools(), messages);
    EXPECT_EQ(llama[0].content.rfind("You have access to the following functions.", 0), 0u);
    auto fg = prepare_messages(ToolFormat::FunctionGemma, false, clock_tools(), messages);
    EXPECT_EQ(fg[0].content,
              "You are a model that can do function calling with the following functions<start_function_declaration>"
              "declaration:now{description:<escape>Time now<escape>,parameters:{type:<escape>object<escape>,"
              "properties:{}}}<end_function_declaration>");
}

// ---- grammars --------------------------------------------------------------------------------------------------

std::vector<Tool> grammar_tools() {
    return parse_tools(Json::parse(R"([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "number"}, "tags": {"type": "array",
            "items": {"type": "string"}}}, "required": ["a", "b"]}}},
        {"type": "function", "function": {"name": "ping"}}])"));
}

bool accepts(const grammar::Grammar& g, const std::string& text) {
    grammar::Recognizer r(g);
    return r.feed(text) && r.accepting();
}

struct Sample {
    std::string text;
    std::vector<std::pair<std::string, std::string>> calls;  // name, arguments JSON
};

// Every sample is a sentence of `g` and parses back to its calls (`tools`: for the parser, as QwenXml's needs).
void expect_round_trip(ToolFormat format, const grammar::Grammar& g, const std::vector<Sample>& samples,
                       const std::string& trigger, const std::vector<Tool>& tools = {}) {
    for (const Sample& s : samples) {
        EXPECT_TRUE(accepts(g, s.text)) << s.text;
        if (!trigger.empty()) {
            EXPECT_EQ(s.text.rfind(trigger, 0), 0u) << s.text;
        }
        test::Parsed p = test::parse(format, s.text, tools);
        EXPECT_EQ(p.content, "") << s.text;
        ASSERT_EQ(p.calls.size(), s.calls.size()) << s.text;
        for (size_t i = 0; i < s.calls.size(); ++i) {
            EXPECT_EQ(p.calls[i].name, s.calls[i].first) << s.text;
            EXPECT_EQ(Json::parse(p.calls[i].arguments), Json::parse(s.calls[i].second)) << s.text;
        }
    }
}

void expect_rejects(const grammar::Grammar& g, const std::vector<std::string>& texts) {
    for (const std::string& t : texts) EXPECT_FALSE(accepts(g, t)) << t;
}

// The trigger opens every sentence: the grammar takes it, and nothing that starts otherwise.
void expect_trigger(const grammar::Grammar& g, const std::string& trigger) {
    grammar::Recognizer r(g);
    EXPECT_TRUE(r.can_feed(trigger)) << trigger;
    EXPECT_FALSE(r.can_feed("x"));
    EXPECT_FALSE(r.can_feed(" "));
}

grammar::Grammar build(ToolFormat format, const ToolChoice& choice, bool parallel, std::string* trigger = nullptr) {
    CallGrammar cg = call_grammar(format, grammar_tools(), choice, parallel);
    if (trigger) *trigger = cg.trigger;
    return grammar::Grammar::from_gbnf(cg.gbnf);
}

const ToolChoice kAuto{ToolChoice::Auto, {}};
const ToolChoice kRequired{ToolChoice::Required, {}};

TEST(ToolGrammar, Hermes) {
    std::string trigger;
    grammar::Grammar g = build(ToolFormat::Hermes, kAuto, true, &trigger);
    EXPECT_EQ(trigger, "<tool_call>");
    expect_trigger(g, trigger);
    const std::string weather = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    const std::string add = "<tool_call>{\"name\":\"add\",\"arguments\":{\"a\":-3,\"b\":2.5,\"tags\":[\"x\",\"é\"]}}</tool_call>";
    expect_round_trip(ToolFormat::Hermes, g,
                      {{weather, {{"get_weather", R"({"city": "Paris"})"}}},
                       {add, {{"add", R"({"a": -3, "b": 2.5, "tags": ["x", "é"]})"}}},
                       {"<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>", {{"ping", "{}"}}},
                       {"<tool_call>{ \"name\" :\n\"ping\" , \"arguments\" : { } }\n</tool_call>", {{"ping", "{}"}}},
                       {weather + "\n" + add, {{"get_weather", R"({"city": "Paris"})"}, {"add", R"({"a":-3,"b":2.5,"tags":["x","é"]})"}}},
                       {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"東京\", \"unit\": \"c\"}}\n</tool_call>",
                        {{"get_weather", R"({"city": "東京", "unit": "c"})"}}}},
                      trigger);
    expect_rejects(g, {"<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>",
                       // the call's own markup takes at most one space or newline per gap
                       "<tool_call>{ \"name\" :\n\n\t\"ping\" , \"arguments\" : { } }\n  </tool_call>",
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 3}}\n</tool_call>",
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"c\"}}\n</tool_call>",
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"unit\": \"k\"}}\n</tool_call>",
                       "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1.5, \"b\": 1}}\n</tool_call>",
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n",
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
                       "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"});
    grammar::Grammar single = build(ToolFormat::Hermes, kRequired, false, &trigger);
    EXPECT_EQ(trigger, "");
    EXPECT_TRUE(accepts(single, weather));
    EXPECT_FALSE(accepts(single, weather + "\n" + add));
    grammar::Grammar named = build(ToolFormat::Hermes, {ToolChoice::Named, "add"}, true);
    EXPECT_TRUE(accepts(named, add));
    EXPECT_FALSE(accepts(named, weather));
}

TEST(ToolGrammar, QwenXml) {
    std::string trigger;
    const std::vector<Tool> tools = grammar_tools();
    grammar::Grammar g = build(ToolFormat::QwenXml, kAuto, true, &trigger);
    EXPECT_EQ(trigger, "<tool_call>");
    expect_trigger(g, trigger);
    const std::string weather = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                                "</function>\n</tool_call>";
    const std::string add = "<tool_call>\n<function=add>\n<parameter=a>\n-3\n</parameter>\n<parameter=b>\n2.5\n"
                            "</parameter>\n<parameter=tags>\n[\"x\", \"é\"]\n</parameter>\n</function>\n</tool_call>";
    expect_round_trip(
        ToolFormat::QwenXml, g,
        {{weather, {{"get_weather", R"({"city": "Paris"})"}}},
         {add, {{"add", R"({"a": -3, "b": 2.5, "tags": ["x", "é"]})"}}},
         {"<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\nNY < 3 </param </parameter\n\n</parameter>\n"
          "<parameter=unit>\nc\n</parameter>\n</function>\n</tool_call>",
          {{"get_weather", R"({"city": "New York\nNY < 3 </param </parameter\n", "unit": "c"})"}}},
         {"<tool_call>\n<function=get_weather>\n<parameter=city>\n\n</parameter>\n</function>\n</tool_call>",
          {{"get_weather", R"({"city": ""})"}}},
         {"<tool_call>\n<function=ping>\n</function>\n</tool_call>", {{"ping", "{}"}}},
         {"<tool_call><function=ping></function></tool_call>", {{"ping", "{}"}}},
         {"<tool_call> <function=add> <parameter=a>\n0\n</parameter><parameter=b>\n1e2\n</parameter> </function> "
          "</tool_call>",
          {{"add", R"({"a": 0, "b": 100})"}}},
         {weather + "\n" + add + weather,
          {{"get_weather", R"({"city": "Paris"})"}, {"add", R"({"a": -3, "b": 2.5, "tags": ["x", "é"]})"},
           {"get_weather", R"({"city": "Paris"})"}}}},
        trigger, tools);
    expect_rejects(g, {"<tool_call>\n<function=nope>\n</function>\n</tool_call>",
                       // required city missing, properties out of the schema's order, an unknown one
                       "<tool_call>\n<function=get_weather>\n<parameter=unit>\nc\n</parameter>\n</function>\n</tool_call>",
                       "<tool_call>\n<function=get_weather>\n<parameter=unit>\nc\n</parameter>\n<parameter=city>\nP\n"
                       "</parameter>\n</function>\n</tool_call>",
                       "<tool_call>\n<function=get_weather>\n<parameter=city>\nP\n</parameter>\n<parameter=town>\nP\n"
                       "</parameter>\n</function>\n</tool_call>",
                       "<tool_call>\n<function=get_weather>\n<parameter=city>\nP\n</parameter>\n<parameter=unit>\nk\n"
                       "</parameter>\n</function>\n</tool_call>",
                       "<tool_call>\n<function=add>\n<parameter=a>\n1.5\n</parameter>\n<parameter=b>\n1\n</parameter>\n"
                       "</function>\n</tool_call>",
                       "<tool_call>\n<function=add>\n<parameter=a>\nabc\n</parameter>\n<parameter=b>\n1\n</parameter>\n"
                       "</function>\n</tool_call>",
                       // a string value cannot hold the closing marker, and keeps the template's newlines
                       "<tool_call>\n<function=get_weather>\n<parameter=city>\na</parameter>b\n</parameter>\n"
                       "</function>\n</tool_call>",
                       "<tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n</function>\n"
                       "</tool_call>",
                       // at most one space or newline per gap of the markup
                       "<tool_call>\n\n<function=ping>\n</function>\n</tool_call>",
                       "<tool_call>\n<function=ping>\n</function>\n\n</tool_call>",
                       "<tool_call>\n<function=ping>\n</function>\n",
                       "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>",
                       "<function=ping>\n</function>"});
    // Inside a string value the grammar can always end it, whatever was written so far.
    for (const char* prefix : {"abc</parameter", "<", "</", "x\n</parameter\n"}) {
        const std::string head = "<tool_call>\n<function=get_weather>\n<parameter=city>\n" + std::string(prefix);
        EXPECT_TRUE(accepts(g, head + "\n</parameter>\n</function>\n</tool_call>")) << prefix;
    }
    grammar::Grammar single = build(ToolFormat::QwenXml, kRequired, false, &trigger);
    EXPECT_EQ(trigger, "");
    EXPECT_TRUE(accepts(single, weather));
    EXPECT_FALSE(accepts(single, weather + "\n" + weather));
    grammar::Grammar named = build(ToolFormat::QwenXml, {ToolChoice::Named, "add"}, true);
    EXPECT_TRUE(accepts(named, add));
    EXPECT_FALSE(accepts(named, weather));
}

TEST(ToolGrammar, QwenXmlSchemas) {
    // Booleans also as Jinja writes them, $defs reach a property's schema, a schema without properties takes any
    // parameters.
    std::vector<Tool> tools = parse_tools(Json::parse(R"([
        {"type": "function", "function": {"name": "set", "parameters": {"type": "object", "$defs": {"level":
            {"type": "integer", "minimum": 1, "maximum": 3}}, "properties": {"on": {"type": "boolean"},
            "level": {"$ref": "#/$defs/level"}, "mode": {"const": "fast"}}, "required": ["on"]}}},
        {"type": "function", "function": {"name": "any", "parameters": {"type": "object",
            "additionalProperties": {"type": "integer"}}}}])"));
    grammar::Grammar g = grammar::Grammar::from_gbnf(call_grammar(ToolFormat::QwenXml, tools, kAuto, true).gbnf);
    expect_round_trip(ToolFormat::QwenXml, g,
                      {{"<tool_call>\n<function=set>\n<parameter=on>\nTrue\n</parameter>\n<parameter=level>\n2\n"
                        "</parameter>\n<parameter=mode>\nfast\n</parameter>\n</function>\n</tool_call>",
                        {{"set", R"({"on": true, "level": 2, "mode": "fast"})"}}},
                       {"<tool_call>\n<function=set>\n<parameter=on>\nfalse\n</parameter>\n</function>\n</tool_call>",
                        {{"set", R"({"on": false})"}}},
                       {"<tool_call>\n<function=any>\n<parameter=x>\n5\n</parameter>\n<parameter=a note>\nhi there\n"
                        "</parameter>\n</function>\n</tool_call>",
                        {{"any", R"({"x": 5, "a note": "hi there"})"}}},
                       {"<tool_call>\n<function=any>\n</function>\n</tool_call>", {{"any", "{}"}}}},
                      "<tool_call>", tools);
    expect_rejects(g, {"<tool_call>\n<function=set>\n<parameter=on>\nyes\n</parameter>\n</function>\n</tool_call>",
                       "<tool_call>\n<function=set>\n<parameter=on>\ntrue\n</parameter>\n<parameter=level>\n4\n"
                       "</parameter>\n</function>\n</tool_call>",
                       "<tool_call>\n<function=set>\n<parameter=on>\ntrue\n</parameter>\n<parameter=mode>\nslow\n"
                       "</parameter>\n</function>\n</tool_call>",
                       "<tool_call>\n<function=any>\n<parameter=>\n5\n</parameter>\n</function>\n</tool_call>",
                       "<tool_call>\n<function=any>\n<parameter=a>b>\n5\n</parameter>\n</function>\n</tool_call>"});
}

TEST(ToolGrammar, QwenXmlStringsKeepTheirSchema) {
    // A raw string's length bounds hold; a string with a format or pattern, which raw text cannot follow, is
    // written and read back as a JSON string.
    std::vector<Tool> tools = parse_tools(Json::parse(R"([
        {"type": "function", "function": {"name": "book", "parameters": {"type": "object", "properties": {
            "code": {"type": "string", "minLength": 2, "maxLength": 3}, "day": {"type": "string", "format": "date"}},
            "required": ["code", "day"]}}}])"));
    grammar::Grammar g = grammar::Grammar::from_gbnf(call_grammar(ToolFormat::QwenXml, tools, kRequired, false).gbnf);
    expect_round_trip(ToolFormat::QwenXml, g,
                      {{"<tool_call>\n<function=book>\n<parameter=code>\nOSL\n</parameter>\n<parameter=day>\n"
                        "\"2024-02-29\"\n</parameter>\n</function>\n</tool_call>",
                        {{"book", R"({"code": "OSL", "day": "2024-02-29"})"}}}},
                      "", tools);
    expect_rejects(g, {"<tool_call>\n<function=book>\n<parameter=code>\nOSLO\n</parameter>\n<parameter=day>\n"
                       "\"2024-02-29\"\n</parameter>\n</function>\n</tool_call>",
                       "<tool_call>\n<function=book>\n<parameter=code>\nO\n</parameter>\n<parameter=day>\n"
                       "\"2024-02-29\"\n</parameter>\n</function>\n</tool_call>",
                       "<tool_call>\n<function=book>\n<parameter=code>\nOSL\n</parameter>\n<parameter=day>\n"
                       "2024-02-29\n</parameter>\n</function>\n</tool_call>",
                       "<tool_call>\n<function=book>\n<parameter=code>\nOSL\n</parameter>\n<parameter=day>\n"
                       "\"2023-02-29\"\n</parameter>\n</function>\n</tool_call>"});
}

TEST(ToolGrammar, SmolLM2) {
    std::string trigger;
    grammar::Grammar g = build(ToolFormat::SmolLM2, kAuto, true, &trigger);
    EXPECT_EQ(trigger, "<tool_call>");
    expect_trigger(g, trigger);
    expect_round_trip(
        ToolFormat::SmolLM2, g,
        {{"<tool_call>[\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n]</tool_call>",
          {{"get_weather", R"({"city": "Oslo"})"}}},
         {"<tool_call>[{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}, {\"name\": \"ping\", \"arguments\": {}}]</tool_call>",
          {{"add", R"({"a": 1, "b": 2})"}, {"ping", "{}"}}},
         {"<tool_call>[]</tool_call>", {}},
         {"<tool_call> [\n{ \"name\" : \"ping\" , \"arguments\" : {} } ,\n{\"name\": \"ping\", \"arguments\": {}}\n] "
          "</tool_call>",
          {{"ping", "{}"}, {"ping", "{}"}}}},
        trigger);
    expect_rejects(g, {"<tool_call>[{\"name\": \"nope\", \"arguments\": {}}]</tool_call>",
                       "<tool_call> [\n  { \"name\" : \"ping\" , \"arguments\" : {} }\n] </tool_call>",
                       "<tool_call>[{\"name\": \"add\", \"arguments\": {\"a\": 1}}]</tool_call>",
                       "<tool_call>[{\"name\": \"ping\", \"arguments\": {}}]",
                       "<tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call>"});
    grammar::Grammar single = build(ToolFormat::SmolLM2, kRequired, false);
    EXPECT_TRUE(accepts(single, "<tool_call>[{\"name\": \"ping\", \"arguments\": {}}]</tool_call>"));
    EXPECT_FALSE(accepts(single, "<tool_call>[]</tool_call>"));
    EXPECT_FALSE(accepts(single, "<tool_call>[{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"ping\", "
                                 "\"arguments\": {}}]</tool_call>"));
}

class ToolGrammarJsonAnswer : public ::testing::TestWithParam<ToolFormat> {};

TEST_P(ToolGrammarJsonAnswer, OneObject) {
    std::string trigger;
    grammar::Grammar g = build(GetParam(), kAuto, true, &trigger);
    EXPECT_EQ(trigger, "{\"name\"");
    expect_trigger(g, trigger);
    grammar::Recognizer r(g);
    EXPECT_TRUE(r.can_feed("{\"name\" : \"ping\""));  // whitespace after the trigger
    expect_round_trip(GetParam(), g,
                      {{"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\", \"unit\": \"f\"}}",
                        {{"get_weather", R"({"city": "Rome", "unit": "f"})"}}},
                       {"{\"name\":\"add\",\"parameters\":{\"a\":0,\"b\":-0.5}}", {{"add", R"({"a":0,"b":-0.5})"}}},
                       {"{\"name\" :\n\"ping\" ,\n\"parameters\" : { }\n}", {{"ping", "{}"}}}},
                      trigger);
    expect_rejects(g, {"{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}",
                       "{\"name\" :\n \"ping\" ,\n \"parameters\" : { }\n}",
                       "{\"name\": \"nope\", \"parameters\": {}}",
                       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}",
                       "{\"name\": \"get_weather\", \"parameters\": {\"town\": \"Rome\"}}",
                       "{\"name\": \"ping\", \"parameters\": {}}{\"name\": \"ping\", \"parameters\": {}}"});
    grammar::Grammar named = build(GetParam(), {ToolChoice::Named, "ping"}, false, &trigger);
    EXPECT_EQ(trigger, "");
    EXPECT_TRUE(accepts(named, "{\"name\": \"ping\", \"parameters\": {}}"));
    EXPECT_FALSE(accepts(named, "{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 1}}"));
}

INSTANTIATE_TEST_SUITE_P(Formats, ToolGrammarJsonAnswer, ::testing::Values(ToolFormat::Llama3, ToolFormat::Gemma3),
                         [](const auto& param_info) { return param_info.param == ToolFormat::Llama3 ? "Llama3" : "Gemma3"; });

TEST(ToolGrammar, FunctionGemma) {
    std::string trigger;
    grammar::Grammar g = build(ToolFormat::FunctionGemma, kAuto, true, &trigger);
    EXPECT_EQ(trigger, "<start_function_call>");
    expect_trigger(g, trigger);
    expect_round_trip(
        ToolFormat::FunctionGemma, g,
        {{"<start_function_call>call:get_weather{city:<escape>Paris<escape>}<end_function_call>",
          {{"get_weather", R"({"city": "Paris"})"}}},
         {"<start_function_call>call:get_weather{city:<escape>a < b <e <escap {x}, \"q\"<escape>,unit:<escape>c<escape>}"
          "<end_function_call>",
          {{"get_weather", R"({"city": "a < b <e <escap {x}, \"q\"", "unit": "c"})"}}},
         {"<start_function_call>call:add{a:-12,b:2.5e3,tags:[<escape>x<escape>,<escape>ü<escape>]}<end_function_call>"
          "<start_function_call>call:ping{}<end_function_call>",
          {{"add", R"({"a": -12, "b": 2500, "tags": ["x", "ü"]})"}, {"ping", "{}"}}}},
        trigger);
    expect_rejects(g, {"<start_function_call>call:nope{}<end_function_call>",
                       "<start_function_call>call:add{a:<escape>1<escape>,b:2}<end_function_call>",
                       "<start_function_call>call:add{a:1}<end_function_call>",
                       "<start_function_call>call:add{b:1,a:1}<end_function_call>",
                       "<start_function_call>call:get_weather{city:<escape>P<escape>,unit:<escape>k<escape>}<end_function_call>",
                       "<start_function_call>call:get_weather{city:<escape>P<escape>}",
                       "<start_function_call>call:ping{x:1}<end_function_call>"});
    grammar::Grammar single = build(ToolFormat::FunctionGemma, kRequired, false);
    EXPECT_FALSE(accepts(single, "<start_function_call>call:ping{}<end_function_call><start_function_call>call:ping{}"
                                 "<end_function_call>"));
}

TEST(ToolGrammar, OddPropertyNamesAndEnumValues) {
    std::vector<Tool> tools = parse_tools(Json::parse(R"([{"type": "function", "function": {"name": "odd",
        "parameters": {"type": "object", "properties": {"a\"b": {"type": "string"}, "x y:z": {"enum": ["q\"\\", "<e>"]},
        "ü\n": {"type": "boolean"}}, "required": ["a\"b", "x y:z", "ü\n"]}}}])"));
    for (ToolFormat f : {ToolFormat::Hermes, ToolFormat::SmolLM2, ToolFormat::Llama3, ToolFormat::FunctionGemma,
                         ToolFormat::QwenXml}) {
        EXPECT_NO_THROW(grammar::Grammar::from_gbnf(call_grammar(f, tools, kRequired, true).gbnf)) << tool_format_name(f);
    }
    grammar::Grammar x = grammar::Grammar::from_gbnf(call_grammar(ToolFormat::QwenXml, tools, kRequired, false).gbnf);
    expect_round_trip(ToolFormat::QwenXml, x,
                      {{"<tool_call>\n<function=odd>\n<parameter=a\"b>\nv\n</parameter>\n<parameter=x y:z>\n<e>\n"
                        "</parameter>\n<parameter=ü\n>\nTrue\n</parameter>\n</function>\n</tool_call>",
                        {{"odd", R"({"a\"b": "v", "x y:z": "<e>", "ü\n": true})"}}}},
                      "", tools);
    grammar::Grammar g = grammar::Grammar::from_gbnf(call_grammar(ToolFormat::FunctionGemma, tools, kRequired, false).gbnf);
    const std::string call = "<start_function_call>call:odd{a\"b:<escape>v<escape>,<escape>x y:z<escape>:"
                             "<escape>q\"\\<escape>,<escape>ü\n<escape>:false}<end_function_call>";
    expect_round_trip(ToolFormat::FunctionGemma, g, {{call, {{"odd", R"({"a\"b": "v", "x y:z": "q\"\\", "ü\n": false})"}}}},
                      "");
    grammar::Grammar h = grammar::Grammar::from_gbnf(call_grammar(ToolFormat::Hermes, tools, kRequired, false).gbnf);
    expect_round_trip(ToolFormat::Hermes, h,
                      {{"<tool_call>\n{\"name\": \"odd\", \"arguments\": {\"a\\\"b\": \"v\", \"x y:z\": \"<e>\", "
                        "\"ü\\n\": true}}\n</tool_call>",
                        {{"odd", R"({"a\"b": "v", "x y:z": "<e>", "ü\n": true})"}}}},
                      "");
}

TEST(ToolGrammar, ChoiceAndErrors) {
    EXPECT_TRUE(call_grammar(ToolFormat::Hermes, grammar_tools(), {ToolChoice::None, {}}, true).gbnf.empty());
    EXPECT_THROW(call_grammar(ToolFormat::Hermes, {}, kAuto, true), ToolError);
    try {
        call_grammar(ToolFormat::Hermes, grammar_tools(), {ToolChoice::Named, "zzz"}, true);
        FAIL();
    } catch (const ToolError& e) {
        EXPECT_EQ(e.param(), "tool_choice");
    }
    std::vector<Tool> tools = grammar_tools();
    tools[1].parameters = Json::parse(R"({"type": "object", "properties": {"a": {"not": {}}}})");
    for (ToolFormat f : {ToolFormat::Hermes, ToolFormat::QwenXml}) {
        try {
            call_grammar(f, tools, kAuto, true);
            FAIL() << tool_format_name(f);
        } catch (const ToolError& e) {
            EXPECT_EQ(e.param(), "tools[1].function.parameters");
        }
    }
}

TEST(ToolGrammar, ManyToolsShareOneGrammar) {
    Json many = Json::array();
    for (int i = 0; i < 20; ++i) {
        std::string name = "f";
        name += std::to_string(i);
        many.push_back(Json{{"type", "function"},
                            {"function", {{"name", name},
                                          {"parameters", Json::parse(R"({"type": "object", "properties": {"d":
                                           {"type": "string", "format": "date"}, "o": {"type": "object", "properties":
                                           {"n": {"type": "integer", "minimum": 1, "maximum": 9}}}}})")}}}});
    }
    std::vector<Tool> tools = parse_tools(many);
    for (ToolFormat f : {ToolFormat::Hermes, ToolFormat::SmolLM2, ToolFormat::Llama3, ToolFormat::FunctionGemma,
                         ToolFormat::QwenXml}) {
        CallGrammar cg = call_grammar(f, tools, kRequired, true);
        EXPECT_NO_THROW(grammar::Grammar::from_gbnf(cg.gbnf)) << tool_format_name(f);
    }
    grammar::Grammar g = grammar::Grammar::from_gbnf(call_grammar(ToolFormat::Llama3, tools, kAuto, false).gbnf);
    EXPECT_TRUE(accepts(g, "{\"name\": \"f7\", \"parameters\": {\"d\": \"2024-02-29\", \"o\": {\"n\": 3}}}"));
    EXPECT_FALSE(accepts(g, "{\"name\": \"f7\", \"parameters\": {\"d\": \"2023-02-29\"}}"));
}

}  // namespace
}  // namespace cellm::tools
