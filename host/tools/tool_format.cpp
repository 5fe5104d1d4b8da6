// Tool-call formats: detection, prompts for templates that know no tools, and the call grammars.
#include "tools/tool_format.h"

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "tools/function_gemma.h"

#include <map>
#include <optional>

namespace cellm::tools {

using Json = nlohmann::ordered_json;

namespace {

bool contains(std::string_view text, std::string_view what) { return text.find(what) != std::string_view::npos; }

std::string dump(const Json& value, int indent = -1) {
    return value.dump(indent, ' ', false, Json::error_handler_t::replace);
}

// ---- prompts -------------------------------------------------------------------------------------------------

Json functions_json(const std::vector<Tool>& tools) {
    Json out = Json::array();
    for (const Json& tool : tools_json(tools)) out.push_back(tool["function"]);
    return out;
}

std::string tools_prompt(ToolFormat format, const std::vector<Tool>& tools) {
    switch (format) {
    case ToolFormat::Gemma3:
        // Google's Gemma 3 function-calling prompt, with the JSON call form.
        return "You have access to functions. If you decide to invoke any of the function(s), you MUST put it in "
               "the format of\n{\"name\": function name, \"parameters\": dictionary of argument name and its value}\n\n"
               "You SHOULD NOT include any other text in the response if you call a function\n" +
               dump(functions_json(tools), 2);
    case ToolFormat::SmolLM2:
        // SmolLM2's documented function-calling system prompt.
        return "You are an expert in composing functions. You are given a question and a set of possible functions.\n"
               "Based on the question, you will need to make one or more function/tool calls to achieve the purpose.\n"
               "If none of the functions can be used, point it out and refuse to answer.\n"
               "If the given question lacks the parameters required by the function, also point it out.\n\n"
               "You have access to the following tools:\n<tools>" +
               dump(tools_json(tools)) +
               "</tools>\n\nThe output MUST strictly adhere to the following format, and NO other text MUST be "
               "included.\nThe example format is as follows. Please make sure the parameter type is correct. If no "
               "function call is needed, please make the tool calls an empty list '[]'.\n<tool_call>[\n"
               "{\"name\": \"func_name1\", \"arguments\": {\"argument1\": \"value1\", \"argument2\": \"value2\"}},\n"
               "... (more tool calls as required)\n]</tool_call>";
    case ToolFormat::Hermes: {
        // What Qwen 2.5's template writes.
        std::string out = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
                          "provided with function signatures within <tools></tools> XML tags:\n<tools>";
        for (const Json& tool : tools_json(tools)) out += "\n" + dump(tool);
        return out + "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                     "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
                     "\"arguments\": <args-json-object>}\n</tool_call>";
    }
    case ToolFormat::QwenXml: {
        // What Qwen 3.5's template writes.
        std::string out = "# Tools\n\nYou have access to the following functions:\n\n<tools>";
        for (const Json& tool : tools_json(tools)) out += "\n" + dump(tool);
        return out + "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO "
                     "suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\n"
                     "value_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second "
                     "parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n"
                     "<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner "
                     "<function=...></function> block must be nested within <tool_call></tool_call> XML tags\n- "
                     "Required parameters MUST be specified\n- You may provide optional reasoning for your function "
                     "call in natural language BEFORE the function call, but NOT after\n- If there is no function "
                     "call available, answer the question like normal with your current knowledge and do not tell "
                     "the user about function calls\n</IMPORTANT>";
    }
    case ToolFormat::Llama3: {
        // What Llama 3.1's template writes into the system message.
        std::string out = "You have access to the following functions. To call a function, please respond with JSON "
                          "for a function call. Respond in the format {\"name\": function name, \"parameters\": "
                          "dictionary of argument name and its value}. Do not use variables.\n\n";
        for (const Json& tool : tools_json(tools)) out += dump(tool, 4) + "\n\n";
        return out.substr(0, out.size() - 2);
    }
    case ToolFormat::FunctionGemma: {
        // Close to what FunctionGemma's own template writes (every FunctionGemma model ships one): a fallback.
        std::string out = "You are a model that can do function calling with the following functions";
        for (const Json& function : functions_json(tools))
            out += "<start_function_declaration>declaration:" + function["name"].get<std::string>() +
                   function_gemma_value(Json{{"description", function.value("description", "")},
                                             {"parameters", function["parameters"]}}) +
                   "<end_function_declaration>";
        return out;
    }
    }
    return {};
}

std::string arguments_text(const ToolCall& call) {
    size_t begin = call.arguments.find_first_not_of(" \t\r\n");
    if (begin == std::string::npos) return "{}";
    size_t end = call.arguments.find_last_not_of(" \t\r\n");
    return call.arguments.substr(begin, end - begin + 1);
}

// A call as Qwen 3.5's template writes it: strings as is, other values as JSON.
std::string qwen_xml_call(const ToolCall& call) {
    std::string out = "<tool_call>\n<function=" + call.name + ">\n";
    Json args = Json::parse(call.arguments, nullptr, false);
    if (!args.is_discarded() && args.is_object())
        for (const auto& [key, value] : args.items())
            out += "<parameter=" + key + ">\n" + (value.is_string() ? value.get<std::string>() : dump(value)) +
                   "\n</parameter>\n";
    return out + "</function>\n</tool_call>";
}

std::string calls_text(ToolFormat format, const std::vector<ToolCall>& calls) {
    std::string out;
    auto json_call = [](const ToolCall& call, const char* key) {
        return "{\"name\": " + dump(Json(call.name)) + ", \"" + key + "\": " + arguments_text(call) + "}";
    };
    for (size_t i = 0; i < calls.size(); ++i) {
        const ToolCall& call = calls[i];
        switch (format) {
        case ToolFormat::Hermes:
            out += (i ? "\n" : "") + std::string("<tool_call>\n") + json_call(call, "arguments") + "\n</tool_call>";
            break;
        case ToolFormat::QwenXml: out += (i ? "\n" : "") + qwen_xml_call(call); break;
        case ToolFormat::SmolLM2: out += (i ? ",\n" : "<tool_call>[\n") + json_call(call, "arguments"); break;
        case ToolFormat::Llama3:
        case ToolFormat::Gemma3: out += (i ? "\n" : "") + json_call(call, "parameters"); break;
        case ToolFormat::FunctionGemma: {
            Json args = Json::parse(call.arguments, nullptr, false);
            if (args.is_discarded() || !args.is_object()) args = Json::object();
            out += std::string(kFgCallStart) + "call:" + call.name + function_gemma_value(args) +
                   std::string(kFgCallEnd);
            break;
        }
        }
    }
    if (format == ToolFormat::SmolLM2 && !calls.empty()) out += "\n]</tool_call>";
    return out;
}

std::string tool_result_text(ToolFormat format, const ChatMessage& message) {
    switch (format) {
    case ToolFormat::Gemma3: return "```tool_output\n" + message.content + "\n```";
    case ToolFormat::Hermes:
    case ToolFormat::QwenXml:
    case ToolFormat::SmolLM2: return "<tool_response>\n" + message.content + "\n</tool_response>";
    case ToolFormat::Llama3: return message.content;
    case ToolFormat::FunctionGemma:
        return "<start_function_response>response:" + (message.name.empty() ? std::string("function") : message.name) +
               function_gemma_value(Json{{"value", message.content}}) + "<end_function_response>";
    }
    return message.content;
}

// ---- grammars ------------------------------------------------------------------------------------------------

// At most one space or newline in a gap of the call's own markup: small models (and random weights) otherwise
// spend their token budget on the indentation JSON's whitespace rule allows there. The arguments keep it.
const char* kWhitespace = "tc-ws ::= | \" \" | \"\\n\"\n";

// Appends the lines of one schema's GBNF, keeping one copy of each shared primitive rule.
void merge_rules(const std::string& gbnf, const std::string& prefix, std::string& out,
                 std::map<std::string, std::string>& primitives) {
    size_t pos = 0;
    while (pos < gbnf.size()) {
        size_t end = gbnf.find('\n', pos);
        if (end == std::string::npos) end = gbnf.size();
        std::string line = gbnf.substr(pos, end - pos);
        pos = end + 1;
        if (line.empty()) continue;
        if (line.starts_with(prefix)) {
            out += line + "\n";
            continue;
        }
        std::string name = line.substr(0, line.find(' '));
        auto [it, inserted] = primitives.emplace(name, line);
        if (!inserted && it->second != line) throw Error("internal: primitive rule " + name + " differs between schemas");
    }
}

// QwenXml's shared rules. tc-xml-text: any text without "</parameter>" in it, as a state machine over how much
// of "</parameter" was just seen (that marker has '<' only at its start, so a '<' always starts again); it may
// end in any state, as "\n</parameter>" follows it.
std::string qwen_xml_shared_gbnf() {
    constexpr std::string_view end = "</parameter>";
    std::string out = "tc-xml-param ::= \"<parameter=\" tc-xml-key \">\\n\" tc-xml-text \"\\n</parameter>\" tc-ws\n"
                      "tc-xml-key ::= [^<>\\n]{1,128}\n"
                      "tc-xml-bool ::= \"true\" | \"false\" | \"True\" | \"False\"\n"
                      "tc-xml-text ::= \"\" | [^<] tc-xml-text | \"<\" tc-xml-text-1\n";
    for (size_t j = 1; j < end.size(); ++j) {
        const std::string state = "tc-xml-text-" + std::to_string(j);
        out += state + " ::= \"\" | \"<\" tc-xml-text-1 | ";
        if (j + 1 < end.size())
            out += gbnf_literal(end.substr(j, 1)) + " tc-xml-text-" + std::to_string(j + 1) + " | ";
        out += "[^<" + std::string(1, end[j]) + "] tc-xml-text\n";
    }
    return out;
}

// The rule for one raw string parameter's text: an enum's or const's strings verbatim; with minLength /
// maxLength, that many characters other than '<' (which keeps "</parameter>" out without a state machine per
// count); else any text.
std::string qwen_xml_string_gbnf(const Json& schema) {
    Json values = schema.contains("const") ? Json::array({schema["const"]}) : schema.value("enum", Json::array());
    const auto bound = [&](const char* keyword) -> std::optional<uint64_t> {
        const auto it = schema.find(keyword);
        if (it == schema.end() || !it->is_number_unsigned()) return std::nullopt;
        return it->get<uint64_t>();
    };
    const std::optional<uint64_t> min = bound("minLength"), max = bound("maxLength");
    if (values.empty() && (min || max)) {
        return "[^<]{" + std::to_string(min.value_or(0)) + "," + (max ? std::to_string(*max) : std::string()) + "}";
    }
    if (values.empty()) return "tc-xml-text";
    std::string out = "(";
    for (const Json& v : values) out += (out.size() > 1 ? " | " : "") + gbnf_literal(v.get<std::string>());
    return out + ")";
}

// The parameters of one QwenXml call (see call_grammar in the header): rule `prefix`root, appended to `rules`
// with the JSON values' rules. Throws GrammarError when a property's schema does not compile.
void qwen_xml_params_gbnf(const Json& schema, const std::string& prefix, std::string& rules,
                          std::map<std::string, std::string>& primitives) {
    if (!schema.is_object() || !schema.contains("properties") || !schema["properties"].is_object()) {
        rules += prefix + "root ::= tc-xml-param*\n";
        return;
    }
    std::string root;
    size_t count = 0;
    for (const auto& [name, property] : schema["properties"].items()) {
        if (property.is_boolean() && !property.get<bool>()) continue;
        const std::string rule = prefix + "p" + std::to_string(count++);
        std::string value;
        if (qwen_xml_raw_string(property)) {
            value = qwen_xml_string_gbnf(property);
        } else if (property.is_object() && property.value("type", Json()) == "boolean" && !property.contains("enum") &&
                   !property.contains("const")) {
            value = "tc-xml-bool";
        } else {
            Json sub = property.is_object() ? property : Json::object();
            for (const char* defs : {"$defs", "definitions"})
                if (schema.contains(defs) && !sub.contains(defs)) sub[defs] = schema[defs];
            const std::string sub_prefix = rule + "-";
            grammar::JsonSchemaOptions options;
            options.rule_prefix = sub_prefix;
            merge_rules(grammar::json_schema_to_gbnf(dump(sub), options), sub_prefix, rules, primitives);
            value = sub_prefix + "root";
        }
        bool required = false;
        if (schema.contains("required") && schema["required"].is_array())
            for (const Json& r : schema["required"]) required |= r.is_string() && r.get<std::string>() == name;
        rules += rule + " ::= " + gbnf_literal("<parameter=" + name + ">\n") + " " + value +
                 " \"\\n</parameter>\" tc-ws\n";
        root += " " + rule + (required ? "" : "?");
    }
    rules += prefix + "root ::= " + (root.empty() ? std::string("\"\"") : root.substr(1)) + "\n";
}

}  // namespace

bool qwen_xml_raw_string(const Json& schema) {
    // A pattern or format cannot be followed in raw text: such a string is written as a JSON string, which the
    // schema's grammar can follow, and read back as one.
    if (!schema.is_object() || schema.contains("pattern") || schema.contains("format")) return false;
    if (schema.contains("const")) return schema["const"].is_string();
    if (schema.contains("enum")) {
        const Json& values = schema["enum"];
        if (!values.is_array() || values.empty()) return false;
        for (const Json& v : values)
            if (!v.is_string()) return false;
        return true;
    }
    if (!schema.contains("type")) return false;
    const Json& type = schema["type"];
    return type == "string" || (type.is_array() && type.size() == 1 && type[0] == "string");
}

const char* tool_format_name(ToolFormat format) {
    switch (format) {
    case ToolFormat::Hermes: return "hermes";
    case ToolFormat::Llama3: return "llama3";
    case ToolFormat::Gemma3: return "gemma3";
    case ToolFormat::FunctionGemma: return "function-gemma";
    case ToolFormat::SmolLM2: return "smollm2";
    case ToolFormat::QwenXml: return "qwen-xml";
    }
    return "unknown";
}

std::optional<ToolFormat> detect_tool_format(std::string_view source, ChatTemplateKind kind,
                                             const std::function<bool(std::string_view)>& has_token) {
    const bool mentions_tools = contains(source, "tools");
    if ((has_token && has_token(kFgCallStart)) || contains(source, kFgCallStart)) return ToolFormat::FunctionGemma;
    const bool chatml = contains(source, "<|im_start|>") || kind == ChatTemplateKind::ChatML;
    if (chatml && contains(source, "<tool_call>") && contains(source, "<function=") && contains(source, "<parameter="))
        return ToolFormat::QwenXml;
    if (chatml && contains(source, "<tool_call>")) return ToolFormat::Hermes;
    if (contains(source, "<|start_header_id|>"))
        return mentions_tools ? std::optional(ToolFormat::Llama3) : std::nullopt;
    if (contains(source, "<start_of_turn>") || (kind == ChatTemplateKind::Gemma && source.empty()))
        return mentions_tools ? std::nullopt : std::optional(ToolFormat::Gemma3);
    if (kind == ChatTemplateKind::ChatML && !mentions_tools) return ToolFormat::SmolLM2;
    return std::nullopt;
}

bool template_renders_tools(ToolFormat format, std::string_view source) {
    switch (format) {
    case ToolFormat::Hermes:
    case ToolFormat::QwenXml:
    case ToolFormat::Llama3:
    case ToolFormat::FunctionGemma: return contains(source, "tools");
    case ToolFormat::Gemma3:
    case ToolFormat::SmolLM2: return false;
    }
    return false;
}

std::vector<ChatMessage> prepare_messages(ToolFormat format, bool template_renders, const std::vector<Tool>& tools,
                                          const std::vector<ChatMessage>& messages) {
    if (template_renders) return messages;
    std::vector<ChatMessage> out;
    bool last_was_result = false;  // out.back() holds tool results
    for (const ChatMessage& message : messages) {
        if (message.role == "assistant" && !message.tool_calls.empty()) {
            ChatMessage m = message;
            const std::string calls = calls_text(format, message.tool_calls);
            m.content = message.content.empty() ? calls : message.content + "\n" + calls;
            m.tool_calls.clear();
            out.push_back(std::move(m));
            last_was_result = false;
        } else if (message.role == "tool") {
            const std::string text = tool_result_text(format, message);
            if (format == ToolFormat::Llama3) {
                out.push_back({"ipython", text});
            } else if (!out.empty() && out.back().role == "user" && (last_was_result || format == ToolFormat::Gemma3)) {
                out.back().content += (last_was_result ? "\n" : "\n\n") + text;
            } else {
                out.push_back({"user", text});
            }
            last_was_result = format != ToolFormat::Llama3;
        } else if (format == ToolFormat::Gemma3 && message.role == "user" && last_was_result) {
            // Gemma's turns must alternate: a user message after a tool result joins its turn.
            out.back().content += "\n\n" + message.content;
            last_was_result = false;
        } else {
            out.push_back(message);
            last_was_result = false;
        }
    }
    if (!tools.empty()) {
        const std::string prompt = tools_prompt(format, tools);
        if (!out.empty() && out.front().role == "system") {
            if (!out.front().content.empty()) out.front().content = prompt + "\n\n" + out.front().content;
            else out.front().content = prompt;
        } else {
            out.insert(out.begin(), ChatMessage{"system", prompt});
        }
    }
    return out;
}

CallGrammar call_grammar(ToolFormat format, const std::vector<Tool>& tools, const ToolChoice& choice, bool parallel) {
    if (choice.kind == ToolChoice::None) return {};
    if (tools.empty()) throw ToolError("tools", "a tool_choice other than \"none\" needs at least one tool");
    const bool json = format != ToolFormat::FunctionGemma && format != ToolFormat::QwenXml;
    const char* args_key = format == ToolFormat::Llama3 || format == ToolFormat::Gemma3 ? "parameters" : "arguments";
    std::string tool_rules, functions;
    std::map<std::string, std::string> primitives;
    bool found = false;
    for (size_t i = 0; i < tools.size(); ++i) {
        const Tool& tool = tools[i];
        if (choice.kind == ToolChoice::Named && tool.name != choice.name) continue;
        found = true;
        const std::string prefix = "t" + std::to_string(i) + "-";
        std::string alternative;
        if (json) {
            grammar::JsonSchemaOptions options;
            options.rule_prefix = prefix;
            try {
                merge_rules(grammar::json_schema_to_gbnf(dump(tool.parameters), options), prefix, tool_rules,
                            primitives);
            } catch (const grammar::GrammarError& e) {
                throw ToolError("tools[" + std::to_string(i) + "].function.parameters", e.what());
            }
            alternative = gbnf_literal("\"" + tool.name + "\"") + " tc-ws \",\" tc-ws " +
                          gbnf_literal(std::string("\"") + args_key + "\"") + " tc-ws \":\" tc-ws " + prefix + "root";
        } else if (format == ToolFormat::QwenXml) {
            try {
                qwen_xml_params_gbnf(tool.parameters, prefix, tool_rules, primitives);
            } catch (const grammar::GrammarError& e) {
                throw ToolError("tools[" + std::to_string(i) + "].function.parameters", e.what());
            }
            alternative = gbnf_literal("<function=" + tool.name + ">") + " tc-ws " + prefix + "root \"</function>\"";
        } else {
            tool_rules += function_gemma_args_gbnf(tool.parameters, prefix);
            alternative = gbnf_literal(tool.name) + " " + prefix + "root";
        }
        functions += (functions.empty() ? "" : " | ") + alternative;
    }
    if (!found) throw ToolError("tool_choice", "names function \"" + choice.name + "\", which is not among `tools`");

    CallGrammar out;
    const bool lazy = choice.kind == ToolChoice::Auto;
    std::string& g = out.gbnf;
    switch (format) {
    case ToolFormat::Hermes:
        g = parallel ? "root ::= tc-call (tc-ws tc-call)*\n" : "root ::= tc-call\n";
        g += "tc-call ::= \"<tool_call>\" tc-ws \"{\" tc-ws \"\\\"name\\\"\" tc-ws \":\" tc-ws tc-fn \"}\" tc-ws "
             "\"</tool_call>\"\n";
        if (lazy) out.trigger = "<tool_call>";
        break;
    case ToolFormat::QwenXml:
        g = parallel ? "root ::= tc-call (tc-ws tc-call)*\n" : "root ::= tc-call\n";
        g += "tc-call ::= \"<tool_call>\" tc-ws tc-fn tc-ws \"</tool_call>\"\n";
        if (lazy) out.trigger = "<tool_call>";
        break;
    case ToolFormat::SmolLM2: {
        std::string list = parallel ? "tc-obj (tc-ws \",\" tc-ws tc-obj)*" : "tc-obj";
        // Auto: the prompt asks for an empty list when no call is needed.
        if (lazy) list = "(" + list + ")?";
        g = "root ::= \"<tool_call>\" tc-ws \"[\" tc-ws " + list + " tc-ws \"]\" tc-ws \"</tool_call>\"\n";
        g += "tc-obj ::= \"{\" tc-ws \"\\\"name\\\"\" tc-ws \":\" tc-ws tc-fn \"}\"\n";
        if (lazy) out.trigger = "<tool_call>";
        break;
    }
    case ToolFormat::Llama3:
    case ToolFormat::Gemma3:
        // One call: Llama 3's format has no parallel form, and the Gemma 3 prompt asks for one object.
        g = "root ::= \"{\\\"name\\\"\" tc-ws \":\" tc-ws tc-fn \"}\"\n";
        if (lazy) out.trigger = "{\"name\"";
        break;
    case ToolFormat::FunctionGemma:
        g = parallel ? "root ::= tc-call+\n" : "root ::= tc-call\n";
        g += "tc-call ::= " + gbnf_literal(std::string(kFgCallStart) + "call:") + " tc-fn " +
             gbnf_literal(kFgCallEnd) + "\n";
        if (lazy) out.trigger = std::string(kFgCallStart);
        break;
    }
    g += "tc-fn ::= " + functions + "\n";
    g += kWhitespace;
    g += tool_rules;
    for (const auto& [name, line] : primitives) g += line + "\n";
    if (format == ToolFormat::FunctionGemma) g += function_gemma_shared_gbnf();
    if (format == ToolFormat::QwenXml) g += qwen_xml_shared_gbnf();
    if (g.size() > grammar::kMaxGrammarBytes)
        throw ToolError("tools", "the call grammar for these tools would be " + std::to_string(g.size() / 1024) +
                                     " KiB, over the 256 KiB limit");
    return out;
}

}  // namespace cellm::tools
