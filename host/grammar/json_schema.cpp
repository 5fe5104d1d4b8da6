// JSON Schema -> GBNF. Each schema node becomes a rule (a $ref becomes a reference to its target's rule, so
// recursive schemas are recursive grammars); primitive values share the rules at the end of the text.
//
// Choices, and where the grammar is narrower than the schema:
// - Whitespace: llama.cpp's `space` after every token, so compact JSON and modest pretty-printing both pass.
// - Objects: declared properties in the schema's order, then required names the schema does not declare, then
//   any other properties where additionalProperties allows them (a missing one: JsonSchemaOptions). An extra
//   property's name may be any string but a declared one, compared by spelling.
//   Where allOf/anyOf/oneOf branches declare properties, all branches use the order in which the names first
//   appear in the schema (its own, its $ref, allOf, anyOf, then oneOf branches, depth first).
// - allOf, anyOf, oneOf and a $ref with sibling keywords become alternatives of plain schemas (disjunctive
//   normal form, at most 64), merged exactly (properties against each other's additionalProperties, bounds
//   tightened); a combination it cannot merge is refused by the keyword "allOf".
// - oneOf: each branch is kept clear of the others where they could overlap, by a type the other does not
//   allow or by leaving out a name the other requires. Exact when the other constrains no more than type and
//   required; stricter otherwise (never looser); refused where nothing is left.
// - enum/const: the values are checked one by one against the whole schema by a small validator, so `not`,
//   patternProperties, uniqueItems... are honoured there; the grammar lists the values that pass.
// - Numbers: integers are matched without fraction or exponent; a bounded number is matched in plain decimal
//   notation, exactly against its bounds. multipleOf is refused (outside enum/const).
// - Strings: minLength/maxLength count characters (an escape sequence, or a surrogate pair, is one); formats
//   date, time, date-time (RFC 3339, days per month and leap years checked), uuid and email (dot-atom local
//   part, domain of labels: stricter than jsonschema's "contains @") are exact grammars; other formats are
//   refused, since the issue forbids silently dropping a constraint. pattern with a length or format is refused.
// - Counts past 100 (maxLength 5000, maxItems 100000) are written as blocks of 100, so grammars stay small.
// - A part no value fits (an enum of strings under "type": "object") only removes that part where the part is
//   optional: a property not required, one type of several, an anyOf branch.
// - A keyword that constrains and is neither honoured nor trivially satisfied is refused by name; keywords no
//   JSON Schema draft defines are ignored, as the specification says.
#include "grammar/json_schema.h"

#include "grammar/gbnf.h"
#include "grammar/grammar.h"
#include "grammar/regex.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

namespace cellm::grammar {
namespace {

using Json = nlohmann::ordered_json;

// ---- exact decimals, for numeric bounds -------------------------------------------------------------------------

// A decimal number as digit strings: no leading zeros in `integer` ("0" for none), no trailing zeros in `fraction`.
struct Decimal {
    bool negative = false;
    std::string integer = "0";
    std::string fraction;

    bool zero() const { return integer == "0" && fraction.empty(); }
};

Decimal normalize(bool negative, std::string integer, std::string fraction) {
    size_t nz = integer.find_first_not_of('0');
    integer = nz == std::string::npos ? "0" : integer.substr(nz);
    while (!fraction.empty() && fraction.back() == '0') fraction.pop_back();
    Decimal d{negative, integer, fraction};
    if (d.zero()) d.negative = false;
    return d;
}

// From the number's shortest spelling, which is what the schema's author wrote for any reasonable bound.
Decimal to_decimal(const Json& number) {
    std::string text = number.dump();
    bool negative = !text.empty() && text[0] == '-';
    if (negative) text.erase(0, 1);
    long exponent = 0;
    if (size_t e = text.find_first_of("eE"); e != std::string::npos) {
        exponent = std::stol(text.substr(e + 1));
        text.resize(e);
    }
    std::string digits = text;
    long point = static_cast<long>(text.size());
    if (size_t dot = text.find('.'); dot != std::string::npos) {
        digits = text.substr(0, dot) + text.substr(dot + 1);
        point = static_cast<long>(dot);
    }
    point += exponent;
    if (point < 0) digits.insert(0, static_cast<size_t>(-point), '0'), point = 0;
    if (point > static_cast<long>(digits.size())) digits.append(static_cast<size_t>(point) - digits.size(), '0');
    return normalize(negative, digits.substr(0, static_cast<size_t>(point)), digits.substr(static_cast<size_t>(point)));
}

int compare_magnitude(const Decimal& a, const Decimal& b) {
    if (a.integer.size() != b.integer.size()) return a.integer.size() < b.integer.size() ? -1 : 1;
    if (int c = a.integer.compare(b.integer)) return c < 0 ? -1 : 1;
    if (int c = a.fraction.compare(b.fraction)) return c < 0 ? -1 : 1;  // no trailing zeros: string order is order
    return 0;
}

int compare(const Decimal& a, const Decimal& b) {
    if (a.negative != b.negative) return a.negative ? -1 : 1;
    int c = compare_magnitude(a, b);
    return a.negative ? -c : c;
}

Decimal negated(Decimal d) {
    if (!d.zero()) d.negative = !d.negative;
    return d;
}

// Digit string plus one / minus one (the latter of a positive number).
std::string increment(std::string digits) {
    for (size_t i = digits.size(); i-- > 0;) {
        if (digits[i] != '9') {
            ++digits[i];
            return digits;
        }
        digits[i] = '0';
    }
    return "1" + digits;
}
std::string decrement(std::string digits) {
    for (size_t i = digits.size(); i-- > 0;) {
        if (digits[i] != '0') {
            --digits[i];
            break;
        }
        digits[i] = '9';
    }
    return normalize(false, digits, "").integer;
}

Decimal add_one(const Decimal& integer) {
    if (!integer.negative) return normalize(false, increment(integer.integer), "");
    return normalize(true, decrement(integer.integer), "");
}

Decimal floor_of(const Decimal& d) {
    if (d.fraction.empty()) return d;
    return d.negative ? normalize(true, increment(d.integer), "") : normalize(false, d.integer, "");
}
Decimal ceil_of(const Decimal& d) {
    if (d.fraction.empty()) return d;
    return d.negative ? normalize(true, d.integer, "") : normalize(false, increment(d.integer), "");
}

// One end of an interval.
struct Bound {
    Decimal value;
    bool inclusive = true;
};

// ---- GBNF text helpers ----------------------------------------------------------------------------------------

// `item` repeated at least n times (as x{n} x*: an open count is the costliest repetition to expand).
std::string at_least(const std::string& item, size_t n) {
    if (n == 0) return item + "*";
    if (n == 1) return item + "+";
    return item + "{" + std::to_string(n) + "} " + item + "*";
}

std::string digit_class(char first, char last) {
    if (first == last) return std::string("\"") + first + "\"";
    if (first == '0' && last == '9') return "[0-9]";
    return std::string("[") + first + "-" + last + "]";
}

std::string any_digits(size_t n) {
    if (n == 0) return "";
    if (n == 1) return "[0-9]";
    return "[0-9]{" + std::to_string(n) + "}";
}

std::string join(const std::vector<std::string>& parts, const char* separator) {
    std::string out;
    for (const std::string& p : parts) {
        if (p.empty()) continue;
        if (!out.empty()) out += separator;
        out += p;
    }
    return out;
}

std::string alternation(const std::vector<std::string>& alternatives) {
    if (alternatives.size() == 1) return alternatives[0];
    std::string out = "(";
    for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? " | " : "") + alternatives[i];
    return out + ")";
}

// Digit strings of one length between `low` and `high` (same length), from position k on; `tight_low` /
// `tight_high`: the digits so far equal the bound's.
std::string same_length_range(const std::string& low, const std::string& high, size_t k, bool tight_low,
                              bool tight_high) {
    size_t remaining = low.size() - k;
    if (remaining == 0) return "";
    // A bound whose remaining digits are all 0 (low) or all 9 (high) no longer constrains them.
    if (tight_low && low.find_first_not_of('0', k) == std::string::npos) tight_low = false;
    if (tight_high && high.find_first_not_of('9', k) == std::string::npos) tight_high = false;
    if (remaining == 1) return digit_class(tight_low ? low[k] : '0', tight_high ? high[k] : '9');
    if (!tight_low && !tight_high) return any_digits(remaining);
    char lo = tight_low ? low[k] : '0', hi = tight_high ? high[k] : '9';
    if (tight_low && tight_high && lo == hi)
        return join({digit_class(lo, lo), same_length_range(low, high, k + 1, true, true)}, " ");
    std::vector<std::string> alternatives;
    char first = lo, last = hi;
    if (tight_low) alternatives.push_back(join({digit_class(lo, lo), same_length_range(low, high, k + 1, true, false)}, " ")), ++first;
    if (first <= (tight_high ? hi - 1 : hi)) {
        char middle_last = tight_high ? static_cast<char>(hi - 1) : hi;
        alternatives.push_back(join({digit_class(first, middle_last), any_digits(remaining - 1)}, " "));
    }
    if (tight_high) alternatives.push_back(join({digit_class(last, last), same_length_range(low, high, k + 1, false, true)}, " "));
    return alternation(alternatives);
}

// Unsigned integers (no leading zeros) in [low, high]; no `high`: unbounded. Empty when the range is.
std::string integer_range(const std::string& low, const std::optional<std::string>& high) {
    Decimal lo = normalize(false, low, "");
    if (high && compare(lo, normalize(false, *high, "")) > 0) return "";
    std::vector<std::string> alternatives;
    size_t last_length = high ? high->size() : low.size();
    for (size_t length = low.size(); length <= last_length; ++length) {
        std::string from = low;
        if (length > low.size()) from.assign(length, '0'), from[0] = '1';
        std::string to = high && length == high->size() ? *high : std::string(length, '9');
        alternatives.push_back(same_length_range(from, to, 0, true, true));
    }
    if (!high) alternatives.push_back("[1-9] " + at_least("[0-9]", low.size()));
    return alternation(alternatives);
}

// ---- the compiler ----------------------------------------------------------------------------------------------

const std::set<std::string, std::less<>> kAnnotations = {
    "title", "description", "$schema", "$id", "id", "examples", "example", "default", "$comment", "deprecated",
    "readOnly", "writeOnly", "definitions", "$defs", "$anchor", "$vocabulary", "contentMediaType", "contentEncoding",
    "discriminator", "xml", "externalDocs"};

// Keywords some draft defines that constrain, which this compiler does not honour.
const std::set<std::string, std::less<>> kRefused = {
    "not", "multipleOf", "uniqueItems", "patternProperties", "propertyNames", "dependencies", "dependentRequired",
    "dependentSchemas", "if", "then", "else", "contains", "minContains", "maxContains", "minProperties",
    "maxProperties", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef", "contentSchema"};

// Keywords whose value here constrains nothing.
bool trivially_satisfied(const std::string& key, const Json& value) {
    if (key == "uniqueItems") return value == false;
    if (key == "minProperties") return value == 0;
    if (key == "patternProperties" || key == "dependencies" || key == "dependentRequired" ||
        key == "dependentSchemas")
        return value.is_object() && value.empty();
    if (key == "then" || key == "else") return true;  // without `if` they do nothing; with it, `if` is refused
    return false;
}

std::string escape_pointer_token(const std::string& token) {
    std::string out;
    for (char c : token) {
        if (c == '~') out += "~0";
        else if (c == '/') out += "~1";
        else out += c;
    }
    return out;
}

enum Type : unsigned { kNull = 1, kBoolean = 2, kObject = 4, kArray = 8, kString = 16, kInteger = 32, kNumber = 64 };
constexpr unsigned kAnyType = kNull | kBoolean | kObject | kArray | kString | kInteger | kNumber;

unsigned type_bit(const std::string& name, const std::string& at) {
    static const std::map<std::string, unsigned, std::less<>> kTypes = {
        {"null", kNull},     {"boolean", kBoolean}, {"object", kObject}, {"array", kArray},
        {"string", kString}, {"integer", kInteger}, {"number", kNumber | kInteger}};
    auto it = kTypes.find(name);
    if (it == kTypes.end()) throw GrammarError("unknown JSON Schema type \"" + name + "\" at " + at);
    return it->second;
}

// A schema (or part) that no value meets. Where the part is optional (a property not required, one type of
// several, an anyOf branch) it only removes that part; otherwise it is the error.
class Unsatisfiable : public GrammarError {
public:
    using GrammarError::GrammarError;
};

class SchemaCompiler {
public:
    SchemaCompiler(Json root, const JsonSchemaOptions& options) : root_(std::move(root)), options_(options) {}

    std::string compile_root() {
        std::string body = compile(root_, "");
        std::string out = std::string(options_.rule_prefix) + "root ::= " + body + "\n";
        for (const auto& [name, rule_body] : rules_) out += name + " ::= " + rule_body + "\n";
        out += primitives();
        if (out.size() > kMaxGrammarBytes)
            throw GrammarError("the grammar for this JSON Schema would be " + std::to_string(out.size() / 1024) +
                               " KiB, over the 256 KiB limit");
        return out;
    }

private:
    // The schema for properties an object does not declare, as JsonSchemaOptions says to read a missing one. Only
    // a whole object is closed this way: allOf parts are merged first (merge_into), as JSON Schema reads them.
    Json additional_properties(const Json& schema) const {
        if (schema.contains("additionalProperties")) return schema["additionalProperties"];
        return Json(options_.validation || !schema.contains("properties") || schema.contains("patternProperties"));
    }

    [[noreturn]] static void fail(const std::string& what, const std::string& at) {
        throw GrammarError(what + " at " + (at.empty() ? "/" : at));
    }
    [[noreturn]] static void unsatisfiable(const std::string& what, const std::string& at) {
        throw Unsatisfiable("unsatisfiable JSON Schema: " + what + " at " + (at.empty() ? "/" : at));
    }

    // A new rule with `body`, or the existing rule with that body.
    std::string rule(const std::string& hint, const std::string& body) {
        if (auto it = by_body_.find(body); it != by_body_.end()) return it->second;
        std::string name = fresh_name(hint);
        rules_.emplace_back(name, body);
        by_body_.emplace(body, name);
        return name;
    }

    std::string fresh_name(const std::string& hint) {
        std::string base;
        for (char c : hint) {
            bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
            if (word) base += c;
            else if (!base.empty() && base.back() != '-') base += '-';
        }
        while (!base.empty() && base.back() == '-') base.pop_back();
        if (base.size() > 40) base = base.substr(base.size() - 40), base.erase(0, base.find_first_not_of('-'));
        base = "s-" + base;
        if (base == "s-") base = "s";
        base.insert(0, options_.rule_prefix);
        std::string name = base;
        for (int i = 2; !names_.insert(name).second; ++i) name = base + "-" + std::to_string(i);
        return name;
    }

    std::string use(const char* primitive) {
        used_.insert(primitive);
        return primitive;
    }

    // ---- references ---------------------------------------------------------------------------------------

    const Json& resolve(const std::string& ref, const std::string& at) {
        std::string fragment = ref;
        if (size_t hash = ref.find('#'); hash != std::string::npos) {
            std::string base = ref.substr(0, hash);
            std::string root_id = root_.is_object() ? root_.value("$id", root_.value("id", std::string())) : "";
            if (size_t h = root_id.find('#'); h != std::string::npos) root_id.resize(h);
            if (!base.empty() && base != root_id) fail("unresolvable $ref \"" + ref + "\" (only local references)", at);
            fragment = ref.substr(hash + 1);
        } else {
            fail("unresolvable $ref \"" + ref + "\" (only local references)", at);
        }
        const Json* node = &root_;
        if (fragment.empty()) return *node;
        if (fragment[0] != '/') fail("unresolvable $ref \"" + ref + "\" (anchors are not supported)", at);
        size_t pos = 1;
        while (true) {
            size_t slash = fragment.find('/', pos);
            std::string token = fragment.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
            std::string decoded;
            for (size_t i = 0; i < token.size(); ++i) {
                if (token[i] == '~' && i + 1 < token.size()) {
                    decoded += token[i + 1] == '1' ? '/' : '~';
                    ++i;
                } else if (token[i] == '%' && i + 2 < token.size()) {
                    decoded += static_cast<char>(std::stoi(token.substr(i + 1, 2), nullptr, 16));
                    i += 2;
                } else {
                    decoded += token[i];
                }
            }
            if (node->is_object() && node->contains(decoded)) {
                node = &(*node)[decoded];
            } else if (node->is_array() && !decoded.empty() &&
                       decoded.find_first_not_of("0123456789") == std::string::npos &&
                       std::stoul(decoded) < node->size()) {
                node = &(*node)[std::stoul(decoded)];
            } else {
                fail("unresolvable $ref \"" + ref + "\"", at);
            }
            if (slash == std::string::npos) break;
            pos = slash + 1;
        }
        return *node;
    }

    std::string compile_ref(const std::string& ref, const std::string& at) {
        if (auto it = ref_rules_.find(ref); it != ref_rules_.end()) return it->second;
        const Json& target = resolve(ref, at);
        std::string pointer = ref.substr(ref.find('#') + 1);
        std::string name = fresh_name(pointer.empty() ? "root" : pointer);
        ref_rules_.emplace(ref, name);
        if (++ref_depth_ > 200) fail("$ref chain too deep", at);
        std::string body = compile(target, pointer);
        --ref_depth_;
        rules_.emplace_back(name, body);
        return name;
    }

    // ---- allOf, anyOf, oneOf: alternatives of plain schemas ----------------------------------------------

    static bool constrains(const Json& schema) {
        if (schema.is_boolean()) return !schema.get<bool>();
        for (const auto& [key, value] : schema.items())
            if (!kAnnotations.count(key)) return true;
        return false;
    }

    static Json all_of(const Json& a, const Json& b) {
        if (a == true || a == b) return b;
        if (b == true) return a;
        if (a == false || b == false) return false;
        return Json{{"allOf", Json::array({a, b})}};
    }

    // The schema as alternatives (its disjunctive normal form), each a plain schema: no $ref, allOf, anyOf or
    // oneOf at its top. Conjunctions merge in the order the schema is written (its own keywords, its $ref, allOf,
    // anyOf, oneOf), which is also the order their properties take. Empty: the schema matches nothing.
    std::vector<Json> expand(const Json& schema, const std::string& at) {
        struct Depth {
            int& depth;
            ~Depth() { --depth; }
        } guard{++expand_depth_};
        if (expand_depth_ > 64) fail("unsupported JSON Schema keyword \"$ref\" (its allOf/anyOf chain loops)", at);
        if (schema.is_boolean()) return schema.get<bool>() ? std::vector<Json>{Json::object()} : std::vector<Json>{};
        if (!schema.is_object()) fail("schema must be an object or a boolean", at);
        for (const auto& [key, value] : schema.items())
            if (kRefused.count(key) && !trivially_satisfied(key, value) && !(key == "if" && !schema.contains("then") && !schema.contains("else")))
                fail("unsupported JSON Schema keyword \"" + key + "\"", at);
        Json own = schema;
        for (const char* key : {"$ref", "allOf", "anyOf", "oneOf"}) own.erase(key);
        std::vector<Json> result = {own};
        if (schema.contains("$ref")) {
            if (!schema["$ref"].is_string()) fail("$ref must be a string", at);
            result = product(result, expand(resolve(schema["$ref"].get<std::string>(), at), at), at);
        }
        if (schema.contains("allOf")) {
            if (!schema["allOf"].is_array() || schema["allOf"].empty()) fail("allOf must be a non-empty array", at);
            for (size_t i = 0; i < schema["allOf"].size(); ++i)
                result = product(result, expand(schema["allOf"][i], at + "/allOf/" + std::to_string(i)), at);
        }
        for (const char* combinator : {"anyOf", "oneOf"}) {
            if (!schema.contains(combinator)) continue;
            const Json& branches = schema[combinator];
            if (!branches.is_array() || branches.empty())
                fail(std::string(combinator) + " must be a non-empty array", at);
            std::vector<std::vector<Json>> expanded;
            for (size_t i = 0; i < branches.size(); ++i)
                expanded.push_back(expand(branches[i], at + "/" + combinator + "/" + std::to_string(i)));
            if (std::string(combinator) == "anyOf") {
                std::vector<Json> alternatives;
                for (const auto& branch : expanded) alternatives.insert(alternatives.end(), branch.begin(), branch.end());
                result = product(result, alternatives, at);
                continue;
            }
            // oneOf: within each alternative so far, each branch clear of the others.
            std::vector<Json> next;
            for (const Json& context : result) {
                std::vector<std::vector<Json>> in_context;
                for (const auto& branch : expanded) in_context.push_back(product({context}, branch, at));
                for (size_t i = 0; i < in_context.size(); ++i)
                    for (const Json& branch : in_context[i]) {
                        std::vector<Json> exclusive = {branch};
                        for (size_t j = 0; j < in_context.size(); ++j)
                            if (j != i) exclusive = product(exclusive, excluding(branch, in_context[j], at), at);
                        next.insert(next.end(), exclusive.begin(), exclusive.end());
                        if (next.size() > kMaxAlternatives)
                            fail("unsupported JSON Schema keyword \"oneOf\" (over 64 alternatives once combined)", at);
                    }
            }
            result = next;
            continue;
        }
        return result;
    }

    static constexpr size_t kMaxAlternatives = 64;

    std::vector<Json> product(const std::vector<Json>& a, const std::vector<Json>& b, const std::string& at) {
        std::vector<Json> out;
        for (const Json& x : a)
            for (const Json& y : b) {
                Json merged = x;
                if (merge_into(merged, y, at)) out.push_back(std::move(merged));
                if (out.size() > kMaxAlternatives)
                    fail("unsupported JSON Schema keyword \"anyOf\" (over 64 alternatives once combined)", at);
            }
        return out;
    }

    // oneOf: alternatives that keep `branch` clear of every one of `others` (the plain alternatives of another
    // branch of the same oneOf). Nothing is needed where the two are disjoint; otherwise the instance must be of a
    // type `other` does not allow, or an object missing one of the names `other` requires. That is exact when
    // `other` constrains no more than type and required, and stricter (never looser) when it constrains more.
    std::vector<Json> excluding(const Json& branch, const std::vector<Json>& others, const std::string& at) {
        std::vector<Json> out = {Json::object()};
        for (const Json& other : others) {
            if (disjoint(branch, other, at)) continue;
            unsigned types = other.contains("type") ? types_of(other["type"], at) : kAnyType;
            if (other.value("nullable", false) == true) types |= kNull;
            std::vector<Json> outside;
            Json other_types = Json::array();
            for (const char* name : {"null", "boolean", "object", "array", "string"})
                if ((types & type_bit(name, at)) == 0) other_types.push_back(name);
            if ((types & (kNumber | kInteger)) == 0) other_types.push_back("number");
            // (A number that is not an integer is outside {"type": "integer"} too, but no type says so.)
            if (!other_types.empty()) outside.push_back(Json{{"type", other_types}});
            if ((types & kObject) && other.contains("required") && other["required"].is_array())
                for (const Json& name : other["required"])
                    if (name.is_string())
                        outside.push_back(Json{{"type", "object"}, {"properties", Json{{name.get<std::string>(), false}}}});
            out = product(out, outside, at);
        }
        return out;
    }

    // Whether no instance can meet both plain schemas: no common type, or a name both require with values
    // (const/enum) in common to neither, or that one requires and the other forbids.
    bool disjoint(const Json& a, const Json& b, const std::string& at, int depth = 0) {
        for (const Json* side : {&a, &b})
            for (const char* key : {"$ref", "allOf", "anyOf", "oneOf"})
                if (side->contains(key)) return false;
        unsigned ta = a.contains("type") ? types_of(a["type"], at) : kAnyType;
        unsigned tb = b.contains("type") ? types_of(b["type"], at) : kAnyType;
        if (a.value("nullable", false) == true) ta |= kNull;
        if (b.value("nullable", false) == true) tb |= kNull;
        if ((ta & tb) == 0) return true;
        auto values = [](const Json& s) -> std::optional<Json> {
            if (!s.is_object()) return std::nullopt;
            if (s.contains("const")) return Json::array({s["const"]});
            if (s.contains("enum") && s["enum"].is_array()) return s["enum"];
            return std::nullopt;
        };
        auto disjoint_values = [](const Json& x, const Json& y) {
            for (const Json& v : x)
                if (std::find(y.begin(), y.end(), v) != y.end()) return false;
            return true;
        };
        if (auto va = values(a), vb = values(b); va && vb && disjoint_values(*va, *vb)) return true;
        // Counted lengths that cannot meet, for the one type they share.
        auto separate_counts = [&](const char* min_key, const char* max_key) {
            auto count = [](const Json& s, const char* key, size_t fallback) {
                return s.contains(key) && s[key].is_number_unsigned() ? s[key].get<size_t>() : fallback;
            };
            return count(a, min_key, 0) > count(b, max_key, SIZE_MAX) || count(b, min_key, 0) > count(a, max_key, SIZE_MAX);
        };
        if ((ta & tb) == kArray && separate_counts("minItems", "maxItems")) return true;
        if ((ta & tb) == kString && separate_counts("minLength", "maxLength")) return true;
        if ((ta & tb & ~kObject) != 0) return false;  // what follows tells objects apart
        auto property = [](const Json& s, const std::string& name) -> const Json* {
            if (!s.contains("properties") || !s["properties"].contains(name)) return nullptr;
            return &s["properties"][name];
        };
        auto requires_name = [](const Json& s, const Json& name) {
            return s.contains("required") && s["required"].is_array() &&
                   std::find(s["required"].begin(), s["required"].end(), name) != s["required"].end();
        };
        for (const Json* side : {&a, &b}) {
            const Json& self = *side;
            const Json& other = side == &a ? b : a;
            if (!self.contains("required") || !self["required"].is_array()) continue;
            for (const Json& name : self["required"]) {
                if (!name.is_string()) continue;
                const Json* mine = property(self, name.get<std::string>());
                const Json* theirs = property(other, name.get<std::string>());
                if (theirs && *theirs == false) return true;
                if (!theirs && other.value("additionalProperties", Json(true)) == false) return true;
                if (!requires_name(other, name) || !mine || !theirs || depth > 8) continue;
                if (disjoint_values_of(*mine, *theirs, at, depth + 1)) return true;
            }
        }
        return false;
    }

    // The order properties take in every alternative of a schema: as they first appear in it, its $ref, allOf,
    // anyOf and oneOf branches (depth first), so that all alternatives agree on one order.
    void property_order(const Json& schema, std::vector<std::string>& names, std::vector<std::string>& required,
                        int depth) {
        if (!schema.is_object() || depth > 20) return;
        auto add = [](std::vector<std::string>& list, const std::string& name) {
            if (std::find(list.begin(), list.end(), name) == list.end()) list.push_back(name);
        };
        if (schema.contains("properties") && schema["properties"].is_object())
            for (const auto& [name, _] : schema["properties"].items()) add(names, name);
        if (schema.contains("required") && schema["required"].is_array())
            for (const Json& name : schema["required"])
                if (name.is_string()) add(required, name.get<std::string>());
        if (schema.contains("$ref") && schema["$ref"].is_string())
            property_order(resolve(schema["$ref"].get<std::string>(), ""), names, required, depth + 1);
        for (const char* key : {"allOf", "anyOf", "oneOf"})
            if (schema.contains(key) && schema[key].is_array())
                for (const Json& branch : schema[key]) property_order(branch, names, required, depth + 1);
    }

    // Sorts object `plain[key]` (by key) or array `plain[key]` by where each name stands in `order`.
    static void in_order(Json& plain, const char* key, const std::vector<std::string>& order) {
        if (!plain.contains(key)) return;
        auto rank = [&](const std::string& name) {
            return static_cast<size_t>(std::find(order.begin(), order.end(), name) - order.begin());
        };
        Json& value = plain[key];
        if (value.is_object()) {
            std::vector<std::pair<std::string, Json>> items;
            for (const auto& [name, schema] : value.items()) items.emplace_back(name, schema);
            std::stable_sort(items.begin(), items.end(), [&](const auto& a, const auto& b) { return rank(a.first) < rank(b.first); });
            Json sorted = Json::object();
            for (auto& [name, schema] : items) sorted[name] = std::move(schema);
            value = std::move(sorted);
        } else if (value.is_array() && std::all_of(value.begin(), value.end(), [](const Json& v) { return v.is_string(); })) {
            std::vector<std::string> list = value.get<std::vector<std::string>>();
            std::stable_sort(list.begin(), list.end(), [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
            value = list;
        }
    }

    // disjoint() for any two schemas: every alternative of one against every alternative of the other.
    bool disjoint_values_of(const Json& a, const Json& b, const std::string& at, int depth) {
        try {
            std::vector<Json> xs = expand(a, at), ys = expand(b, at);
            for (const Json& x : xs)
                for (const Json& y : ys)
                    if (!disjoint(x, y, at, depth)) return false;
            return true;
        } catch (const GrammarError&) {
            return false;  // what cannot be compiled cannot be told apart here either
        }
    }

    // Merges plain schema `s` into plain schema `out` (their conjunction) where that is exact; false when the
    // two exclude each other; refused (by the keyword "allOf") where they combine in a way it cannot express.
    bool merge_into(Json& out, const Json& s, const std::string& at) {
        bool object_part = s.contains("properties") || s.contains("additionalProperties");
        bool out_object_part = out.contains("properties") || out.contains("additionalProperties");
        if (object_part && out_object_part) {
            // Each side decides every name: its own property schema, else its additionalProperties.
            Json props_a = out.value("properties", Json::object()), props_b = s.value("properties", Json::object());
            Json add_a = out.value("additionalProperties", Json(true)), add_b = s.value("additionalProperties", Json(true));
            Json merged = Json::object();
            for (const auto& [name, schema] : props_a.items())
                merged[name] = all_of(schema, props_b.contains(name) ? props_b[name] : add_b);
            for (const auto& [name, schema] : props_b.items())
                if (!merged.contains(name)) merged[name] = all_of(add_a, schema);
            out["properties"] = merged;
            // Left unsaid when neither says it, so that generation closes the merged object, not each part.
            if (out.contains("additionalProperties") || s.contains("additionalProperties"))
                out["additionalProperties"] = all_of(add_a, add_b);
        } else if (object_part) {
            if (s.contains("properties")) out["properties"] = s["properties"];
            if (s.contains("additionalProperties")) out["additionalProperties"] = s["additionalProperties"];
        }
        for (const auto& [key, value] : s.items()) {
            if (key == "properties" || key == "additionalProperties" || kAnnotations.count(key)) continue;
            if (!out.contains(key) || out[key] == value) {
                out[key] = value;
                continue;
            }
            Json& mine = out[key];
            if (key == "type") {
                unsigned both = types_of(mine, at) & types_of(value, at);
                Json names = Json::array();
                for (const char* name : {"null", "boolean", "object", "array", "string"})
                    if (both & type_bit(name, at)) names.push_back(name);
                if (both & kNumber) names.push_back("number");
                else if (both & kInteger) names.push_back("integer");
                if (names.empty()) return false;
                mine = names;
            } else if (key == "nullable") {
                mine = mine == true && value == true;
            } else if (key == "required" && mine.is_array() && value.is_array()) {
                for (const Json& name : value)
                    if (std::find(mine.begin(), mine.end(), name) == mine.end()) mine.push_back(name);
            } else if ((key == "minimum" || key == "minLength" || key == "minItems") && mine.is_number() &&
                       value.is_number()) {
                if (compare(to_decimal(value), to_decimal(mine)) > 0) mine = value;
            } else if ((key == "maximum" || key == "maxLength" || key == "maxItems") && mine.is_number() &&
                       value.is_number()) {
                if (compare(to_decimal(value), to_decimal(mine)) < 0) mine = value;
            } else if (key == "enum" && mine.is_array() && value.is_array()) {
                Json common = Json::array();
                for (const Json& v : mine)
                    if (std::find(value.begin(), value.end(), v) != value.end()) common.push_back(v);
                if (common.empty()) return false;
                mine = common;
            } else if (key == "const") {
                return false;  // two different values
            } else if (key == "items" && !mine.is_array() && !value.is_array()) {
                mine = all_of(mine, value);
            } else {
                fail("unsupported JSON Schema keyword \"allOf\" (its branches disagree on \"" + key + "\")", at);
            }
        }
        if (out.contains("const") && out.contains("enum") &&
            std::find(out["enum"].begin(), out["enum"].end(), out["const"]) == out["enum"].end())
            return false;
        if (out.contains("required") && out["required"].is_array() && out.contains("properties"))
            for (const Json& name : out["required"])
                if (name.is_string() && out["properties"].contains(name.get<std::string>()) &&
                    out["properties"][name.get<std::string>()] == false)
                    return false;
        return true;
    }

    unsigned types_of(const Json& type, const std::string& at) {
        if (type.is_string()) return type_bit(type.get<std::string>(), at);
        if (!type.is_array()) fail("\"type\" must be a string or an array", at);
        unsigned bits = 0;
        for (const Json& t : type) {
            if (!t.is_string()) fail("\"type\" must be a string or an array", at);
            bits |= type_bit(t.get<std::string>(), at);
        }
        return bits;
    }

    // ---- schemas -------------------------------------------------------------------------------------------

    // A schema that holds a $ref may lead back to itself: it gets its rule (named before its body is compiled),
    // shared by every place with the same text.
    std::string compile(const Json& schema, const std::string& at) {
        if (!schema.is_object()) return compile_node(schema, at);
        std::string text = schema.dump();
        if (text.find("\"$ref\"") == std::string::npos) return compile_node(schema, at);
        if (auto it = schema_rules_.find(text); it != schema_rules_.end()) return it->second;
        std::string name = fresh_name(at.empty() ? "root" : at);
        schema_rules_.emplace(text, name);
        std::string body = compile_node(schema, at);
        rules_.emplace_back(name, body);
        return name;
    }

    std::string compile_node(const Json& schema, const std::string& at) {
        if (schema.is_boolean()) {
            if (schema.get<bool>()) return use("value");
            unsatisfiable("schema false matches nothing", at);
        }
        if (!schema.is_object()) fail("schema must be an object or a boolean", at);
        if (std::optional<Json> values = finite_values(schema, at, 0)) {
            // A finite set of values: the grammar lists those the whole schema accepts, so any keyword the
            // validator below knows is honoured exactly.
            std::vector<std::string> alternatives;
            for (const Json& v : *values)
                if (valid(v, schema, at, 0)) alternatives.push_back(constant(v));
            if (alternatives.empty()) unsatisfiable("no value of its enum/const meets the schema", at);
            return rule(at, join(alternatives, " | "));
        }
        for (const auto& [key, value] : schema.items()) {
            if (key == "if" && !schema.contains("then") && !schema.contains("else")) continue;
            if (kRefused.count(key) && !trivially_satisfied(key, value))
                fail("unsupported JSON Schema keyword \"" + key + "\"", at);
        }
        Json siblings = schema;
        for (const char* key : {"$ref", "allOf", "anyOf", "oneOf"}) siblings.erase(key);
        bool combined = schema.contains("allOf") || schema.contains("anyOf") || schema.contains("oneOf");
        if (schema.contains("$ref") && !combined && !constrains(siblings)) {
            if (!schema["$ref"].is_string()) fail("$ref must be a string", at);
            return compile_ref(schema["$ref"].get<std::string>(), at);
        }
        if (schema.contains("anyOf") && !schema.contains("$ref") && !schema.contains("allOf") &&
            !schema.contains("oneOf") && !constrains(siblings) && schema["anyOf"].is_array() && !schema["anyOf"].empty()) {
            // Plain alternatives keep their own rules (shared, and recursive through $ref).
            std::vector<std::string> alternatives;
            for (size_t i = 0; i < schema["anyOf"].size(); ++i)
                try {
                    alternatives.push_back(compile(schema["anyOf"][i], at + "/anyOf/" + std::to_string(i)));
                } catch (const Unsatisfiable&) {
                }
            if (alternatives.empty()) unsatisfiable("anyOf: no branch can match", at);
            return rule(at, join(alternatives, " | "));
        }
        if (combined || schema.contains("$ref")) {
            std::vector<std::string> alternatives;
            std::vector<std::string> names, required;
            property_order(schema, names, required, 0);
            for (Json plain : expand(schema, at)) {
                in_order(plain, "properties", names);
                in_order(plain, "required", required);
                try {
                    alternatives.push_back(compile_node(plain, at));
                } catch (const Unsatisfiable&) {
                }
            }
            if (alternatives.empty() && schema.dump().find("\"oneOf\"") != std::string::npos)
                fail("unsupported JSON Schema keyword \"oneOf\" (its branches overlap where they cannot be told apart)", at);
            if (alternatives.empty()) unsatisfiable("schema matches nothing (its allOf/anyOf branches exclude each other)", at);
            return rule(at, join(alternatives, " | "));
        }
        if (schema.contains("required") && schema["required"].is_boolean() && schema["required"] == true)
            fail("unsupported JSON Schema keyword \"required\" (draft 3's boolean form)", at);
        unsigned types = schema.contains("type") ? types_of(schema["type"], at) : kAnyType;
        if (schema.value("nullable", false)) types |= kNull;

        std::vector<std::string> alternatives;
        if (types & kNull) alternatives.push_back(use("null"));
        if (types & kBoolean) alternatives.push_back(use("boolean"));
        // A type the keywords leave no value of drops out; the others stay.
        std::optional<Unsatisfiable> why;
        auto add = [&](auto&& compile_type) {
            try {
                alternatives.push_back(compile_type());
            } catch (const Unsatisfiable& e) {
                why = e;
            }
        };
        if (types & kObject) add([&] { return compile_object(schema, at); });
        if (types & kArray) add([&] { return compile_array(schema, at); });
        if (types & kString) add([&] { return compile_string(schema, at); });
        if (types & kNumber) add([&] { return compile_number(schema, at, false); });
        else if (types & kInteger) add([&] { return compile_number(schema, at, true); });
        if (alternatives.empty() && why) throw *why;
        alternatives.erase(std::remove(alternatives.begin(), alternatives.end(), ""), alternatives.end());
        if (alternatives.empty()) unsatisfiable("schema matches nothing", at);
        if (alternatives == std::vector<std::string>{"null", "boolean", "object", "array", "string", "number"})
            return use("value");
        if (alternatives.size() == 1) return alternatives[0];
        return rule(at, join(alternatives, " | "));
    }

    // ---- constants --------------------------------------------------------------------------------------

    static unsigned type_of(const Json& v) {
        switch (v.type()) {
            case Json::value_t::null: return kNull;
            case Json::value_t::boolean: return kBoolean;
            case Json::value_t::object: return kObject;
            case Json::value_t::array: return kArray;
            case Json::value_t::string: return kString;
            case Json::value_t::number_integer:
            case Json::value_t::number_unsigned: return kInteger;
            case Json::value_t::number_float: {
                double d = v.get<double>();
                return d == static_cast<double>(static_cast<long long>(d)) ? kInteger : kNumber;
            }
            default: return 0;
        }
    }

    static size_t code_points(const std::string& s) {
        size_t n = 0;
        for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
        return n;
    }

    // A JSON value exactly, with the grammar's whitespace between tokens.
    std::string constant(const Json& v) {
        if (v.is_object()) {
            std::vector<std::string> members;
            for (const auto& [key, value] : v.items())
                members.push_back(gbnf_literal(Json(key).dump()) + " space \":\" space " + constant(value));
            use("space");
            return "\"{\" space " + join(members, " \",\" space ") + (members.empty() ? "" : " ") + "\"}\" space";
        }
        if (v.is_array()) {
            std::vector<std::string> items;
            for (const Json& item : v) items.push_back(constant(item));
            use("space");
            return "\"[\" space " + join(items, " \",\" space ") + (items.empty() ? "" : " ") + "\"]\" space";
        }
        use("space");
        return gbnf_literal(v.dump()) + " space";
    }

    // ---- finite schemas: enum and const, checked value by value -------------------------------------------

    // The values of the enum/const the schema holds (itself, through a $ref or an allOf branch), intersected;
    // nothing when it holds none.
    std::optional<Json> finite_values(const Json& schema, const std::string& at, int depth) {
        if (!schema.is_object() || depth > 32) return std::nullopt;
        std::optional<Json> values;
        auto meet = [&](const Json& more) {
            if (!values) {
                values = more;
                return;
            }
            Json common = Json::array();
            for (const Json& v : *values)
                if (std::find(more.begin(), more.end(), v) != more.end()) common.push_back(v);
            values = common;
        };
        if (schema.contains("enum")) {
            if (!schema["enum"].is_array()) fail("enum must be an array", at);
            meet(schema["enum"]);
        }
        if (schema.contains("const")) meet(Json::array({schema["const"]}));
        if (schema.contains("$ref") && schema["$ref"].is_string())
            if (auto more = finite_values(resolve(schema["$ref"].get<std::string>(), at), at, depth + 1)) meet(*more);
        if (schema.contains("allOf") && schema["allOf"].is_array())
            for (const Json& part : schema["allOf"])
                if (auto more = finite_values(part, at, depth + 1)) meet(*more);
        return values;
    }

    // A JSON Schema validator for one value, over the keywords this file knows; any other keyword that
    // constrains is refused by name, as the compiler does.
    bool valid(const Json& v, const Json& schema, const std::string& at, int depth) {
        if (depth > 64) fail("unsupported JSON Schema keyword \"$ref\" (it loops)", at);
        if (schema.is_boolean()) return schema.get<bool>();
        if (!schema.is_object()) fail("schema must be an object or a boolean", at);
        auto sub = [&](const Json& value, const Json& s) { return valid(value, s, at, depth + 1); };
        auto number = [&](const char* key) {
            if (!schema[key].is_number()) fail(std::string(key) + " must be a number", at);
            return to_decimal(schema[key]);
        };
        auto count = [&](const char* key) {
            if (!schema[key].is_number() || schema[key].get<double>() < 0) fail(std::string(key) + " must be a count", at);
            return static_cast<size_t>(schema[key].get<double>());
        };
        for (const auto& [key, bound] : schema.items()) {
            if (kAnnotations.count(key) || key == "then" || key == "else") continue;
            if (key == "type") {
                unsigned types = types_of(bound, at) | (schema.value("nullable", false) == true ? kNull : 0u);
                if ((types & type_of(v)) == 0 && !((types & kNumber) && v.is_number())) return false;
            } else if (key == "nullable") {
                if (!schema.contains("type") && bound == true) continue;
            } else if (key == "enum") {
                if (std::find(bound.begin(), bound.end(), v) == bound.end()) return false;
            } else if (key == "const") {
                if (v != bound) return false;
            } else if (key == "$ref") {
                if (!sub(v, resolve(bound.get<std::string>(), at))) return false;
            } else if (key == "allOf" || key == "anyOf" || key == "oneOf") {
                size_t n = 0;
                for (const Json& branch : bound) n += sub(v, branch);
                if (key == "allOf" ? n != bound.size() : key == "anyOf" ? n == 0 : n != 1) return false;
            } else if (key == "not") {
                if (sub(v, bound)) return false;
            } else if (key == "if") {
                bool holds = sub(v, bound);
                if (holds && schema.contains("then") && !sub(v, schema["then"])) return false;
                if (!holds && schema.contains("else") && !sub(v, schema["else"])) return false;
            } else if (key == "minimum" || key == "maximum" || key == "exclusiveMinimum" || key == "exclusiveMaximum") {
                if (!v.is_number() || bound.is_boolean()) continue;
                int c = compare(to_decimal(v), number(key.c_str()));
                bool low_exclusive = schema.value("exclusiveMinimum", Json(false)) == true;
                bool high_exclusive = schema.value("exclusiveMaximum", Json(false)) == true;
                if ((key == "minimum" && (c < 0 || (c == 0 && low_exclusive))) ||
                    (key == "maximum" && (c > 0 || (c == 0 && high_exclusive))) ||
                    (key == "exclusiveMinimum" && c <= 0) || (key == "exclusiveMaximum" && c >= 0))
                    return false;
            } else if (key == "multipleOf") {
                if (!v.is_number()) continue;
                double quotient = v.get<double>() / bound.get<double>();
                if (!std::isfinite(quotient) || quotient != std::floor(quotient)) return false;
            } else if (key == "minLength" || key == "maxLength") {
                if (!v.is_string()) continue;
                size_t n = code_points(v.get<std::string>());
                if (key == "minLength" ? n < count(key.c_str()) : n > count(key.c_str())) return false;
            } else if (key == "pattern") {
                if (!v.is_string()) continue;
                try {
                    if (!regex_search(bound.get<std::string>(), v.get<std::string>())) return false;
                } catch (const GrammarError& e) {
                    fail(std::string("unsupported JSON Schema keyword \"pattern\": ") + e.what(), at);
                }
            } else if (key == "minItems" || key == "maxItems") {
                if (!v.is_array()) continue;
                if (key == "minItems" ? v.size() < count(key.c_str()) : v.size() > count(key.c_str())) return false;
            } else if (key == "uniqueItems") {
                if (!v.is_array() || bound != true) continue;
                for (size_t i = 0; i < v.size(); ++i)
                    for (size_t j = i + 1; j < v.size(); ++j)
                        if (v[i] == v[j]) return false;
            } else if (key == "items" || key == "prefixItems" || key == "additionalItems") {
                if (!v.is_array()) continue;
                const Json* tuple = schema.contains("prefixItems") ? &schema["prefixItems"]
                                    : schema.contains("items") && schema["items"].is_array() ? &schema["items"] : nullptr;
                const Json* rest = schema.contains("prefixItems") ? (schema.contains("items") ? &schema["items"] : nullptr)
                                   : tuple ? (schema.contains("additionalItems") ? &schema["additionalItems"] : nullptr)
                                           : (schema.contains("items") ? &schema["items"] : nullptr);
                for (size_t i = 0; i < v.size(); ++i) {
                    const Json* s = tuple && i < tuple->size() ? &(*tuple)[i] : rest;
                    if (s && !sub(v[i], *s)) return false;
                }
            } else if (key == "contains") {
                if (!v.is_array()) continue;
                if (schema.contains("minContains") || schema.contains("maxContains"))
                    fail("unsupported JSON Schema keyword \"minContains\"", at);
                // clang 14 (the fuzz build) cannot capture a structured binding in a lambda.
                const Json& contained = bound;
                if (std::none_of(v.begin(), v.end(), [&](const Json& item) { return sub(item, contained); })) return false;
            } else if (key == "required") {
                if (!v.is_object() || !bound.is_array()) continue;
                for (const Json& name : bound)
                    if (!v.contains(name.get<std::string>())) return false;
            } else if (key == "minProperties" || key == "maxProperties") {
                if (!v.is_object()) continue;
                if (key == "minProperties" ? v.size() < count(key.c_str()) : v.size() > count(key.c_str())) return false;
            } else if (key == "properties" || key == "patternProperties" || key == "additionalProperties") {
                if (!v.is_object() || (key != "properties" && schema.contains("properties")) ||
                    (key == "additionalProperties" && schema.contains("patternProperties")))
                    continue;  // checked once, with "properties" (or "patternProperties")
                for (const auto& [name, value] : v.items()) {
                    bool matched = false;
                    if (schema.contains("properties") && schema["properties"].contains(name)) {
                        matched = true;
                        if (!sub(value, schema["properties"][name])) return false;
                    }
                    if (schema.contains("patternProperties"))
                        for (const auto& [pattern, s] : schema["patternProperties"].items()) {
                            bool hit;
                            try {
                                hit = regex_search(pattern, name);
                            } catch (const GrammarError& e) {
                                fail(std::string("unsupported JSON Schema keyword \"patternProperties\": ") + e.what(), at);
                            }
                            if (hit) {
                                matched = true;
                                if (!sub(value, s)) return false;
                            }
                        }
                    if (!matched && schema.contains("additionalProperties") && !sub(value, schema["additionalProperties"]))
                        return false;
                }
            } else if (key == "propertyNames") {
                if (!v.is_object()) continue;
                for (const auto& [name, value] : v.items())
                    if (!sub(Json(name), bound)) return false;
            } else if (key == "dependencies" || key == "dependentRequired" || key == "dependentSchemas") {
                if (!v.is_object()) continue;
                for (const auto& [name, dependency] : bound.items()) {
                    if (!v.contains(name)) continue;
                    if (dependency.is_array()) {
                        for (const Json& other : dependency)
                            if (!v.contains(other.get<std::string>())) return false;
                    } else if (!sub(v, dependency)) {
                        return false;
                    }
                }
            } else if (kRefused.count(key) || key == "format") {
                fail("unsupported JSON Schema keyword \"" + key + "\"", at);
            }
        }
        return true;
    }

    // ---- objects -------------------------------------------------------------------------------------------

    std::string compile_object(const Json& schema, const std::string& at) {
        struct Member {
            std::string name;
            std::string kv;
            bool required;
        };
        Json properties = schema.value("properties", Json::object());
        if (!properties.is_object()) fail("properties must be an object", at);
        Json required = schema.value("required", Json::array());
        if (required.is_boolean()) required = Json::array();  // draft 3's `false`
        if (!required.is_array()) fail("required must be an array", at);
        Json additional = additional_properties(schema);
        if (!additional.is_boolean() && !additional.is_object()) fail("additionalProperties must be a schema", at);
        auto is_required = [&](const std::string& name) {
            return std::find(required.begin(), required.end(), Json(name)) != required.end();
        };

        if (properties.empty() && required.empty() && additional == true) return use("object");
        use("space");
        std::vector<Member> members;
        std::vector<std::string> declared;
        for (const auto& [name, property] : properties.items()) {
            declared.push_back(name);
            std::string property_at = at + "/properties/" + escape_pointer_token(name);
            if (property == false) {
                if (is_required(name)) unsatisfiable("required property \"" + name + "\" is forbidden (schema false)", property_at);
                continue;
            }
            std::string value;
            try {
                value = compile(property, property_at);
            } catch (const Unsatisfiable&) {
                if (is_required(name)) throw;
                continue;  // no value fits: the property may only be absent
            }
            members.push_back({name, key_literal(name) + " space \":\" space " + value, is_required(name)});
        }
        for (const Json& name_json : required) {
            if (!name_json.is_string()) fail("required must list strings", at);
            std::string name = name_json.get<std::string>();
            if (properties.contains(name)) continue;
            if (additional == false) unsatisfiable("required property \"" + name + "\" is not allowed by additionalProperties", at);
            declared.push_back(name);
            members.push_back({name, key_literal(name) + " space \":\" space " +
                                         compile(additional, at + "/additionalProperties"), true});
        }
        std::optional<std::string> extra;
        if (additional != false) {
            std::string value = compile(additional, at + "/additionalProperties");
            extra = rule(at + "-extra", other_key(declared) + " \":\" space " + value);
        }

        // after(i): members i.. once something came before them, each behind a comma.
        std::vector<std::string> after(members.size() + 1);
        after[members.size()] = extra ? "(\",\" space " + *extra + ")*" : "";
        for (size_t i = members.size(); i-- > 0;) {
            std::string part = "\",\" space " + members[i].kv;
            std::string rest = after[i + 1];
            if (i + 1 < members.size()) rest = rule(at + "-after", rest);  // keeps the text linear
            after[i] = members[i].required ? join({part, rest}, " ") : join({"(" + part + ")?", rest}, " ");
        }
        std::vector<std::string> first;
        bool may_be_empty = true;
        for (size_t i = 0; i < members.size(); ++i) {
            first.push_back(join({members[i].kv, after[i + 1]}, " "));
            if (members[i].required) {
                may_be_empty = false;
                break;
            }
        }
        if (may_be_empty && extra) first.push_back(*extra + " (\",\" space " + *extra + ")*");
        std::string body = "\"{\" space ";
        if (!first.empty()) body += "(" + join(first, " | ") + ")" + (may_be_empty ? "?" : "") + " ";
        return rule(at, body + "\"}\" space");
    }

    static std::string key_literal(const std::string& name) { return gbnf_literal(Json(name).dump()); }

    // A property name (with its quotes and trailing space) other than `names`, which are compared by their JSON
    // spelling: a trie of the names, each node a rule that leaves the trie as soon as the text differs.
    std::string other_key(const std::vector<std::string>& names) {
        if (names.empty()) return use("string");
        use("char");
        // The names' JSON spellings, split into characters: one code point, or one escape sequence.
        struct Node {
            std::map<std::string, size_t> children;
            bool terminal = false;
        };
        std::vector<Node> trie(1);
        for (const std::string& name : names) {
            std::string spelled = Json(name).dump();
            spelled = spelled.substr(1, spelled.size() - 2);
            size_t node = 0;
            for (size_t i = 0; i < spelled.size();) {
                size_t n = 1;
                if (spelled[i] == '\\') n = spelled[i + 1] == 'u' ? 6 : 2;
                else
                    while (i + n < spelled.size() && (static_cast<unsigned char>(spelled[i + n]) & 0xC0) == 0x80) ++n;
                std::string character = spelled.substr(i, n);
                i += n;
                auto it = trie[node].children.find(character);
                if (it == trie[node].children.end()) {
                    trie.push_back({});
                    it = trie[node].children.emplace(character, trie.size() - 1).first;
                }
                node = it->second;
            }
            trie[node].terminal = true;
        }
        std::string rest = rule("key-rest", "char* \"\\\"\" space");
        // Rules are named before their bodies exist, so build names first.
        std::vector<std::string> node_names(trie.size());
        for (size_t i = 0; i < trie.size(); ++i) node_names[i] = fresh_name("key-other");
        for (size_t i = 0; i < trie.size(); ++i) {
            std::vector<std::string> alternatives;
            if (!trie[i].terminal) alternatives.push_back("\"\\\"\" space");
            std::string excluded_plain, excluded_escapes;
            for (const auto& [character, child] : trie[i].children) {
                alternatives.push_back(gbnf_literal(character) + " " + node_names[child]);
                if (character[0] == '\\') {
                    if (character[1] != 'u') excluded_escapes += character[1];
                } else {
                    excluded_plain += character;
                }
            }
            std::string plain_class = "[^\"\\\\\\x00-\\x1F";
            for (char c : excluded_plain) {
                if (c == ']' || c == '-' || c == '[') plain_class += '\\';
                plain_class += c;
            }
            alternatives.push_back(plain_class + "] " + rest);
            std::string escapes;
            for (char c : std::string("\"\\/bfnrt"))
                if (excluded_escapes.find(c) == std::string::npos) escapes += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
            std::string escape_alternatives = "\"u\" [0-9a-fA-F]{4}";
            if (!escapes.empty()) escape_alternatives = "[" + escapes + "] | " + escape_alternatives;
            alternatives.push_back("\"\\\\\" (" + escape_alternatives + ") " + rest);
            rules_.emplace_back(node_names[i], join(alternatives, " | "));
        }
        return "\"\\\"\" " + node_names[0];
    }

    // ---- arrays --------------------------------------------------------------------------------------------

    std::string compile_array(const Json& schema, const std::string& at) {
        // Item i is prefix[i] below prefix.size(), `rest` after it.
        std::vector<std::string> prefix;
        Json rest = true;
        std::string rest_at = at + "/items";
        const Json* tuple = nullptr;
        if (schema.contains("prefixItems")) {
            tuple = &schema["prefixItems"];
            rest = schema.value("items", Json(true));
        } else if (schema.contains("items") && schema["items"].is_array()) {
            tuple = &schema["items"];
            rest = schema.value("additionalItems", Json(true));
            rest_at = at + "/additionalItems";
        } else if (schema.contains("items")) {
            rest = schema["items"];
        }
        if (tuple) {
            if (!tuple->is_array()) fail("prefixItems must be an array", at);
            for (size_t i = 0; i < tuple->size(); ++i) {
                if ((*tuple)[i] == false) {
                    rest = false;  // no array reaches past a `false` item
                    break;
                }
                try {
                    prefix.push_back(compile((*tuple)[i], at + (schema.contains("prefixItems") ? "/prefixItems/" : "/items/") + std::to_string(i)));
                } catch (const Unsatisfiable&) {
                    rest = false;  // likewise for an item no value fits
                    break;
                }
            }
        }
        std::string rest_item;
        if (rest != false) {
            try {
                rest_item = compile(rest, rest_at);
            } catch (const Unsatisfiable&) {
                rest = false;
            }
        }
        auto count = [&](const char* key) {
            if (!schema[key].is_number_unsigned() && !(schema[key].is_number() && schema[key].get<double>() >= 0))
                fail(std::string(key) + " must be a non-negative integer", at);
            return static_cast<size_t>(schema[key].get<double>());
        };
        size_t min_items = schema.contains("minItems") ? count("minItems") : 0;
        std::optional<size_t> max_items;
        if (schema.contains("maxItems")) max_items = count("maxItems");
        if (max_items && min_items > *max_items) unsatisfiable("minItems is greater than maxItems", at);
        const size_t k = prefix.size();
        if (rest == false) max_items = std::min(max_items.value_or(k), k);
        if (max_items && min_items > *max_items) return "";  // no array fits; another type may
        if (k == 0 && rest == true && min_items == 0 && !max_items) return use("array");
        use("space");
        if (max_items && *max_items == 0) return rule(at, "\"[\" space \"]\" space");

        // tail(i): the items from i on, each behind a comma, given items 0..i-1.
        std::function<std::string(size_t)> tail = [&](size_t i) -> std::string {
            if (max_items && i >= *max_items) return "";
            if (i >= k) {
                if (rest_item.empty()) return "";
                std::string unit = "(\",\" space " + rest_item + ")";
                std::optional<size_t> max;
                if (max_items) max = *max_items - i;
                return repeat(unit, min_items > i ? min_items - i : 0, max);
            }
            std::string part = join({"\",\" space " + prefix[i], tail(i + 1)}, " ");
            return i < min_items ? part : "(" + part + ")?";
        };
        std::string items = join({k > 0 ? prefix[0] : rest_item, tail(1)}, " ");
        return rule(at, "\"[\" space " + (min_items == 0 ? "(" + items + ")? " : items + " ") + "\"]\" space");
    }

    // `item` (a name or a parenthesized expression) from `min` to `max` times, unbounded without `max`. Counts past
    // 100 go in blocks of 100 (rules), split so that a length parses one way: the grammar stays small however
    // large the bound, and no engine has to expand a long counted repetition.
    static constexpr size_t kMaxCount = 100, kBlock = 100;
    std::string repeat(const std::string& item, size_t min, std::optional<size_t> max) {
        if (!max && min <= kMaxCount) return at_least(item, min);
        if (max && *max <= kMaxCount) {
            if (*max == 0) return "";
            if (min == *max) return min == 1 ? item : item + "{" + std::to_string(min) + "}";
            if (min == 0 && *max == 1) return item + "?";
            return item + "{" + std::to_string(min) + "," + std::to_string(*max) + "}";
        }
        return join({exactly(item, min), max ? up_to(item, *max - min) : item + "*"}, " ");
    }
    std::string exactly(const std::string& item, size_t n) {
        if (n <= kMaxCount) return repeat(item, n, n);
        return join({exactly(rule("block", item + "{" + std::to_string(kBlock) + "}"), n / kBlock), repeat(item, n % kBlock, n % kBlock)}, " ");
    }
    std::string up_to(const std::string& item, size_t n) {
        if (n <= kMaxCount) return repeat(item, 0, n);
        std::string block = rule("block", item + "{" + std::to_string(kBlock) + "}");
        size_t q = n / kBlock, r = n % kBlock;
        return "(" + join({up_to(block, q - 1), repeat(item, 0, kBlock - 1)}, " ") + " | " +
               join({exactly(block, q), repeat(item, 0, r)}, " ") + ")";
    }

    // ---- strings -------------------------------------------------------------------------------------------

    std::string compile_string(const Json& schema, const std::string& at) {
        bool has_length = schema.contains("minLength") || schema.contains("maxLength");
        if (schema.contains("pattern")) {
            if (has_length) fail("unsupported JSON Schema keyword \"minLength\"/\"maxLength\" beside pattern", at);
            if (schema.contains("format")) fail("unsupported JSON Schema keyword \"format\" beside pattern", at);
            if (!schema["pattern"].is_string()) fail("pattern must be a string", at);
            std::string body;
            try {
                body = regex_to_gbnf(schema["pattern"].get<std::string>());
            } catch (const GrammarError& e) {
                fail(std::string("unsupported JSON Schema keyword \"pattern\": ") + e.what(), at);
            }
            use("space");
            return rule(at, "\"\\\"\" " + rule(at + "-pattern", body) + " \"\\\"\" space");
        }
        if (schema.contains("format")) {
            std::string format = schema["format"].is_string() ? schema["format"].get<std::string>() : "";
            static const std::map<std::string, std::string, std::less<>> kFormats = {
                {"date", "date"}, {"time", "time"}, {"date-time", "date-time"}, {"uuid", "uuid"}, {"email", "email"}};
            auto it = kFormats.find(format);
            if (it == kFormats.end()) fail("unsupported JSON Schema keyword \"format\": \"" + format + "\"", at);
            if (has_length) fail("unsupported JSON Schema keyword \"minLength\"/\"maxLength\" beside format", at);
            use("space");
            used_.insert("format-" + it->second);
            return rule(at, "\"\\\"\" format-" + it->second + " \"\\\"\" space");
        }
        if (!has_length) return use("string");
        size_t min = schema.value("minLength", Json(0)).get<size_t>();
        std::optional<size_t> max;
        if (schema.contains("maxLength")) max = schema["maxLength"].get<size_t>();
        if (max && min > *max) unsatisfiable("minLength is greater than maxLength", at);
        use("char");
        use("space");
        return rule(at, "\"\\\"\" " + join({repeat("char", min, max), ""}, "") + " \"\\\"\" space");
    }

    // ---- numbers -------------------------------------------------------------------------------------------

    // The lower and upper bounds, draft 4's boolean exclusiveMinimum/Maximum included.
    void bounds(const Json& schema, const std::string& at, std::optional<Bound>& low, std::optional<Bound>& high) {
        auto number = [&](const char* key) {
            if (!schema[key].is_number()) fail(std::string(key) + " must be a number", at);
            return to_decimal(schema[key]);
        };
        auto tighten_low = [&](Bound b) {
            if (!low || compare(b.value, low->value) > 0 || (compare(b.value, low->value) == 0 && !b.inclusive)) low = b;
        };
        auto tighten_high = [&](Bound b) {
            if (!high || compare(b.value, high->value) < 0 || (compare(b.value, high->value) == 0 && !b.inclusive)) high = b;
        };
        bool draft4_low = schema.contains("exclusiveMinimum") && schema["exclusiveMinimum"].is_boolean();
        bool draft4_high = schema.contains("exclusiveMaximum") && schema["exclusiveMaximum"].is_boolean();
        if (schema.contains("minimum"))
            tighten_low({number("minimum"), !(draft4_low && schema["exclusiveMinimum"].get<bool>())});
        if (schema.contains("maximum"))
            tighten_high({number("maximum"), !(draft4_high && schema["exclusiveMaximum"].get<bool>())});
        if (schema.contains("exclusiveMinimum") && !draft4_low) tighten_low({number("exclusiveMinimum"), false});
        if (schema.contains("exclusiveMaximum") && !draft4_high) tighten_high({number("exclusiveMaximum"), false});
    }

    std::string compile_number(const Json& schema, const std::string& at, bool integer) {
        std::optional<Bound> low, high;
        bounds(schema, at, low, high);
        if (low && high) {
            int c = compare(low->value, high->value);
            if (c > 0 || (c == 0 && !(low->inclusive && high->inclusive)))
                unsatisfiable("minimum is greater than maximum", at);
        }
        if (!low && !high) return use(integer ? "integer" : "number");
        use("space");
        if (integer) {
            // The integers in the interval, as an inclusive interval of integers.
            std::optional<Decimal> lo, hi;
            if (low) lo = low->inclusive ? ceil_of(low->value) : add_one(floor_of(low->value));
            if (high) hi = high->inclusive ? floor_of(high->value) : negated(add_one(negated(ceil_of(high->value))));
            if (lo && hi && compare(*lo, *hi) > 0) unsatisfiable("no integer lies between minimum and maximum", at);
            std::vector<std::string> alternatives;
            // Non-negative: [max(lo, 0), hi]; negative, by magnitude: [max(-hi, 0), -lo] (with "-0").
            if (!hi || !hi->negative) {
                std::string from = lo && !lo->negative ? lo->integer : "0";
                std::optional<std::string> to;
                if (hi) to = hi->integer;
                std::string r = integer_range(from, to);
                if (!r.empty()) alternatives.push_back(r);
            }
            if (!lo || lo->negative || lo->zero()) {
                std::string from = hi && hi->negative ? hi->integer : "0";
                std::optional<std::string> to;
                if (lo) to = lo->integer;
                std::string r = integer_range(from, to);
                if (!r.empty()) alternatives.push_back("\"-\" " + r);
            }
            return rule(at, "(" + join(alternatives, " | ") + ") space");
        }
        std::vector<std::string> alternatives;
        // Non-negative values: magnitudes in [max(low, 0), high]; negative ones: [max(-high, 0), -low].
        Bound zero{Decimal{}, true};
        {
            Bound from = low && !low->value.negative ? *low : zero;
            std::optional<Bound> to = high;
            if (!to || !to->value.negative) {
                std::string r = magnitude_range(from, to, at);
                if (!r.empty()) alternatives.push_back(r);
            }
        }
        {
            std::optional<Bound> neg_high;
            if (low) neg_high = Bound{negated(low->value), low->inclusive};
            bool high_below_one = high && (high->value.negative || high->value.zero());
            Bound from = high_below_one ? Bound{negated(high->value), high->inclusive} : zero;
            if (!neg_high || !neg_high->value.negative) {
                std::string r = magnitude_range(from, neg_high, at);
                if (!r.empty()) alternatives.push_back("\"-\" " + r);
            }
        }
        if (alternatives.empty()) unsatisfiable("no number lies between minimum and maximum", at);
        return rule(at, "(" + join(alternatives, " | ") + ") space");
    }

    // Plain decimals (no sign, no exponent) in the interval from `low` to `high` (unbounded without it).
    std::string magnitude_range(const Bound& low, const std::optional<Bound>& high, const std::string& at) {
        if (high) {
            int c = compare(low.value, high->value);
            if (c > 0 || (c == 0 && !(low.inclusive && high->inclusive))) return "";
        }
        const std::string& li = low.value.integer;
        std::vector<std::string> alternatives;
        auto add = [&](const std::string& integer_part, const std::string& fraction) {
            if (!integer_part.empty() && !fraction.empty()) alternatives.push_back(integer_part + " " + fraction);
        };
        if (high && li == high->value.integer) {
            add(gbnf_literal(li), fraction_range(low, high, at));
        } else {
            add(gbnf_literal(li), fraction_range(low, std::nullopt, at));
            std::optional<std::string> middle_high;  // integer parts strictly between the bounds'
            if (high) middle_high = decrement(high->value.integer);
            add(integer_range(increment(li), middle_high), "(\".\" [0-9]+)?");
            if (high) add(gbnf_literal(high->value.integer), fraction_range(std::nullopt, high, at));
        }
        return alternatives.empty() ? "" : alternation(alternatives);
    }

    // The fraction after an integer part (nothing, or "." and digits) keeping the value within the bounds'
    // fractions; a bound passed is tight (its integer part equals the value's). Empty when nothing fits.
    // States: digits read (capped where the bounds' digits run out), and whether each bound is still tight.
    std::string fraction_range(const std::optional<Bound>& low, const std::optional<Bound>& high,
                               const std::string& at) {
        const std::string lo = low ? low->value.fraction : "", hi = high ? high->value.fraction : "";
        const size_t cap = std::max({lo.size(), hi.size(), size_t{1}});
        auto state = [&](size_t k, bool tl, bool th) { return (std::min(k, cap) * 2 + tl) * 2 + th; };
        // Past its last digit an inclusive low bound is met whatever follows.
        auto loose = [&](size_t k, bool tl) { return tl && !(k >= lo.size() && low->inclusive); };
        const size_t n_states = (cap + 1) * 4;
        auto can_end = [&](size_t k, bool tl, bool th) {
            bool ok = true;
            if (tl) ok = ok && k >= lo.size() && low->inclusive;
            if (th) ok = ok && (k < hi.size() || high->inclusive);
            return ok;
        };
        struct Step {
            char first, last;
            size_t k;
            bool tl, th;
        };
        auto steps = [&](size_t k, bool tl, bool th) {
            std::vector<Step> out;
            char lo_d = tl && k < lo.size() ? lo[k] : '0', hi_d = th && k < hi.size() ? hi[k] : (th ? '0' : '9');
            char first = tl ? lo_d : '0', last = th ? hi_d : '9';
            for (char d = first; d <= last; ++d) {
                bool ntl = loose(k + 1, tl && d == lo_d), nth = th && d == hi_d;
                if (!out.empty() && out.back().tl == ntl && out.back().th == nth && out.back().last == d - 1)
                    out.back().last = d;
                else
                    out.push_back({d, d, k + 1, ntl, nth});
            }
            return out;
        };
        // Live states: those from which some digit string ends acceptably.
        std::vector<char> live(n_states, 0);
        for (bool changed = true; changed;) {
            changed = false;
            for (size_t k = 1; k <= cap; ++k)
                for (int tl = 0; tl <= int(low.has_value()); ++tl)
                    for (int th = 0; th <= int(high.has_value()); ++th) {
                        size_t s = state(k, tl, th);
                        if (live[s]) continue;
                        bool ok = can_end(k, tl, th);
                        for (const Step& st : steps(k, tl, th)) ok = ok || live[state(st.k, st.tl, st.th)];
                        if (ok) live[s] = 1, changed = true;
                    }
        }
        std::vector<std::string> names(n_states);
        std::vector<std::pair<size_t, std::string>> pending;
        // A state's expression: the digits it may take next, each followed by the state they lead to.
        std::function<std::string(size_t, bool, bool)> state_rule = [&](size_t k, bool tl, bool th) -> std::string {
            if (!tl && !th) return "[0-9]*";
            size_t s = state(k, tl, th);
            if (!names[s].empty()) return names[s];
            names[s] = fresh_name(at + "-fraction");
            std::vector<std::string> alternatives;
            if (can_end(k, tl, th)) alternatives.push_back("\"\"");
            for (const Step& st : steps(k, tl, th))
                if (live[state(st.k, st.tl, st.th)])
                    alternatives.push_back(digit_class(st.first, st.last) + " " + state_rule(st.k, st.tl, st.th));
            pending.emplace_back(s, join(alternatives, " | "));
            return names[s];
        };
        bool tl = loose(0, low.has_value()), th = high.has_value();
        std::vector<std::string> first_digit;
        for (const Step& st : steps(0, tl, th))
            if (live[state(st.k, st.tl, st.th)])
                first_digit.push_back(digit_class(st.first, st.last) + " " + state_rule(st.k, st.tl, st.th));
        for (auto& [s, body] : pending) rules_.emplace_back(names[s], body);
        std::string fraction = first_digit.empty() ? "" : "\".\" " + alternation(first_digit);
        if (can_end(0, tl, th)) return fraction.empty() ? "\"\"" : "(" + fraction + ")?";
        return fraction;
    }

    // ---- the shared rules ----------------------------------------------------------------------------------

    std::string primitives() {
        // Digits of a number without bounds: any count for validation, llama.cpp's 16 for generation.
        const std::vector<std::pair<std::string, std::string>> kDigits = {
            {"integral-part", options_.validation ? "\"0\" | [1-9] [0-9]*" : "\"0\" | [1-9] [0-9]{0,15}"},
            {"fraction-part", options_.validation ? "[0-9]+" : "[0-9]{1,16}"},
        };
        static const std::vector<std::pair<std::string, std::string>> kRules = {
            {"value", "object | array | string | number | boolean | null"},
            {"object", "\"{\" space (string \":\" space value (\",\" space string \":\" space value)*)? \"}\" space"},
            {"array", "\"[\" space (value (\",\" space value)*)? \"]\" space"},
            {"string", "\"\\\"\" char* \"\\\"\" space"},
            // One character of a JSON string: a surrogate pair written as escapes is one character.
            {"char", "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | "
                     "[dD] [0-7] [0-9a-fA-F]{2}) | \"u\" [dD] [89abAB] [0-9a-fA-F]{2} \"\\\\u\" [dD] [c-fC-F] "
                     "[0-9a-fA-F]{2})"},
            {"number", "\"-\"? integral-part (\".\" fraction-part)? ([eE] [-+]? fraction-part)? space"},
            {"integer", "\"-\"? integral-part space"},
            {"boolean", "(\"true\" | \"false\") space"},
            {"null", "\"null\" space"},
            {"space", "| \" \" | \"\\n\"{1,2} [ \\t]{0,20}"},
            // RFC 3339, with the days of each month (and of February in leap years).
            {"format-date", "format-year \"-\" (\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | "
                            "format-year \"-\" (\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | "
                            "format-year \"-02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]) | format-leap-year \"-02-29\""},
            {"format-year", "[0-9]{3} [1-9] | [0-9]{2} [1-9] \"0\" | [0-9] [1-9] \"00\" | [1-9] \"000\""},
            {"format-leap-year", "[0-9]{2} (\"0\" [48] | [2468] [048] | [13579] [26]) | "
                                 "(\"0\" [48] | [2468] [048] | [13579] [26]) \"00\""},
            {"format-time", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]+)? "
                            "([zZ] | [-+] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])"},
            {"format-date-time", "format-date [tT] format-time"},
            {"format-uuid", "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
                            "[0-9a-fA-F]{12}"},
            {"format-email", "format-atom (\".\" format-atom)* \"@\" format-label (\".\" format-label)+"},
            {"format-atom", "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~\\-]+"},
            {"format-label", "[a-zA-Z0-9] ([a-zA-Z0-9\\-]* [a-zA-Z0-9])?"},
        };
        static const std::map<std::string, std::vector<std::string>, std::less<>> kNeeds = {
            {"value", {"object", "array", "string", "number", "boolean", "null"}},
            {"object", {"string", "value", "space"}}, {"array", {"value", "space"}}, {"string", {"char", "space"}},
            {"number", {"integral-part", "fraction-part", "space"}}, {"integer", {"integral-part", "space"}},
            {"boolean", {"space"}}, {"null", {"space"}},
            {"format-date", {"format-year", "format-leap-year"}}, {"format-date-time", {"format-date", "format-time"}},
            {"format-email", {"format-atom", "format-label"}}};
        for (bool grew = true; grew;) {
            grew = false;
            for (const std::string& name : std::vector<std::string>(used_.begin(), used_.end()))
                if (auto it = kNeeds.find(name); it != kNeeds.end())
                    for (const std::string& need : it->second) grew |= used_.insert(need).second;
        }
        std::string out;
        for (const auto* rules : {&kDigits, &kRules})
            for (const auto& [name, body] : *rules)
                if (used_.count(name)) out += name + " ::= " + body + "\n";
        return out;
    }

    Json root_;
    JsonSchemaOptions options_;
    std::vector<std::pair<std::string, std::string>> rules_;
    std::unordered_map<std::string, std::string> by_body_;
    std::unordered_map<std::string, std::string> ref_rules_;
    std::unordered_map<std::string, std::string> schema_rules_;
    std::set<std::string> names_ = {"root", "value", "object", "array", "string", "char", "number", "integer",
                                    "integral-part", "fraction-part", "boolean", "null", "space"};
    std::set<std::string> used_;
    int ref_depth_ = 0;
    int expand_depth_ = 0;
};

}  // namespace

std::string json_schema_to_gbnf(std::string_view schema_json, const JsonSchemaOptions& options) {
    if (schema_json.size() > kMaxGrammarBytes) throw GrammarError("JSON Schema larger than 256 KiB");
    Json schema = Json::parse(schema_json, nullptr, false);
    if (schema.is_discarded()) throw GrammarError("JSON Schema is not valid JSON");
    try {
        return SchemaCompiler(std::move(schema), options).compile_root();
    } catch (const nlohmann::json::exception& e) {
        throw GrammarError(std::string("malformed JSON Schema: ") + e.what());
    }
}

}  // namespace cellm::grammar
