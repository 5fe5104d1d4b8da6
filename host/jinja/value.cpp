#include "jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace cellm::jinja {

const Value* Args::get(std::size_t index, std::string_view name) const {
    if (index < positional.size()) return &positional[index];
    for (const auto& [key, value] : keywords)
        if (key == name) return &value;
    return nullptr;
}

Value Value::undefined(std::string hint) {
    Value v;
    if (!hint.empty()) v.ptr_ = std::make_shared<const std::string>(std::move(hint));
    return v;
}

Value Value::none() {
    Value v;
    v.kind_ = Kind::None;
    return v;
}

Value::Value(bool b) : kind_(Kind::Bool), i_(b ? 1 : 0) {}
Value::Value(std::int64_t i) : kind_(Kind::Int), i_(i) {}
Value::Value(double d) : kind_(Kind::Float), d_(d) {}
Value::Value(std::string s, bool safe)
    : kind_(Kind::Str), flag_(safe), ptr_(std::make_shared<const std::string>(std::move(s))) {}
namespace {

template <typename Items, typename Depth>
std::uint16_t nesting(const Items& items, Depth depth_of) {
    int deepest = 0;
    for (const auto& item : items) deepest = std::max(deepest, depth_of(item));
    if (deepest + 1 > kMaxValueDepth) throw Fault("value nested too deeply (over 512 levels)");
    return static_cast<std::uint16_t>(deepest + 1);
}

}  // namespace

Value::Value(Array items, bool tuple) : kind_(Kind::List), flag_(tuple) {
    depth_ = nesting(items, [](const Value& v) { return int{v.depth_}; });
    ptr_ = std::make_shared<const Array>(std::move(items));
}

Value::Value(Object items) : kind_(Kind::Dict) {
    depth_ = nesting(items, [](const std::pair<Value, Value>& kv) {
        return std::max(int{kv.first.depth_}, int{kv.second.depth_});
    });
    ptr_ = std::make_shared<const Object>(std::move(items));
}

Value::Value(std::shared_ptr<Namespace> ns) : kind_(Kind::Ns), ptr_(std::move(ns)) {}
Value::Value(std::shared_ptr<LoopState> loop) : kind_(Kind::Loop), ptr_(std::move(loop)) {}
Value::Value(std::shared_ptr<Generator> generator) : kind_(Kind::Generator), ptr_(std::move(generator)) {}
Value::Value(std::shared_ptr<const Callable> fn) : kind_(Kind::Function), ptr_(std::move(fn)) {}

Value Value::from_json(const nlohmann::ordered_json& j, int depth) {
    if (depth >= kMaxValueDepth) throw Fault("context nested too deeply (over 512 levels)");
    switch (j.type()) {
        case nlohmann::ordered_json::value_t::null: return none();
        case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
        case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<std::int64_t>());
        case nlohmann::ordered_json::value_t::number_unsigned: {
            auto u = j.get<std::uint64_t>();
            if (u > static_cast<std::uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
            return Value(static_cast<std::int64_t>(u));
        }
        case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
        case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
        case nlohmann::ordered_json::value_t::array: {
            Array items;
            items.reserve(j.size());
            for (const auto& e : j) items.push_back(from_json(e, depth + 1));
            return Value(std::move(items));
        }
        case nlohmann::ordered_json::value_t::object: {
            Object items;
            items.reserve(j.size());
            for (const auto& [k, e] : j.items()) items.emplace_back(Value(k), from_json(e, depth + 1));
            return Value(std::move(items));
        }
        default: return undefined();
    }
}

std::string Value::undefined_hint() const {
    if (const auto* s = std::get_if<StringPtr>(&ptr_)) return **s;
    return "value is undefined";
}

bool Value::truthy() const {
    switch (kind_) {
        case Kind::Undefined: case Kind::None: return false;
        case Kind::Bool: case Kind::Int: return i_ != 0;
        case Kind::Float: return d_ != 0.0;
        case Kind::Str: return !str().empty();
        case Kind::List: return !array().empty();
        case Kind::Dict: return !object().empty();
        default: return true;
    }
}

std::string float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
    // Shortest round-trip digits, laid out as Python's repr: positional for exponents -4..15, else d.ddde+XX.
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string sci(buf, end);
    std::string sign;
    if (sci[0] == '-') {
        sign = "-";
        sci.erase(0, 1);
    }
    auto e = sci.find('e');
    std::string mantissa = sci.substr(0, e);
    int exponent = std::stoi(sci.substr(e + 1));
    std::string digits;
    for (char c : mantissa)
        if (c != '.') digits += c;
    if (exponent < -4 || exponent >= 16) {
        std::string out = sign + digits.substr(0, 1);
        if (digits.size() > 1) out += "." + digits.substr(1);
        char ebuf[16];
        std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
        return out + ebuf;
    }
    if (exponent < 0) return sign + "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
    auto point = static_cast<std::size_t>(exponent) + 1;
    if (digits.size() <= point) return sign + digits + std::string(point - digits.size(), '0') + ".0";
    return sign + digits.substr(0, point) + "." + digits.substr(point);
}

namespace {

// Python's repr() of a str: single quotes unless the text holds ' and no ".
std::string string_repr(const std::string& s) {
    char quote = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
    std::string out(1, quote);
    for (unsigned char c : s) {
        if (c == static_cast<unsigned char>(quote) || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    return out + quote;
}

}  // namespace

std::string Value::to_string() const {
    switch (kind_) {
        case Kind::Undefined: return "";
        case Kind::Str: return str();
        default: return repr();
    }
}

std::string Value::repr(int depth) const {
    if (depth > kMaxValueDepth) throw Fault("value nested too deeply to print");
    switch (kind_) {
        case Kind::Undefined: return "Undefined";
        case Kind::None: return "None";
        case Kind::Bool: return i_ ? "True" : "False";
        case Kind::Int: return std::to_string(i_);
        case Kind::Float: return float_repr(d_);
        case Kind::Str: return flag_ ? "Markup(" + string_repr(str()) + ")" : string_repr(str());
        case Kind::List: {
            std::string out = flag_ ? "(" : "[";
            const Array& items = array();
            for (std::size_t i = 0; i < items.size(); ++i) {
                if (i) out += ", ";
                out += items[i].repr(depth + 1);
            }
            if (flag_ && items.size() == 1) out += ",";
            return out + (flag_ ? ")" : "]");
        }
        case Kind::Dict: {
            std::string out = "{";
            bool first = true;
            for (const auto& [k, v] : object()) {
                if (!first) out += ", ";
                first = false;
                out += k.repr(depth + 1) + ": " + v.repr(depth + 1);
            }
            return out + "}";
        }
        case Kind::Ns: {
            std::string out = "<Namespace {";
            bool first = true;
            for (const auto& [k, v] : ns().attributes) {
                if (!first) out += ", ";
                first = false;
                out += k.repr(depth + 1) + ": " + v.repr(depth + 1);
            }
            return out + "}>";
        }
        case Kind::Loop:
            return "<LoopContext " + std::to_string(loop().index0 + 1) + "/" + std::to_string(loop().items.array().size()) + ">";
        case Kind::Generator: return "<generator object>";
        case Kind::Function: return "<function " + callable().name + ">";
    }
    return "";
}

std::string Value::type_name() const {
    switch (kind_) {
        case Kind::Undefined: return "Undefined";
        case Kind::None: return "NoneType";
        case Kind::Bool: return "bool";
        case Kind::Int: return "int";
        case Kind::Float: return "float";
        case Kind::Str: return flag_ ? "Markup" : "str";
        case Kind::List: return flag_ ? "tuple" : "list";
        case Kind::Dict: return "dict";
        case Kind::Ns: return "Namespace";
        case Kind::Loop: return "LoopContext";
        case Kind::Generator: return "generator";
        case Kind::Function: return "function";
    }
    return "";
}

const Value* Value::find(const Value& key) const {
    for (const auto& [k, v] : object())
        if (equals(k, key)) return &v;
    return nullptr;
}

bool equals(const Value& a, const Value& b) {
    using K = Value::Kind;
    if (a.is_number() && b.is_number()) {
        if (a.kind() == K::Float || b.kind() == K::Float) return a.as_double() == b.as_double();
        return a.as_int() == b.as_int();
    }
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
        case K::Undefined: case K::None: return true;
        case K::Str: return a.str() == b.str();
        case K::List: {
            if (a.is_tuple() != b.is_tuple() || a.array().size() != b.array().size()) return false;
            for (std::size_t i = 0; i < a.array().size(); ++i)
                if (!equals(a.array()[i], b.array()[i])) return false;
            return true;
        }
        case K::Dict: {
            if (a.object().size() != b.object().size()) return false;
            for (const auto& [k, v] : a.object()) {
                const Value* other = b.find(k);
                if (other == nullptr || !equals(v, *other)) return false;
            }
            return true;
        }
        case K::Ns: return &a.ns() == &b.ns();
        case K::Loop: return &a.loop() == &b.loop();
        case K::Generator: return &a.generator() == &b.generator();
        case K::Function: return &a.callable() == &b.callable();
        default: return false;
    }
}

bool less(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.kind() == Value::Kind::Float || b.kind() == Value::Kind::Float) return a.as_double() < b.as_double();
        return a.as_int() < b.as_int();
    }
    if (a.is_string() && b.is_string()) return a.str() < b.str();
    if (a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
        const Array& x = a.array();
        const Array& y = b.array();
        for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (equals(x[i], y[i])) continue;
            return less(x[i], y[i]);
        }
        return x.size() < y.size();
    }
    throw Fault("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

}  // namespace cellm::jinja
