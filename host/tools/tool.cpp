// OpenAI's `tools` and `tool_choice`, read and checked.
#include "tools/tool.h"

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

#include <set>

namespace cellm::tools {

using Json = nlohmann::ordered_json;

namespace {

bool valid_name(const std::string& name) {
    if (name.empty() || name.size() > 64) return false;
    for (char c : name)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    return true;
}

Tool parse_tool(const Json& entry, const std::string& at) {
    if (!entry.is_object()) throw ToolError(at, "must be an object");
    if (!entry.contains("type") || !entry["type"].is_string())
        throw ToolError(at + ".type", "is required and must be \"function\"");
    if (entry["type"].get<std::string>() != "function")
        throw ToolError(at + ".type", "must be \"function\" (the only tool type supported)");
    if (!entry.contains("function") || !entry["function"].is_object())
        throw ToolError(at + ".function", "is required and must be an object");
    const Json& function = entry["function"];
    Tool tool;
    if (!function.contains("name") || !function["name"].is_string())
        throw ToolError(at + ".function.name", "is required and must be a string");
    tool.name = function["name"].get<std::string>();
    if (!valid_name(tool.name))
        throw ToolError(at + ".function.name", "must be 1 to 64 letters, digits, '_' or '-'");
    if (function.contains("description") && !function["description"].is_null()) {
        if (!function["description"].is_string()) throw ToolError(at + ".function.description", "must be a string");
        tool.description = function["description"].get<std::string>();
    }
    if (function.contains("strict") && !function["strict"].is_null() && !function["strict"].is_boolean())
        throw ToolError(at + ".function.strict", "must be a boolean");
    const std::string params_at = at + ".function.parameters";
    if (!function.contains("parameters") || function["parameters"].is_null()) {
        tool.parameters = Json{{"type", "object"}, {"properties", Json::object()}};
    } else {
        const Json& parameters = function["parameters"];
        if (!parameters.is_object()) throw ToolError(params_at, "must be a JSON Schema object");
        if (parameters.contains("type") && parameters["type"] != "object")
            throw ToolError(params_at, "must describe an object (\"type\": \"object\"): arguments are a JSON object");
        tool.parameters = parameters;
        if (!parameters.contains("type")) tool.parameters["type"] = "object";
    }
    try {
        grammar::json_schema_to_gbnf(tool.parameters.dump(-1, ' ', false, Json::error_handler_t::replace));
    } catch (const grammar::GrammarError& e) {
        throw ToolError(params_at, e.what());
    }
    return tool;
}

}  // namespace

std::vector<Tool> parse_tools(const Json& tools) {
    if (tools.is_null()) return {};
    if (!tools.is_array()) throw ToolError("tools", "must be an array of tools");
    std::vector<Tool> out;
    std::set<std::string> names;
    for (size_t i = 0; i < tools.size(); ++i) {
        const std::string at = "tools[" + std::to_string(i) + "]";
        Tool tool = parse_tool(tools[i], at);
        if (!names.insert(tool.name).second)
            throw ToolError(at + ".function.name", "\"" + tool.name + "\" names another tool too; names must be unique");
        out.push_back(std::move(tool));
    }
    return out;
}

ToolChoice parse_tool_choice(const Json& choice, const std::vector<Tool>& tools) {
    if (choice.is_null()) return {tools.empty() ? ToolChoice::None : ToolChoice::Auto, {}};
    ToolChoice out;
    if (choice.is_string()) {
        const std::string s = choice.get<std::string>();
        if (s == "none") out.kind = ToolChoice::None;
        else if (s == "auto") out.kind = ToolChoice::Auto;
        else if (s == "required") out.kind = ToolChoice::Required;
        else throw ToolError("tool_choice", "must be \"none\", \"auto\", \"required\" or a function object");
    } else if (choice.is_object()) {
        if (!choice.contains("type") || choice["type"] != "function")
            throw ToolError("tool_choice", "an object must have \"type\": \"function\"");
        if (!choice.contains("function") || !choice["function"].is_object() || !choice["function"].contains("name") ||
            !choice["function"]["name"].is_string())
            throw ToolError("tool_choice", "must name the function: {\"type\": \"function\", \"function\": {\"name\": ...}}");
        out.kind = ToolChoice::Named;
        out.name = choice["function"]["name"].get<std::string>();
        bool known = false;
        for (const Tool& tool : tools) known |= tool.name == out.name;
        if (!known) throw ToolError("tool_choice", "names function \"" + out.name + "\", which is not among `tools`");
    } else {
        throw ToolError("tool_choice", "must be a string or an object");
    }
    if (out.kind != ToolChoice::None && tools.empty())
        throw ToolError("tool_choice", "is only allowed with `tools` (or \"none\")");
    return out;
}

Json tools_json(const std::vector<Tool>& tools) {
    Json out = Json::array();
    for (const Tool& tool : tools) {
        Json function = Json::object();
        function["name"] = tool.name;
        if (!tool.description.empty()) function["description"] = tool.description;
        function["parameters"] = tool.parameters;
        out.push_back(Json{{"type", "function"}, {"function", std::move(function)}});
    }
    return out;
}

}  // namespace cellm::tools
