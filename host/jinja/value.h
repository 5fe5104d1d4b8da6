// The runtime value of the Jinja interpreter: what Python objects a chat template meets under jinja2
// (Undefined, None, bool, int, float, str and Markup, list and tuple, dict in insertion order) plus the
// interpreter's own objects (namespace(), the loop variable, macros, builtin functions and bound methods).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace cellm::jinja {

class Value;
class Interpreter;

// A failure while evaluating; the statement that caught it adds the template line (TemplateError).
class Fault : public std::runtime_error {
public:
    explicit Fault(const std::string& message) : std::runtime_error(message) {}
};

using Array = std::vector<Value>;
using Object = std::vector<std::pair<Value, Value>>;  // insertion order, unique keys

// Positional and keyword arguments of a call, evaluated.
struct Args {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> keywords;

    // The argument at `index` or named `name`; nullptr when absent.
    const Value* get(std::size_t index, std::string_view name) const;
};

// Something a template can call: a builtin, a bound method, a macro, caller().
struct Callable {
    std::string name;
    std::function<Value(Interpreter&, const Args&)> call;
};

struct Namespace;
struct LoopState;
struct Generator;

// Lists and dicts nest at most this deep, so printing, comparing and freeing them stay shallow; building a
// deeper one is a Fault.
constexpr int kMaxValueDepth = 512;

class Value {
public:
    enum class Kind : std::uint8_t { Undefined, None, Bool, Int, Float, Str, List, Dict, Ns, Loop, Generator, Function };

    Value() = default;  // undefined
    static Value undefined(std::string hint = {});
    static Value none();
    Value(bool b);
    Value(std::int64_t i);
    Value(int i) : Value(static_cast<std::int64_t>(i)) {}
    Value(double d);
    Value(std::string s, bool safe = false);
    Value(const char* s) : Value(std::string(s)) {}
    Value(Array items, bool tuple = false);
    Value(Object items);
    Value(std::shared_ptr<Namespace> ns);
    Value(std::shared_ptr<LoopState> loop);
    Value(std::shared_ptr<Generator> generator);
    Value(std::shared_ptr<const Callable> fn);

    // Fault when the JSON nests deeper than kMaxValueDepth.
    static Value from_json(const nlohmann::ordered_json& j, int depth = 0);

    Kind kind() const { return kind_; }
    bool is_undefined() const { return kind_ == Kind::Undefined; }
    bool is_none() const { return kind_ == Kind::None; }
    bool is_bool() const { return kind_ == Kind::Bool; }
    bool is_int() const { return kind_ == Kind::Int || kind_ == Kind::Bool; }  // bool is an int in Python
    bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
    bool is_string() const { return kind_ == Kind::Str; }
    bool is_array() const { return kind_ == Kind::List; }
    bool is_tuple() const { return kind_ == Kind::List && flag_; }
    bool is_object() const { return kind_ == Kind::Dict; }
    bool is_safe() const { return kind_ == Kind::Str && flag_; }  // Markup
    bool is_callable() const { return kind_ == Kind::Function; }

    bool as_bool() const { return i_ != 0; }
    std::int64_t as_int() const { return i_; }
    double as_double() const { return kind_ == Kind::Float ? d_ : static_cast<double>(i_); }
    const std::string& str() const { return *std::get<StringPtr>(ptr_); }
    const Array& array() const { return *std::get<ArrayPtr>(ptr_); }
    const Object& object() const { return *std::get<ObjectPtr>(ptr_); }
    Namespace& ns() const { return *std::get<std::shared_ptr<Namespace>>(ptr_); }
    const LoopState& loop() const { return *std::get<std::shared_ptr<LoopState>>(ptr_); }
    Generator& generator() const { return *std::get<std::shared_ptr<Generator>>(ptr_); }
    const Callable& callable() const { return *std::get<CallablePtr>(ptr_); }
    // Why an undefined value is undefined ("'dict object' has no attribute 'x'"), for the error its use raises.
    std::string undefined_hint() const;

    // Python's truthiness.
    bool truthy() const;
    // Python's str(): what `{{ x }}` prints ("" for undefined).
    std::string to_string() const;
    // Python's repr(), as str() of a list prints its items. `depth` guards namespaces that hold themselves.
    std::string repr(int depth = 0) const;
    // Python's type name, for error messages ("str", "dict", ...).
    std::string type_name() const;

    // A dict's value for `key`; nullptr when absent.
    const Value* find(const Value& key) const;

private:
    using StringPtr = std::shared_ptr<const std::string>;
    using ArrayPtr = std::shared_ptr<const Array>;
    using ObjectPtr = std::shared_ptr<const Object>;
    using CallablePtr = std::shared_ptr<const Callable>;

    Kind kind_ = Kind::Undefined;
    bool flag_ = false;     // tuple for arrays, Markup for strings
    std::uint16_t depth_ = 0;  // containers: how deep they nest
    std::int64_t i_ = 0;    // int, and bool as 0 or 1
    double d_ = 0;
    std::variant<std::monostate, StringPtr, ArrayPtr, ObjectPtr, std::shared_ptr<Namespace>,
                 std::shared_ptr<LoopState>, std::shared_ptr<Generator>, CallablePtr>
        ptr_;  // the string (or an undefined value's hint), container or object
};

// namespace(): the one mutable object, shared by every reference (`set ns.x = ...`).
struct Namespace {
    Object attributes;
};

// The state of one `for` loop, read through `loop.*`.
// What jinja2's map/select/selectattr/unique/... filters return: a one-shot iterator, which has no len(), cannot
// be indexed or turned into JSON, and is empty once iterated.
struct Generator {
    std::function<Array(Interpreter&)> produce;  // the filter's work, run when first consumed (then emptied)
    Array items;
    std::size_t next = 0;  // items before it were consumed
};

struct LoopState {
    Value items;  // the sequence being iterated (after the loop's `if`), an array
    std::size_t index0 = 0;
};

// Python's ==, across int, float and bool; list and tuple differ.
bool equals(const Value& a, const Value& b);
// Python's <; Fault for types that do not order.
bool less(const Value& a, const Value& b);

// Python's repr() of a float ("1.0", "0.1", "1e+20").
std::string float_repr(double d);

}  // namespace cellm::jinja
