// The tool-call formats of the model families cellm runs: which one a model speaks, how tools and earlier calls
// reach its prompt, and the grammar that makes a call always parse.
//
// | format        | families              | a call in the model's output                                        |
// |---------------|-----------------------|---------------------------------------------------------------------|
// | Hermes        | Qwen 2.5 / 3          | <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>, one each |
// | QwenXml       | Qwen 3.5, Qwen3-Coder | <tool_call>\n<function=N>\n<parameter=K>\nVALUE\n</parameter>\n ... |
// |               |                       | </function>\n</tool_call>, one each, a parameter block per argument  |
// | Llama3        | Llama 3.1-3.3         | {"name": N, "parameters": {...}} as the whole answer                |
// | Gemma3        | Gemma 3 (prompt-made) | {"name": N, "parameters": {...}} as the whole answer                |
// | FunctionGemma | FunctionGemma         | <start_function_call>call:N{key:<escape>text<escape>,...}<end_function_call> |
// | SmolLM2       | SmolLM2 (prompt-made) | <tool_call>[{"name": N, "arguments": {...}}, ...]</tool_call>       |
//
// QwenXml's VALUE is a string parameter's text as is and any other value's JSON (as the template writes them).
// Hermes, QwenXml, Llama3 and FunctionGemma templates render `tools` themselves; for Gemma3 and SmolLM2, whose
// templates know no tools, cellm writes the tools and the format into the system prompt (documented in
// docs/server.md).
#pragma once

#include "tokenize/chat_template.h"
#include "tools/tool.h"

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellm::tools {

enum class ToolFormat { Hermes, Llama3, Gemma3, FunctionGemma, SmolLM2, QwenXml };

const char* tool_format_name(ToolFormat format);

// The format a model speaks, from its Jinja chat template (may be empty) and its vocabulary (`has_token` tells
// whether a token with this text exists; may be empty), and the hand-written family it falls back on. nullopt:
// unknown, so a request with tools must be refused. In order:
// - FunctionGemma: the vocabulary has <start_function_call>, or the template mentions it;
// - QwenXml: the template mentions <tool_call>, <function= and <parameter= and is ChatML (<|im_start|>, or kind
//   ChatML): Qwen 3.5, Qwen3-Coder (and Nemotron 3 Nano and Step 3.5, which ask for the same form);
// - Hermes: the template mentions <tool_call> and is ChatML;
// - Llama3: a <|start_header_id|> template that mentions `tools` (3.1-3.3); one that does not (Llama 3.0, whose
//   model was not trained on calls) is nullopt;
// - Gemma3: a <start_of_turn> template that does not mention `tools`, or kind Gemma with no template (a template
//   with its own tool syntax that is not FunctionGemma's is nullopt);
// - SmolLM2: kind ChatML and a template (or none) that does not mention `tools`;
// - else nullopt (Plain, and ChatML templates whose tool syntax is not Hermes).
std::optional<ToolFormat> detect_tool_format(std::string_view template_source, ChatTemplateKind kind,
                                             const std::function<bool(std::string_view)>& has_token);

// Whether the model's own template renders `tools` and tool messages itself (else prepare_messages does).
bool template_renders_tools(ToolFormat format, std::string_view template_source);

// The conversation as the template should see it. For a template that renders tools itself: unchanged (its
// Jinja context needs each call's arguments as a parsed object: Qwen 2.5, Qwen 3.5 and Llama 3.x apply tojson or
// |items to them, and Llama 3.x's template refuses more than one call per message). For
// the others (Gemma3, SmolLM2, and any hand-written fallback): the tools and the call format go into the system
// message (prepended to the first one, or a new one), assistant tool calls become text in the family's format,
// and `tool` messages become what the family reads as a function's result (a user turn for Gemma3, which has
// no tool role). `tools` is empty when tool_choice is none: messages with tool calls are still rewritten.
// The texts: the prompt goes first, then "\n\n" and the conversation's own system text. Calls read as the model
// writes them: Hermes <tool_call>\n{"name": N, "arguments": A}\n</tool_call> joined by "\n"; QwenXml
// <tool_call>\n<function=N>\n then <parameter=K>\nV\n</parameter>\n for each argument (V: a string as is, any
// other value as compact JSON; arguments that are not a JSON object give none) then </function>\n</tool_call>,
// joined by "\n"; SmolLM2
// <tool_call>[\n{"name": N, "arguments": A},\n...\n]</tool_call>; Llama3 and Gemma3 {"name": N, "parameters": A}
// one a line; FunctionGemma <start_function_call>call:N{...}<end_function_call>; after the message's content and
// "\n" when it has content (A: the arguments text as given, trimmed; "{}" when empty). Results: Gemma3
// "```tool_output\nRESULT\n```" in a user turn (results and a user message that follow each other share one
// turn, as Gemma's turns must alternate); Hermes, QwenXml and SmolLM2 "<tool_response>\nRESULT\n</tool_response>"
// in a user turn (consecutive results share it); Llama3 an "ipython" turn each; FunctionGemma
// <start_function_response>response:NAME{value:<escape>RESULT<escape>}<end_function_response> in a user turn.
std::vector<ChatMessage> prepare_messages(ToolFormat format, bool template_renders, const std::vector<Tool>& tools,
                                          const std::vector<ChatMessage>& messages);

// A grammar (GBNF text, rule `root`) that only admits well-formed calls in `format` whose arguments fit their
// function's schema: of any tool (Auto, Required) or of choice.name (Named); several calls back to back when
// `parallel`. `trigger` is empty for Required and Named (constrained from the first token); for Auto it is the
// text that opens a call (the grammar's language starts with it): generation is free until the text holds it,
// then constrained from its first byte on. Throws ToolError (param "tools[i].function.parameters") when a
// schema does not compile, "tool_choice" when choice names no tool, "tools" when there are none or the grammar
// is over grammar::kMaxGrammarBytes. choice None: an empty CallGrammar (generation is not constrained).
//
// Per format (ws: the JSON whitespace json_schema_to_gbnf allows: "", " ", or 1-2 newlines and up to 20
// spaces/tabs; "name" always comes first, arguments as the tool's schema compiles with json_schema_to_gbnf):
// - Hermes: <tool_call> ws {ws "name" ws : ws "N" ws , ws "arguments" ws : ws ARGS} ws </tool_call>; parallel: one
//   or more, ws between them. Trigger "<tool_call>".
// - QwenXml: <tool_call> tc-ws <function=N> tc-ws PARAMS </function> tc-ws </tool_call> (tc-ws: "", " " or
//   "\n"); parallel: one or more, tc-ws between them. PARAMS for a schema that is an object with `properties`:
//   each property in the schema's order, a required one always, an optional one or not, no others (as the JSON
//   formats' reading of such a schema), each <parameter=K>\nVALUE\n</parameter> tc-ws. VALUE: for a property
//   that admits only strings (type "string", or an enum / const of strings), the text as is: any text without
//   "</parameter>" in it (maxLength, minLength, pattern and format are not enforced there: looser than the
//   schema), or one of the enum's strings verbatim; for type "boolean" also True / False (as Jinja's `string`
//   writes them); for any other schema the JSON text json_schema_to_gbnf admits for the property's schema (the
//   root's $defs / definitions go with it). A schema without `properties` ({}, additionalProperties only):
//   any parameters, each any name without <, > or newline (1-128 bytes) and any text value. Trigger
//   "<tool_call>".
// - SmolLM2: <tool_call> ws [ ws OBJ (ws , ws OBJ)* ws ] ws </tool_call>, OBJ as Hermes's object; one OBJ unless
//   parallel; under Auto the list may also be empty (its prompt asks for [] when no call is needed). Trigger
//   "<tool_call>".
// - Llama3, Gemma3: {"name" ws : ws "N" ws , ws "parameters" ws : ws ARGS}, exactly one call (`parallel` is
//   ignored: Llama 3 has no parallel form). Trigger {"name".
// - FunctionGemma: <start_function_call>call:N{...}<end_function_call>, one or (parallel) more back to back, no
//   whitespace; arguments mapped from the schema as function_gemma.h says (generic values where it cannot map).
//   Trigger "<start_function_call>".
struct CallGrammar {
    std::string gbnf;
    std::string trigger;
};
CallGrammar call_grammar(ToolFormat format, const std::vector<Tool>& tools, const ToolChoice& choice, bool parallel);

// QwenXml: whether a parameter with this schema is written as text as is (its schema admits only strings: type
// "string", or an enum / const of strings, without a pattern or format) rather than as JSON. Shared by the call
// grammar and the parser. A raw string's minLength / maxLength count characters other than '<'.
bool qwen_xml_raw_string(const nlohmann::ordered_json& schema);

}  // namespace cellm::tools
