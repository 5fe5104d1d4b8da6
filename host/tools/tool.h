// OpenAI's function tools as a request or an SDK session gives them: the `tools` array and `tool_choice`, read
// and checked. Everything malformed is a ToolError naming the field ("tools[1].function.parameters: ...").
#pragma once

#include "error.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace cellm::tools {

// A `tools` / `tool_choice` value the engine cannot use. `param` is the field's path within the request
// ("tools[0].function.name", "tool_choice"), for the server's error object.
class ToolError : public Error {
public:
    ToolError(std::string param, const std::string& message) : Error(param + ": " + message), param_(std::move(param)) {}
    const std::string& param() const { return param_; }

private:
    std::string param_;
};

struct Tool {
    std::string name;         // [A-Za-z0-9_-]{1,64}, as OpenAI requires
    std::string description;  // may be empty
    nlohmann::ordered_json parameters;  // a JSON Schema object; {"type": "object", "properties": {}} when not given
};

struct ToolChoice {
    enum Kind { None, Auto, Required, Named };
    Kind kind = Auto;
    std::string name;  // Named: the function that must be called
};

// `tools`: an array of {"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}.
// Names must be unique. Parameters must be a JSON Schema object whose grammar compiles (the engine constrains
// arguments with it): a schema the grammar engine refuses is a ToolError naming the keyword.
std::vector<Tool> parse_tools(const nlohmann::ordered_json& tools);

// `tool_choice`: "none", "auto", "required" or {"type": "function", "function": {"name": N}}, where N must be
// one of `tools`; anything but "none" needs tools (as OpenAI). Unset (null) means "auto" with tools and "none"
// without.
ToolChoice parse_tool_choice(const nlohmann::ordered_json& choice, const std::vector<Tool>& tools);

// The tools as the OpenAI JSON array templates receive (`tools` in the Jinja context).
nlohmann::ordered_json tools_json(const std::vector<Tool>& tools);

}  // namespace cellm::tools
