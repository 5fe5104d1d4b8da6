// The streaming reader of tool calls: a state machine over the text not yet settled (see the header for what
// becomes content and what a call).
#include "tools/tool_call_parser.h"

#include "tools/function_gemma.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace cellm::tools {

namespace {

constexpr std::string_view kToolCall = "<tool_call>";
constexpr std::string_view kToolCallEnd = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kXmlFunction = "<function=";
constexpr std::string_view kXmlFunctionEnd = "</function>";
constexpr std::string_view kXmlParameter = "<parameter=";
constexpr std::string_view kXmlParameterEnd = "</parameter>";
// Text held back while deciding whether it opens a call: past this it is not one.
constexpr size_t kMaxHeld = 4096;
constexpr size_t kMaxName = 256;

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// A cursor over the held text. `final`: no more text will come, so running out is a failure.
struct Cursor {
    std::string_view s;
    bool final;
    size_t pos = 0;

    enum Result { Ok, More, No };

    bool at_end() const { return pos >= s.size(); }
    std::string_view rest() const { return s.substr(pos); }
    void skip_space() {
        while (!at_end() && is_space(s[pos])) ++pos;
    }
    // Space, then whether more text is needed to see what comes after it.
    bool space_then_more() {
        skip_space();
        return at_end() && !final;
    }
    Result literal(std::string_view lit) {
        std::string_view r = rest();
        if (r.starts_with(lit)) {
            pos += lit.size();
            return Ok;
        }
        if (!final && lit.starts_with(r)) return More;
        return No;
    }
    // Either literal.
    Result either(std::string_view a, std::string_view b) {
        Result ra = literal(a);
        if (ra == Ok) return Ok;
        Result rb = literal(b);
        if (rb == Ok) return Ok;
        return ra == More || rb == More ? More : No;
    }
    // QwenXml's NAME> (a function's name: no whitespace) or KEY> (a parameter's): 1 to kMaxName bytes without
    // '<' up to '>', which is consumed.
    Result xml_name(std::string& out, bool key) {
        size_t i = pos;
        for (; i < s.size() && s[i] != '>'; ++i) {
            if (i - pos >= kMaxName || s[i] == '<' || (!key && is_space(s[i]))) return No;
        }
        if (i >= s.size()) return final ? No : More;
        if (i == pos) return No;
        out = std::string(s.substr(pos, i - pos));
        pos = i + 1;
        return Ok;
    }
    // A JSON string, decoded into `out`.
    Result json_string(std::string& out) {
        if (at_end()) return final ? No : More;
        if (s[pos] != '"') return No;
        size_t i = pos + 1;
        for (bool escaped = false; i < s.size(); ++i) {
            if (i - pos > kMaxName) return No;
            if (escaped) escaped = false;
            else if (s[i] == '\\') escaped = true;
            else if (s[i] == '"') break;
            else if (static_cast<unsigned char>(s[i]) < 0x20) return No;
        }
        if (i >= s.size()) return final ? No : More;
        nlohmann::json value = nlohmann::json::parse(s.substr(pos, i + 1 - pos), nullptr, false);
        if (value.is_discarded() || !value.is_string()) return No;
        out = value.get<std::string>();
        pos = i + 1;
        return Ok;
    }
};

}  // namespace

struct ToolCallParser::Match {
    enum Status { Ok, More, Fail, Truncated };
    Status status = Fail;
    size_t consumed = 0;  // Ok: text to drop (up to the arguments' '{', or the whole markup)
    std::string name;
    bool fence = false;       // Ok: Llama3 / Gemma3 call inside a ``` fence
    bool empty_list = false;  // Ok: SmolLM2 <tool_call>[]</tool_call>
    bool function_gemma = false;
    bool xml = false;  // Ok: a QwenXml call, read up to its <function=NAME>
    State next = State::Text;  // match_close: the state after the closing markup
};

namespace {

using Match = ToolCallParser::Match;

Match result(Cursor::Result r, bool began, bool final) {
    Match m;
    if (r == Cursor::More) m.status = Match::More;
    else if (began && final) m.status = Match::Truncated;
    else m.status = Match::Fail;
    return m;
}

// {"name": STRING, "arguments"|"parameters": then the arguments' '{' (not consumed). `began` is set once
// `{"name"` was read.
Match match_object(Cursor& c, bool& began) {
    auto fail = [&](Cursor::Result r) { return result(r, began, c.final); };
    Cursor::Result r;
    if ((r = c.literal("{")) != Cursor::Ok) return fail(r);
    if (c.space_then_more()) return fail(Cursor::More);
    if ((r = c.literal("\"name\"")) != Cursor::Ok) return fail(r);
    began = true;
    if (c.space_then_more()) return fail(Cursor::More);
    if ((r = c.literal(":")) != Cursor::Ok) return fail(r);
    if (c.space_then_more()) return fail(Cursor::More);
    Match m;
    if ((r = c.json_string(m.name)) != Cursor::Ok) return fail(r);
    if (c.space_then_more()) return fail(Cursor::More);
    if ((r = c.literal(",")) != Cursor::Ok) return fail(r);
    if (c.space_then_more()) return fail(Cursor::More);
    if ((r = c.either("\"arguments\"", "\"parameters\"")) != Cursor::Ok) return fail(r);
    if (c.space_then_more()) return fail(Cursor::More);
    if ((r = c.literal(":")) != Cursor::Ok) return fail(r);
    if (c.space_then_more()) return fail(Cursor::More);
    if (c.at_end()) return fail(Cursor::No);
    if (c.s[c.pos] != '{') return fail(Cursor::No);
    m.status = Match::Ok;
    m.consumed = c.pos;
    return m;
}

// How many bytes at the end of `text` may be the start of `marker`, cut by the end of the text so far.
size_t partial_marker(std::string_view text, std::string_view marker) {
    for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
        if (marker.starts_with(text.substr(text.size() - n))) return n;
    return 0;
}

using Json = nlohmann::ordered_json;

// Whether `schema` admits a value of `value`'s type (true when it does not say: no type, enum, const, anyOf or
// oneOf).
bool admits_type(const Json& schema, const Json& value, int depth = 0) {
    if (!schema.is_object() || depth > 16) return true;
    auto type_name = [](const Json& v) -> std::string {
        switch (v.type()) {
        case Json::value_t::null: return "null";
        case Json::value_t::boolean: return "boolean";
        case Json::value_t::number_integer:
        case Json::value_t::number_unsigned: return "integer";
        case Json::value_t::number_float: return "number";
        case Json::value_t::string: return "string";
        case Json::value_t::array: return "array";
        default: return "object";
        }
    };
    const std::string type = type_name(value);
    auto names = [&](const Json& t) {
        return t.is_string() && (t == type || (type == "integer" && t == "number"));
    };
    if (schema.contains("const")) return type_name(schema["const"]) == type;
    if (schema.contains("enum") && schema["enum"].is_array()) {
        for (const Json& v : schema["enum"])
            if (type_name(v) == type) return true;
        return false;
    }
    if (schema.contains("type")) {
        const Json& t = schema["type"];
        if (t.is_array()) {
            for (const Json& one : t)
                if (names(one)) return true;
            return false;
        }
        return names(t);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
        if (!schema.contains(key) || !schema[key].is_array()) continue;
        for (const Json& branch : schema[key])
            if (admits_type(branch, value, depth + 1)) return true;
        return false;
    }
    return true;
}

// A QwenXml parameter's text as the JSON value it stands for (see the header). `schema` may be null.
Json xml_value(const std::string& text, const Json* schema) {
    if (schema && qwen_xml_raw_string(*schema)) return text;
    Json value = Json::parse(text, nullptr, false);
    if (!value.is_discarded() && (!schema || admits_type(*schema, value))) return value;
    if (schema && (text == "True" || text == "False") && admits_type(*schema, Json(true)) &&
        !admits_type(*schema, Json("")))
        return text == "True";
    return text;
}

}  // namespace

ToolCallParser::ToolCallParser(ToolFormat format, std::string id_prefix, const std::vector<Tool>& tools)
    : format_(format), id_prefix_(std::move(id_prefix)) {
    if (format == ToolFormat::QwenXml)
        for (const Tool& tool : tools) xml_schemas_.emplace(tool.name, tool.parameters);
}

const std::string& ToolCallParser::content() const { return content_; }
const std::vector<ToolCall>& ToolCallParser::calls() const { return calls_; }

bool ToolCallParser::at_answer_start() const { return !wrote_text_ && !seen_call_; }

// Where in `text` a call may begin (text.size() when nowhere).
size_t ToolCallParser::candidate(std::string_view text) const {
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        switch (format_) {
        case ToolFormat::Hermes:
        case ToolFormat::QwenXml:
        case ToolFormat::SmolLM2:
        case ToolFormat::FunctionGemma:
            if (c == '<') return i;
            break;
        case ToolFormat::Llama3:
        case ToolFormat::Gemma3:
            if (c == '{') return i;
            if ((c == '`' || c == '<') && at_answer_start()) {
                bool leading = true;
                for (size_t j = 0; j < i; ++j) leading &= is_space(text[j]);
                if (leading) return i;
            }
            break;
        }
    }
    return text.size();
}

ToolCallParser::Match ToolCallParser::match_open(std::string_view text, bool final) const {
    Cursor c{text, final};
    bool began = false;
    Cursor::Result r;
    switch (format_) {
    case ToolFormat::Hermes:
        if ((r = c.literal(kToolCall)) != Cursor::Ok) return result(r, false, final);
        began = true;
        if (c.space_then_more()) return result(Cursor::More, began, final);
        return match_object(c, began);
    case ToolFormat::QwenXml: {
        if ((r = c.literal(kToolCall)) != Cursor::Ok) return result(r, false, final);
        began = true;
        if (c.space_then_more()) return result(Cursor::More, began, final);
        if (!c.at_end() && c.s[c.pos] == '{') return match_object(c, began);  // Hermes's JSON body
        Match m;
        if ((r = c.literal(kXmlFunction)) != Cursor::Ok || (r = c.xml_name(m.name, false)) != Cursor::Ok)
            return result(r, began, final);
        m.status = Match::Ok;
        m.consumed = c.pos;
        m.xml = true;
        return m;
    }
    case ToolFormat::SmolLM2: {
        if ((r = c.literal(kToolCall)) != Cursor::Ok) return result(r, false, final);
        began = true;
        if (c.space_then_more()) return result(Cursor::More, began, final);
        if ((r = c.literal("[")) != Cursor::Ok) return result(r, began, final);
        if (c.space_then_more()) return result(Cursor::More, began, final);
        if (!c.at_end() && c.s[c.pos] == ']') {
            ++c.pos;
            if (c.space_then_more()) return result(Cursor::More, began, final);
            if ((r = c.literal(kToolCallEnd)) != Cursor::Ok) return result(r, began, final);
            Match m;
            m.status = Match::Ok;
            m.consumed = c.pos;
            m.empty_list = true;
            return m;
        }
        return match_object(c, began);
    }
    case ToolFormat::FunctionGemma: {
        if ((r = c.literal(kFgCallStart)) != Cursor::Ok) return result(r, false, final);
        Match m;
        m.status = Match::Ok;
        m.consumed = c.pos;
        m.function_gemma = true;
        return m;
    }
    case ToolFormat::Llama3:
    case ToolFormat::Gemma3: {
        bool fence = false;
        if (text.starts_with("`") || (!final && std::string_view("```").starts_with(text))) {
            if ((r = c.literal("```")) != Cursor::Ok) return result(r, false, final);
            if (c.at_end() && !final) return result(Cursor::More, false, final);
            if (!c.at_end() && c.s[c.pos] == 'j' && (r = c.literal("json")) != Cursor::Ok) return result(r, false, final);
            if (c.space_then_more()) return result(Cursor::More, false, final);
            fence = true;
        } else if (text.starts_with("<")) {
            if ((r = c.literal(kPythonTag)) != Cursor::Ok) return result(r, false, final);
            if (c.space_then_more()) return result(Cursor::More, false, final);
        }
        Match m = match_object(c, began);
        m.fence = fence;
        return m;
    }
    }
    return {};
}

ToolCallParser::Match ToolCallParser::match_close(std::string_view text, bool final) const {
    Cursor c{text, final};
    Match m;
    m.status = Match::Ok;
    auto more = [&] {
        Match wait;
        wait.status = Match::More;
        return wait;
    };
    if (c.space_then_more()) return more();
    if (!xml_ && !c.at_end() && c.s[c.pos] == '}') ++c.pos;
    auto close = [&](std::string_view marker) -> bool {  // false: wait for more text
        if (c.space_then_more()) return false;
        Cursor::Result r = c.literal(marker);
        if (r == Cursor::More) return false;
        // At the end of the turn a marker cut short is dropped with the call it closes.
        if (r == Cursor::No && final && marker.starts_with(c.rest()) && !c.at_end()) c.pos = c.s.size();
        return true;
    };
    switch (format_) {
    case ToolFormat::Hermes:
    case ToolFormat::QwenXml:
        if (!close(kToolCallEnd)) return more();
        break;
    case ToolFormat::SmolLM2:
        if (c.space_then_more()) return more();
        if (!c.at_end() && c.s[c.pos] == ',') {
            ++c.pos;
            m.next = State::InList;
        } else if (!c.at_end() && c.s[c.pos] == ']') {
            ++c.pos;
            if (!close(kToolCallEnd)) return more();
        }
        break;
    case ToolFormat::Llama3:
    case ToolFormat::Gemma3:
        if (fence_ && !close("```")) return more();
        break;
    case ToolFormat::FunctionGemma: break;
    }
    m.consumed = c.pos;
    return m;
}

void ToolCallParser::emit_content(std::string_view text) {
    if (text.empty()) return;
    content_ += text;
    if (!out_->empty() && out_->back().kind == Delta::Content) out_->back().text += text;
    else out_->push_back({Delta::Content, 0, std::string(text), {}});
}

void ToolCallParser::emit_text(std::string_view text) {
    size_t last = text.size();
    while (last > 0 && is_space(text[last - 1])) --last;
    if (last > 0) {
        emit_content(pending_ws_);
        pending_ws_.clear();
        emit_content(text.substr(0, last));
        wrote_text_ = true;
    }
    pending_ws_ += text.substr(last);
}

void ToolCallParser::start_call(std::string name) {
    pending_ws_.clear();
    seen_call_ = true;
    current_ = ToolCall{id_prefix_ + std::to_string(announced_), std::move(name), {}};
    out_->push_back({Delta::CallStart, announced_, current_.name, current_.id});
    ++announced_;
    depth_ = 0;
    in_string_ = false;
    escaped_ = false;
}

void ToolCallParser::emit_arguments(std::string_view text) {
    if (text.empty()) return;
    current_.arguments += text;
    const int32_t index = announced_ - 1;
    if (!out_->empty() && out_->back().kind == Delta::Arguments && out_->back().index == index)
        out_->back().text += text;
    else
        out_->push_back({Delta::Arguments, index, std::string(text), {}});
}

void ToolCallParser::end_call() {
    if (nlohmann::json::accept(current_.arguments)) calls_.push_back(std::move(current_));
    else malformed_ = true;
    current_ = {};
}

// One QwenXml parameter closed: its text between the markers, as the next piece of the arguments.
void ToolCallParser::xml_parameter(std::string_view raw) {
    if (raw.starts_with("\n")) raw.remove_prefix(1);
    if (raw.ends_with("\n")) raw.remove_suffix(1);
    const Json* schema = nullptr;
    auto function = xml_schemas_.find(current_.name);
    if (function != xml_schemas_.end() && function->second.is_object() && function->second.contains("properties")) {
        const Json& properties = function->second.at("properties");
        if (properties.is_object() && properties.contains(xml_key_)) schema = &properties.at(xml_key_);
    }
    const Json value = xml_value(std::string(raw), schema);
    auto text = [](const Json& v) { return v.dump(-1, ' ', false, Json::error_handler_t::replace); };
    emit_arguments((xml_params_++ ? ", " : "{") + text(Json(xml_key_)) + ": " + text(value));
}

// The turn ended inside a call: it is dropped.
void ToolCallParser::truncate_call() {
    truncated_ = true;
    current_ = {};
    buf_.clear();
    state_ = State::Text;
}

void ToolCallParser::process(bool final) {
    while (true) {
        switch (state_) {
        case State::Text: {
            const size_t p = candidate(buf_);
            emit_text(std::string_view(buf_).substr(0, p));
            buf_.erase(0, p);
            if (buf_.empty()) return;
            Match m = match_open(buf_, final);
            if (m.status == Match::More && buf_.size() > kMaxHeld) m.status = Match::Fail;
            if (m.status == Match::More) return;
            if (m.status == Match::Truncated) {
                truncated_ = true;
                seen_call_ = true;
                buf_.clear();
                return;
            }
            if (m.status == Match::Fail) {
                emit_text(std::string_view(buf_).substr(0, 1));
                buf_.erase(0, 1);
                continue;
            }
            buf_.erase(0, m.consumed);
            pending_ws_.clear();
            seen_call_ = true;
            if (m.empty_list) continue;
            if (m.function_gemma) {
                state_ = State::FgCall;
                fg_scan_ = 0;
                fg_in_escape_ = false;
                continue;
            }
            fence_ = m.fence;
            xml_ = m.xml;
            start_call(std::move(m.name));
            state_ = m.xml ? State::XmlBody : State::Args;
            xml_params_ = 0;
            continue;
        }
        case State::Args: {
            size_t i = 0;
            bool closed = false;
            for (; i < buf_.size() && !closed; ++i) {
                const char c = buf_[i];
                if (in_string_) {
                    if (escaped_) escaped_ = false;
                    else if (c == '\\') escaped_ = true;
                    else if (c == '"') in_string_ = false;
                } else if (c == '"') {
                    in_string_ = true;
                } else if (c == '{' || c == '[') {
                    ++depth_;
                } else if (c == '}' || c == ']') {
                    closed = --depth_ == 0;
                }
            }
            emit_arguments(std::string_view(buf_).substr(0, i));
            buf_.erase(0, i);
            if (!closed) {
                if (final) {
                    truncated_ = true;
                    current_ = {};
                    buf_.clear();
                }
                return;
            }
            end_call();
            state_ = State::AfterArgs;
            continue;
        }
        case State::AfterArgs: {
            Match m = match_close(buf_, final);
            if (m.status == Match::More && buf_.size() <= kMaxHeld) return;
            buf_.erase(0, m.status == Match::Ok ? m.consumed : 0);
            state_ = m.status == Match::Ok ? m.next : State::Text;
            continue;
        }
        case State::InList: {
            Cursor c{buf_, final};
            if (c.space_then_more() && buf_.size() <= kMaxHeld) return;
            bool began = false;
            Match m = match_object(c, began);
            if (m.status == Match::More && buf_.size() > kMaxHeld) m.status = Match::Fail;
            if (m.status == Match::More) return;
            if (m.status == Match::Truncated) {
                truncated_ = true;
                buf_.clear();
                state_ = State::Text;
                return;
            }
            if (m.status == Match::Fail) {
                state_ = State::Text;
                continue;
            }
            buf_.erase(0, m.consumed);
            start_call(std::move(m.name));
            state_ = State::Args;
            continue;
        }
        case State::XmlBody: {
            size_t space = 0;
            while (space < buf_.size() && is_space(buf_[space])) ++space;
            buf_.erase(0, space);
            // Matched as if more text may come, so that text cut by the end of the turn reads as truncated.
            Cursor c{buf_, false};
            Cursor::Result r = c.literal(kXmlParameter);
            if (r == Cursor::Ok) r = c.xml_name(xml_key_, true);
            if (r == Cursor::Ok) {
                buf_.erase(0, c.pos);
                xml_value_.clear();
                state_ = State::XmlValue;
                continue;
            }
            const Cursor::Result function_end = Cursor{buf_, false}.literal(kXmlFunctionEnd);
            const Cursor::Result call_end = Cursor{buf_, false}.literal(kToolCallEnd);
            if (function_end == Cursor::Ok || call_end == Cursor::Ok) {
                buf_.erase(0, function_end == Cursor::Ok ? kXmlFunctionEnd.size() : kToolCallEnd.size());
                emit_arguments(xml_params_ ? "}" : "{}");
                end_call();
                state_ = function_end == Cursor::Ok ? State::AfterArgs : State::Text;
                continue;
            }
            if (buf_.empty() || r == Cursor::More || function_end == Cursor::More || call_end == Cursor::More) {
                if (final) truncate_call();
                return;
            }
            current_ = {};
            malformed_ = true;
            state_ = State::XmlSkip;
            continue;
        }
        case State::XmlValue: {
            const size_t end = buf_.find(kXmlParameterEnd);
            if (end == std::string::npos) {
                if (final) {
                    truncate_call();
                    return;
                }
                const size_t keep = partial_marker(buf_, kXmlParameterEnd);
                xml_value_.append(buf_, 0, buf_.size() - keep);
                buf_.erase(0, buf_.size() - keep);
                return;
            }
            xml_value_.append(buf_, 0, end);
            buf_.erase(0, end + kXmlParameterEnd.size());
            xml_parameter(xml_value_);
            xml_value_.clear();
            state_ = State::XmlBody;
            continue;
        }
        case State::XmlSkip: {
            const size_t function_end = buf_.find(kXmlFunctionEnd);
            const size_t call_end = buf_.find(kToolCallEnd);
            if (function_end == std::string::npos && call_end == std::string::npos) {
                const size_t keep =
                    final ? 0 : std::max(partial_marker(buf_, kXmlFunctionEnd), partial_marker(buf_, kToolCallEnd));
                buf_.erase(0, buf_.size() - keep);
                if (final) state_ = State::Text;
                return;
            }
            if (function_end < call_end) {
                buf_.erase(0, function_end + kXmlFunctionEnd.size());
                state_ = State::AfterArgs;
            } else {
                buf_.erase(0, call_end + kToolCallEnd.size());
                state_ = State::Text;
            }
            continue;
        }
        case State::FgCall: {
            size_t end = std::string::npos;
            size_t i = fg_scan_;
            while (i < buf_.size()) {
                std::string_view rest = std::string_view(buf_).substr(i);
                if (rest.starts_with(kFgEscape)) {
                    fg_in_escape_ = !fg_in_escape_;
                    i += kFgEscape.size();
                } else if (!fg_in_escape_ && rest.starts_with(kFgCallEnd)) {
                    end = i;
                    break;
                } else if (rest[0] == '<' && (kFgEscape.starts_with(rest) || kFgCallEnd.starts_with(rest))) {
                    break;  // a marker may be cut by the end of the text so far
                } else {
                    ++i;
                }
            }
            fg_scan_ = i;
            if (end == std::string::npos) {
                if (final) {
                    truncated_ = true;
                    buf_.clear();
                    state_ = State::Text;
                }
                return;
            }
            std::optional<FgCall> call = parse_function_gemma_call(std::string_view(buf_).substr(0, end));
            if (call) {
                start_call(std::move(call->name));
                emit_arguments(call->arguments);
                end_call();
            } else {
                emit_text(std::string(kFgCallStart) + buf_.substr(0, end) + std::string(kFgCallEnd));
            }
            buf_.erase(0, end + kFgCallEnd.size());
            state_ = State::Text;
            continue;
        }
        }
    }
}

std::vector<ToolCallParser::Delta> ToolCallParser::feed(std::string_view text) {
    std::vector<Delta> out;
    if (finished_) return out;
    out_ = &out;
    buf_ += text;
    process(false);
    out_ = nullptr;
    return out;
}

std::vector<ToolCallParser::Delta> ToolCallParser::finish() {
    std::vector<Delta> out;
    if (finished_) return out;
    finished_ = true;
    out_ = &out;
    process(true);
    if (!buf_.empty()) {  // cannot happen: every state settles all text at the end
        emit_text(buf_);
        buf_.clear();
    }
    if (!seen_call_) emit_content(pending_ws_);
    pending_ws_.clear();
    out_ = nullptr;
    return out;
}

}  // namespace cellm::tools
