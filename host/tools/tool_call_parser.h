// Reads tool calls out of generated text as it streams, in one ToolFormat: content before (and between) calls
// is passed on as content, a call's name is announced as soon as it is known and its arguments follow in pieces
// (OpenAI's incremental delta.tool_calls). Text that may be the start of a call marker is held back until it is
// known not to be one. One generation's parser; one thread at a time.
//
// The result does not depend on where the text is split into pieces: the deltas concatenate to the same text.
//
// What is a call. Hermes: <tool_call> ws {"name": STRING, "arguments": {...}} ws </tool_call>; SmolLM2:
// <tool_call>[ {...}, ... ]</tool_call> with such objects (an empty list is no call and no content); Llama3 and
// Gemma3: {"name": STRING, "parameters": {...}} anywhere in the answer, and at the answer's start also inside a
// ```json (or ```) fence or after <|python_tag|>; FunctionGemma: <start_function_call>call:NAME{k:v,...}
// <end_function_call>; QwenXml: <tool_call> ws <function=NAME> then <parameter=KEY>\nVALUE\n</parameter> blocks
// (whitespace between them) then </function> (or directly </tool_call>), and also Hermes's JSON body after
// <tool_call>. JSON formats take "arguments" or "parameters" as the key, "name" must come first, and the
// arguments must be an object. A call begins at its opening marker (<tool_call>, <start_function_call>, and for
// Llama3 / Gemma3 the `{"name"` of the object).
//
// QwenXml values: one newline after <parameter=KEY> and one before </parameter> are stripped (the template
// writes them), and the value ends at the first </parameter>. A parameter whose schema (the function's
// parameters.properties[KEY], from the tools given to the constructor) admits only strings is that text as is;
// any other value is the JSON it parses as when it does and the schema admits that JSON's type (True / False are
// booleans where the schema admits booleans and not strings), else the text as a string. Without a schema (no
// tools given, an unknown function or KEY) a value that parses as JSON is that value, anything else a string.
//
// Deltas. JSON formats: CallStart when the arguments' opening '{' is reached, then Arguments deltas carrying the
// arguments text exactly as generated (found to end by bracket and string scanning). FunctionGemma: CallStart and
// one Arguments delta (the arguments converted to compact JSON) when <end_function_call> arrives. QwenXml:
// CallStart when <function=NAME> is read, then one Arguments delta as each parameter closes ({"K": V, then
// , "K": V) and one when the call closes (} or {}): {"city": "Paris", "days": 3}, keys in the order written, each
// value compact JSON.
//
// What becomes content:
// - all text outside calls, verbatim, except whitespace directly before a call, between calls and (once a call
//   was seen) at the end of the turn, which is dropped; whitespace is held back until the next non-space text;
// - text that starts like a call but breaks the structure before CallStart (a wrong key, a non-object
//   arguments value, `<tool_call>` followed by XML): its first byte is content and reading resumes after it, so
//   such text ends up as content unless a call begins inside it (a FunctionGemma call whose body does not parse:
//   its whole text, markers included);
// - after a complete call, closing markup that is missing or different is not waited for: what follows is read
//   as ordinary text again.
// A call's own text (markup, name, arguments) is never content once CallStart was emitted.
//
// finish(): flushes held text by the rules above. A call that began but was cut off by the end of the turn
// (max_tokens) is dropped, its text too, and truncated() says so; it was announced (CallStart) only if its
// arguments had begun (QwenXml: once its name was read). A call whose arguments closed but are not valid JSON
// (possible only without the call grammar) is dropped from calls() and malformed() says so; so is a QwenXml call
// with anything but parameters, whitespace and its closing markup in its body, whose text is dropped up to its
// </function> or </tool_call> (all of it when neither comes). Delta indices count announced calls, so calls()
// lacks the index of a dropped call. feed() after finish() is ignored.
#pragma once

#include "tokenize/chat_template.h"
#include "tools/tool_format.h"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace cellm::tools {

class ToolCallParser {
public:
    // Call ids are id_prefix + the call's index ("call_7f3a_0"). `tools`: the request's functions, used only by
    // QwenXml (their parameter schemas say which values are strings; copied).
    ToolCallParser(ToolFormat format, std::string id_prefix, const std::vector<Tool>& tools = {});

    struct Delta {
        enum Kind { Content, CallStart, Arguments };
        Kind kind;
        int32_t index = 0;  // CallStart, Arguments: the call's index in the answer
        std::string text;   // Content: text; CallStart: the function's name; Arguments: a piece of the JSON text
        std::string id;     // CallStart: the call's id
    };

    // The next piece of generated text (complete UTF-8). Returns what it settles.
    std::vector<Delta> feed(std::string_view text);
    // The turn ended: flushes what was held back (see the rules above).
    std::vector<Delta> finish();

    // Everything so far: the content (call markup removed) and the complete calls, arguments as the JSON text
    // the Arguments deltas of that call concatenate to.
    const std::string& content() const;
    const std::vector<ToolCall>& calls() const;
    // A call was cut off by the end of the turn (finish()); it is not in calls().
    bool truncated() const { return truncated_; }
    // A call's arguments closed but were not valid JSON; it is not in calls().
    bool malformed() const { return malformed_; }

    struct Match;  // how far held text matches a call's markup (defined and used in the .cpp)

private:
    enum class State { Text, Args, AfterArgs, InList, FgCall, XmlBody, XmlValue, XmlSkip };

    void process(bool final);
    Match match_open(std::string_view text, bool final) const;
    Match match_close(std::string_view text, bool final) const;
    size_t candidate(std::string_view text) const;
    bool at_answer_start() const;
    void emit_text(std::string_view text);
    void emit_content(std::string_view text);
    void start_call(std::string name);
    void emit_arguments(std::string_view text);
    void end_call();
    void xml_parameter(std::string_view raw);
    void truncate_call();

    ToolFormat format_;
    std::string id_prefix_;
    State state_ = State::Text;
    std::string buf_;         // text received and not yet settled
    std::string pending_ws_;  // whitespace held back in text
    std::string content_;
    std::vector<ToolCall> calls_;
    std::vector<Delta>* out_ = nullptr;
    int32_t announced_ = 0;      // calls announced with CallStart
    bool seen_call_ = false;     // some call markup was read (for trailing whitespace)
    bool wrote_text_ = false;    // non-space content was emitted
    bool fence_ = false;         // Llama3 / Gemma3: the call is inside a ``` fence
    bool finished_ = false;
    bool truncated_ = false;
    bool malformed_ = false;
    // The arguments being scanned (JSON formats).
    ToolCall current_;
    int depth_ = 0;
    bool in_string_ = false;
    bool escaped_ = false;
    // FunctionGemma: how far buf_ was scanned for the end marker, and whether that point is inside <escape>s.
    size_t fg_scan_ = 0;
    bool fg_in_escape_ = false;
    // QwenXml: each function's parameters schema, and the call being read: whether its body is XML, the
    // parameter being read and its text so far, and how many parameters were written.
    std::map<std::string, nlohmann::ordered_json> xml_schemas_;
    bool xml_ = false;
    std::string xml_key_;
    std::string xml_value_;
    size_t xml_params_ = 0;
};

}  // namespace cellm::tools
