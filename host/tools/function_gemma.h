// FunctionGemma's argument syntax, shared by the call grammar (tool_format.cpp) and the call parser
// (tool_call_parser.cpp): {key:value,...} with strings between <escape> delimiters, numbers, true/false/null,
// nested {...} and [...], no whitespace.
#pragma once

#include "grammar/gbnf.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace cellm::tools {

inline constexpr std::string_view kFgEscape = "<escape>";
inline constexpr std::string_view kFgCallStart = "<start_function_call>";
inline constexpr std::string_view kFgCallEnd = "<end_function_call>";

// GBNF rules whose `prefix`root matches the arguments object of a function with this parameters schema. Mapped:
// type object (declared properties in the schema's order, the required ones required, no others; without
// `properties` any keys), string (enum / const of strings as literals), integer, number, boolean, null, array
// (with items), a type list and anyOf / oneOf as alternatives. Anything else (a $ref, allOf, a keyword such as
// pattern or minimum) is matched by the generic value, which is looser than the schema. The rules refer to the
// shared fg-* rules of function_gemma_shared_gbnf().
std::string function_gemma_args_gbnf(const nlohmann::ordered_json& schema, const std::string& prefix);
std::string function_gemma_shared_gbnf();

// "call:NAME{...}" (the text between the call markers) -> the name and the arguments as JSON text; nullopt when
// it is not that shape. Bare words that are not numbers, true, false or null are read as strings.
struct FgCall {
    std::string name;
    std::string arguments;
};
std::optional<FgCall> parse_function_gemma_call(std::string_view inner);

// A JSON value in FunctionGemma's syntax (tool calls in the history, declarations in a fallback prompt).
std::string function_gemma_value(const nlohmann::ordered_json& value);

using grammar::gbnf_literal;

}  // namespace cellm::tools
