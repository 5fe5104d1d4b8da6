// FunctionGemma's argument syntax: grammar rules from a JSON Schema, and the reader back to JSON.
#include "tools/function_gemma.h"

#include <cstdio>
#include <vector>

namespace cellm::tools {

using Json = nlohmann::ordered_json;

// ---- grammar -------------------------------------------------------------------------------------------------

std::string function_gemma_shared_gbnf() {
    // fg-text: any text without "<escape>" in it, as a state machine over how much of "<escape" was just seen.
    return "fg-value ::= fg-string | fg-number | \"true\" | \"false\" | \"null\" | fg-object | fg-array\n"
           "fg-object ::= \"{\" (fg-key \":\" fg-value (\",\" fg-key \":\" fg-value)*)? \"}\"\n"
           "fg-array ::= \"[\" (fg-value (\",\" fg-value)*)? \"]\"\n"
           "fg-key ::= [A-Za-z0-9_-]+\n"
           "fg-string ::= \"<escape>\" fg-text \"<escape>\"\n"
           "fg-integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
           "fg-number ::= fg-integer (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,16})?\n"
           "fg-text ::= \"\" | [^<] fg-text | \"<\" fg-text-1\n"
           "fg-text-1 ::= \"\" | \"<\" fg-text-1 | \"e\" fg-text-2 | [^<e] fg-text\n"
           "fg-text-2 ::= \"\" | \"<\" fg-text-1 | \"s\" fg-text-3 | [^<s] fg-text\n"
           "fg-text-3 ::= \"\" | \"<\" fg-text-1 | \"c\" fg-text-4 | [^<c] fg-text\n"
           "fg-text-4 ::= \"\" | \"<\" fg-text-1 | \"a\" fg-text-5 | [^<a] fg-text\n"
           "fg-text-5 ::= \"\" | \"<\" fg-text-1 | \"p\" fg-text-6 | [^<p] fg-text\n"
           "fg-text-6 ::= \"\" | \"<\" fg-text-1 | \"e\" fg-text-7 | [^<e] fg-text\n"
           "fg-text-7 ::= \"\" | \"<\" fg-text-1 | [^<>] fg-text\n";
}

namespace {

// A key as the model writes it: bare when it has no character of the syntax in it, else between <escape>s.
std::string fg_key(const std::string& key) {
    bool bare = !key.empty();
    for (char c : key)
        if (std::string_view(":{}[],<> \t\r\n").find(c) != std::string_view::npos) bare = false;
    return bare ? key : std::string(kFgEscape) + key + std::string(kFgEscape);
}

class FgCompiler {
public:
    explicit FgCompiler(std::string prefix) : prefix_(std::move(prefix)) {}

    std::string compile(const Json& schema) {
        std::string body = object(schema, 0);
        std::string out = prefix_ + "root ::= " + body + "\n";
        for (const std::string& rule : rules_) out += rule;
        return out;
    }

private:
    std::string rule(const std::string& body) {
        std::string name = prefix_ + std::to_string(rules_.size());
        rules_.push_back(name + " ::= " + body + "\n");
        return name;
    }

    static bool is_type(const Json& schema, const char* type) {
        if (!schema.is_object() || !schema.contains("type")) return false;
        const Json& t = schema["type"];
        return t.is_string() && t.get<std::string>() == type;
    }

    std::string object(const Json& schema, int depth) {
        if (!schema.is_object() || !schema.contains("properties") || !schema["properties"].is_object() ||
            depth > 16)
            return "fg-object";
        const Json& properties = schema["properties"];
        std::vector<std::string> members;
        std::vector<bool> required;
        for (const auto& [name, property] : properties.items()) {
            if (property.is_boolean() && !property.get<bool>()) continue;
            members.push_back(gbnf_literal(fg_key(name) + ":") + " " + value(property, depth + 1));
            bool is_required = false;
            if (schema.contains("required") && schema["required"].is_array())
                for (const Json& r : schema["required"]) is_required |= r.is_string() && r.get<std::string>() == name;
            required.push_back(is_required);
        }
        if (members.empty()) return "\"{}\"";
        // after[i]: what may follow member i: a comma and a later member (up to the next required one), or the
        // end when no required member is left.
        const size_t n = members.size();
        std::vector<std::string> after(n);
        for (size_t i = n; i-- > 0;) {
            std::vector<std::string> alternatives;
            bool rest_optional = true;
            for (size_t j = i + 1; j < n; ++j) {
                alternatives.push_back("\",\" " + members[j] + " " + after[j]);
                if (required[j]) {
                    rest_optional = false;
                    break;
                }
            }
            if (rest_optional) alternatives.push_back("\"\"");
            after[i] = rule(join(alternatives));
        }
        std::vector<std::string> first;
        bool all_optional = true;
        for (size_t i = 0; i < n; ++i) {
            first.push_back(members[i] + " " + after[i]);
            if (required[i]) {
                all_optional = false;
                break;
            }
        }
        if (all_optional) first.push_back("\"\"");
        return "\"{\" " + rule(join(first)) + " \"}\"";
    }

    std::string value(const Json& schema, int depth) {
        if (!schema.is_object() || depth > 16) return "fg-value";
        auto literals = [](const Json& values) -> std::string {
            std::vector<std::string> alternatives;
            for (const Json& v : values) {
                if (!v.is_string()) return "";
                alternatives.push_back(gbnf_literal(std::string(kFgEscape) + v.get<std::string>() + std::string(kFgEscape)));
            }
            if (alternatives.empty()) return "";
            std::string out = "(";  // built up: g++ 12 -O3 warns falsely (-Wrestrict) on "(" + a temporary
            out += join(alternatives);
            return out + ")";
        };
        if (schema.contains("const")) {
            std::string l = literals(Json::array({schema["const"]}));
            return l.empty() ? "fg-value" : l;
        }
        if (schema.contains("enum") && schema["enum"].is_array()) {
            std::string l = literals(schema["enum"]);
            return l.empty() ? "fg-value" : l;
        }
        for (const char* key : {"anyOf", "oneOf"}) {
            if (schema.contains(key) && schema[key].is_array() && !schema[key].empty()) {
                std::vector<std::string> alternatives;
                for (const Json& branch : schema[key]) alternatives.push_back(value(branch, depth + 1));
                return "(" + join(alternatives) + ")";
            }
        }
        if (schema.contains("type") && schema["type"].is_array()) {
            std::vector<std::string> alternatives;
            for (const Json& t : schema["type"]) {
                Json one = schema;
                one["type"] = t;
                alternatives.push_back(value(one, depth + 1));
            }
            return alternatives.empty() ? "fg-value" : "(" + join(alternatives) + ")";
        }
        if (is_type(schema, "string")) return "fg-string";
        if (is_type(schema, "integer")) return "fg-integer";
        if (is_type(schema, "number")) return "fg-number";
        if (is_type(schema, "boolean")) return "(\"true\" | \"false\")";
        if (is_type(schema, "null")) return "\"null\"";
        if (is_type(schema, "object")) return object(schema, depth);
        if (is_type(schema, "array")) {
            std::string item = schema.contains("items") ? value(schema["items"], depth + 1) : "fg-value";
            return "\"[\" (" + item + " (\",\" " + item + ")*)? \"]\"";
        }
        return "fg-value";
    }

    static std::string join(const std::vector<std::string>& alternatives) {
        std::string out;
        for (const std::string& a : alternatives) out += (out.empty() ? "" : " | ") + a;
        return out;
    }

    std::string prefix_;
    std::vector<std::string> rules_;
};

// ---- reading -------------------------------------------------------------------------------------------------

class FgReader {
public:
    explicit FgReader(std::string_view text) : s_(text) {}

    std::optional<Json> value(int depth) {
        if (depth > 64) return std::nullopt;
        skip_space();
        if (at_end()) return std::nullopt;
        if (s_.substr(pos_).starts_with(kFgEscape)) return string();
        if (s_[pos_] == '{') return object(depth);
        if (s_[pos_] == '[') return array(depth);
        return bare();
    }

    bool at_end() const { return pos_ >= s_.size(); }
    size_t pos() const { return pos_; }
    void skip_space() {
        while (!at_end() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r')) ++pos_;
    }

private:
    std::optional<Json> string() {
        pos_ += kFgEscape.size();
        size_t end = s_.find(kFgEscape, pos_);
        if (end == std::string_view::npos) return std::nullopt;
        Json out = std::string(s_.substr(pos_, end - pos_));
        pos_ = end + kFgEscape.size();
        return out;
    }

    std::optional<Json> object(int depth) {
        ++pos_;
        Json out = Json::object();
        skip_space();
        if (!at_end() && s_[pos_] == '}') return ++pos_, out;
        while (true) {
            skip_space();
            std::string key;
            if (s_.substr(pos_).starts_with(kFgEscape)) {
                auto k = string();
                if (!k) return std::nullopt;
                key = k->get<std::string>();
            } else {
                size_t start = pos_;
                while (!at_end() && std::string_view(":{}[],<").find(s_[pos_]) == std::string_view::npos) ++pos_;
                key = std::string(s_.substr(start, pos_ - start));
                while (!key.empty() && (key.back() == ' ' || key.back() == '\n' || key.back() == '\t')) key.pop_back();
                if (key.empty()) return std::nullopt;
            }
            skip_space();
            if (at_end() || s_[pos_] != ':') return std::nullopt;
            ++pos_;
            auto v = value(depth + 1);
            if (!v) return std::nullopt;
            out[key] = std::move(*v);
            skip_space();
            if (at_end()) return std::nullopt;
            if (s_[pos_] == ',') {
                ++pos_;
                continue;
            }
            if (s_[pos_] == '}') return ++pos_, out;
            return std::nullopt;
        }
    }

    std::optional<Json> array(int depth) {
        ++pos_;
        Json out = Json::array();
        skip_space();
        if (!at_end() && s_[pos_] == ']') return ++pos_, out;
        while (true) {
            auto v = value(depth + 1);
            if (!v) return std::nullopt;
            out.push_back(std::move(*v));
            skip_space();
            if (at_end()) return std::nullopt;
            if (s_[pos_] == ',') {
                ++pos_;
                continue;
            }
            if (s_[pos_] == ']') return ++pos_, out;
            return std::nullopt;
        }
    }

    // true, false, null, a number, else the word as a string.
    std::optional<Json> bare() {
        size_t start = pos_;
        while (!at_end() && std::string_view(",}]<").find(s_[pos_]) == std::string_view::npos) ++pos_;
        std::string word(s_.substr(start, pos_ - start));
        while (!word.empty() && (word.back() == ' ' || word.back() == '\n' || word.back() == '\t')) word.pop_back();
        if (word.empty()) return std::nullopt;
        if (word == "true") return Json(true);
        if (word == "false") return Json(false);
        if (word == "null") return Json(nullptr);
        if (word.find_first_not_of("-+.0123456789eE") == std::string::npos) {
            Json number = Json::parse(word, nullptr, false);
            if (!number.is_discarded() && number.is_number()) return number;
        }
        return Json(word);
    }

    std::string_view s_;
    size_t pos_ = 0;
};

}  // namespace

std::string function_gemma_args_gbnf(const Json& schema, const std::string& prefix) {
    return FgCompiler(prefix).compile(schema);
}

std::optional<FgCall> parse_function_gemma_call(std::string_view inner) {
    constexpr std::string_view kCall = "call:";
    if (!inner.starts_with(kCall)) return std::nullopt;
    size_t brace = inner.find('{');
    if (brace == std::string_view::npos) return std::nullopt;
    std::string name(inner.substr(kCall.size(), brace - kCall.size()));
    if (name.empty()) return std::nullopt;
    for (char c : name)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.'))
            return std::nullopt;
    FgReader reader(inner.substr(brace));
    std::optional<Json> args = reader.value(0);
    if (!args || !args->is_object()) return std::nullopt;
    reader.skip_space();
    if (!reader.at_end()) return std::nullopt;
    return FgCall{std::move(name), args->dump(-1, ' ', false, Json::error_handler_t::replace)};
}

std::string function_gemma_value(const Json& value) {
    const std::string esc(kFgEscape);
    switch (value.type()) {
    case Json::value_t::object: {
        std::string out = "{";
        for (const auto& [key, v] : value.items()) {
            if (out.size() > 1) out += ',';
            out += fg_key(key) + ":" + function_gemma_value(v);
        }
        return out + "}";
    }
    case Json::value_t::array: {
        std::string out = "[";
        for (const Json& v : value) {
            if (out.size() > 1) out += ',';
            out += function_gemma_value(v);
        }
        return out + "]";
    }
    case Json::value_t::string: return esc + value.get<std::string>() + esc;
    default: return value.dump(-1, ' ', false, Json::error_handler_t::replace);
    }
}

}  // namespace cellm::tools
