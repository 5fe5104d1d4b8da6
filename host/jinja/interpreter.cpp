// Evaluation: the tree of parser.h over the values of value.h, with jinja2's semantics under transformers'
// ImmutableSandboxedEnvironment (default Undefined, no mutating methods on lists and dicts), its filters, tests,
// Python's str/dict/list methods and the globals chat templates call.
#include "jinja/parser.h"
#include "jinja/template.h"
#include "jinja/value.h"
#include "tokenize/utf8.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <limits>
#include <unordered_map>

namespace cellm::jinja {

namespace {

// Bounds on one render, so a hostile template ends in an error: output bytes (captured output included),
// the size of any one string, nesting of evaluation (macro recursion included) and work (loop iterations plus
// items that filters walk).
constexpr std::size_t kMaxOutputBytes = 64u << 20;
constexpr std::size_t kMaxStringBytes = 64u << 20;
constexpr int kMaxDepth = 512;
// Real templates take thousands of steps for a long conversation; a million keeps a hostile one under a second
// even under the sanitizers (ten million took over ten under ASan).
constexpr std::uint64_t kMaxSteps = 1'000'000;
// Building a string costs a step per this many bytes, so the string and output limits still come before the work
// limit for a template that only makes text.
constexpr std::uint64_t kBytesPerStep = 256;
constexpr std::size_t kMaxListItems = 1'000'000;
constexpr std::int64_t kMaxRange = 100'000;  // jinja2's sandbox refuses longer range()s

// ---- UTF-8: Python's str methods count code points

std::u32string decode(const std::string& s) {
    std::u32string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size();) {
        auto c = static_cast<unsigned char>(s[i]);
        std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
        if (i + n > s.size()) n = 1;
        char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
        for (std::size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
        out += cp;
        i += n;
    }
    return out;
}

std::string encode(const std::u32string& s) {
    std::string out;
    out.reserve(s.size());
    for (char32_t cp : s) utf8::append(out, static_cast<std::uint32_t>(cp));
    return out;
}

std::size_t code_points(const std::string& s) {
    std::size_t n = 0;
    for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
}

// str.isspace()
bool is_py_space(char32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Latin Extended-A pairs letters as upper/lower neighbours: +1 when `c` is upper (its lower is c + 1), -1 when
// lower, 0 when it has no simple pair.
int latin_extended_a_case(char32_t c) {
    if ((c >= 0x100 && c <= 0x12F) || (c >= 0x132 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return c % 2 == 0 ? 1 : -1;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return c % 2 == 1 ? 1 : -1;
    return 0;
}

// Case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic; other letters pass unchanged.
char32_t to_upper(char32_t c) {
    if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
    if ((c >= 0xE0 && c <= 0xFE && c != 0xF7) || (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) || (c >= 0x430 && c <= 0x44F))
        return c - 32;
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    if (latin_extended_a_case(c) < 0) return c - 1;
    switch (c) {
        case 0xB5: return 0x39C;
        case 0xFF: return 0x178;
        case 0x131: return 'I';
        case 0x17F: return 'S';
        case 0x3C2: return 0x3A3;
        case 0x3AC: return 0x386;
        case 0x3AD: case 0x3AE: case 0x3AF: return c - 37;
        case 0x3CC: return 0x38C;
        case 0x3CD: case 0x3CE: return c - 63;
        default: return c;
    }
}

char32_t to_lower(char32_t c) {
    if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
    if ((c >= 0xC0 && c <= 0xDE && c != 0xD7) || (c >= 0x391 && c <= 0x3AB && c != 0x3A2) || (c >= 0x410 && c <= 0x42F))
        return c + 32;
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    if (latin_extended_a_case(c) > 0) return c + 1;
    switch (c) {
        case 0x178: return 0xFF;
        case 0x386: return 0x3AC;
        case 0x388: case 0x389: case 0x38A: return c + 37;
        case 0x38C: return 0x3CC;
        case 0x38E: case 0x38F: return c + 63;
        default: return c;
    }
}

bool is_alpha(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0xC0; }
bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }

bool is_ascii(const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

std::string upper(const std::string& s) {
    if (is_ascii(s)) {
        std::string out = s;
        for (char& c : out)
            if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
        return out;
    }
    std::u32string out;
    for (char32_t c : decode(s)) {
        if (c == 0xDF) out += U"SS";  // Python's upper() of sharp s
        else out += to_upper(c);
    }
    return encode(out);
}

std::string lower(const std::string& s) {
    if (is_ascii(s)) {
        std::string out = s;
        for (char& c : out)
            if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
        return out;
    }
    std::u32string u = decode(s);
    for (char32_t& c : u) c = to_lower(c);
    return encode(u);
}

std::string capitalize(const std::string& s) {
    std::u32string u = decode(s);
    for (std::size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? to_upper(u[i]) : to_lower(u[i]);
    return encode(u);
}

// str.title(): a letter after a non-letter is upper, other letters lower.
std::string py_title(const std::string& s) {
    std::u32string u = decode(s);
    bool prev_cased = false;
    for (char32_t& c : u) {
        c = prev_cased ? to_lower(c) : to_upper(c);
        prev_cased = is_alpha(c);
    }
    return encode(u);
}

std::string html_escape(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&#34;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
        }
    }
    return out;
}

// str.splitlines()
std::vector<std::string> split_lines(const std::string& s) {
    std::vector<std::string> lines;
    std::u32string u = decode(s);
    std::u32string line;
    for (std::size_t i = 0; i < u.size(); ++i) {
        char32_t c = u[i];
        if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
            c == 0x2028 || c == 0x2029) {
            if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
            lines.push_back(encode(line));
            line.clear();
        } else {
            line += c;
        }
    }
    if (!line.empty()) lines.push_back(encode(line));
    return lines;
}

std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
    std::u32string u = decode(s);
    std::u32string set;
    bool whitespace = chars == nullptr || chars->is_none();
    if (!whitespace) {
        if (!chars->is_string()) throw Fault("strip arg must be None or str");
        set = decode(chars->str());
    }
    auto strippable = [&](char32_t c) { return whitespace ? is_py_space(c) : set.find(c) != std::u32string::npos; };
    std::size_t b = 0, e = u.size();
    if (left)
        while (b < e && strippable(u[b])) ++b;
    if (right)
        while (e > b && strippable(u[e - 1])) --e;
    return encode(u.substr(b, e - b));
}

// ---- JSON as Python's json.dumps writes it

struct JsonStyle {
    bool ensure_ascii = false;
    bool indented = false;
    std::string indent;
    std::string item_separator = ", ";
    std::string key_separator = ": ";
    bool sort_keys = false;
};

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
    out += '"';
    auto hex4 = [&](unsigned v) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "\\u%04x", v & 0xFFFFu);
        out += buf;
    };
    for (std::size_t i = 0; i < s.size(); ++i) {
        auto c = static_cast<unsigned char>(s[i]);
        switch (c) {
            case '"': out += "\\\""; continue;
            case '\\': out += "\\\\"; continue;
            case '\n': out += "\\n"; continue;
            case '\r': out += "\\r"; continue;
            case '\t': out += "\\t"; continue;
            case '\b': out += "\\b"; continue;
            case '\f': out += "\\f"; continue;
            default: break;
        }
        if (c < 0x20) {
            hex4(c);
        } else if (c >= 0x80 && ensure_ascii) {
            std::size_t n = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
            std::u32string cp = decode(s.substr(i, n));
            i += n - 1;
            char32_t v = cp.empty() ? 0xFFFD : cp[0];
            if (v >= 0x10000) {
                v -= 0x10000;
                hex4(0xD800 + (v >> 10));
                hex4(0xDC00 + (v & 0x3FF));
            } else {
                hex4(v);
            }
        } else {
            out += static_cast<char>(c);
        }
    }
    out += '"';
}

void to_json(std::string& out, const Value& v, const JsonStyle& style, int level) {
    if (out.size() > kMaxStringBytes) throw Fault("tojson output too large");
    auto newline = [&](int depth) {
        if (!style.indented) return;
        out += '\n';
        for (int i = 0; i < depth; ++i) out += style.indent;
    };
    switch (v.kind()) {
        case Value::Kind::None: out += "null"; return;
        case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
        case Value::Kind::Int: out += std::to_string(v.as_int()); return;
        case Value::Kind::Float: {
            double d = v.as_double();
            if (std::isnan(d)) out += "NaN";
            else if (std::isinf(d)) out += d < 0 ? "-Infinity" : "Infinity";
            else out += float_repr(d);
            return;
        }
        case Value::Kind::Str: json_string(out, v.str(), style.ensure_ascii); return;
        case Value::Kind::List: {
            const Array& items = v.array();
            if (items.empty()) {
                out += "[]";
                return;
            }
            out += '[';
            for (std::size_t i = 0; i < items.size(); ++i) {
                if (i) out += style.item_separator;
                newline(level + 1);
                to_json(out, items[i], style, level + 1);
            }
            newline(level);
            out += ']';
            return;
        }
        case Value::Kind::Dict: {
            if (v.object().empty()) {
                out += "{}";
                return;
            }
            std::vector<std::pair<std::string, const Value*>> entries;
            for (const auto& [k, e] : v.object()) {
                std::string key;
                if (k.is_string()) key = k.str();
                else if (k.is_bool()) key = k.as_bool() ? "true" : "false";
                else if (k.is_none()) key = "null";
                else if (k.is_number()) key = k.repr();
                else throw Fault("keys must be str, int, float, bool or None, not " + k.type_name());
                entries.emplace_back(std::move(key), &e);
            }
            if (style.sort_keys)
                std::stable_sort(entries.begin(), entries.end(),
                                 [](const auto& a, const auto& b) { return a.first < b.first; });
            out += '{';
            for (std::size_t i = 0; i < entries.size(); ++i) {
                if (i) out += style.item_separator;
                newline(level + 1);
                json_string(out, entries[i].first, style.ensure_ascii);
                out += style.key_separator;
                to_json(out, *entries[i].second, style, level + 1);
            }
            newline(level);
            out += '}';
            return;
        }
        default: throw Fault("Object of type " + v.type_name() + " is not JSON serializable");
    }
}

// ---- arithmetic with Python's rules

std::int64_t add(std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    if (__builtin_add_overflow(a, b, &r)) throw Fault("integer overflow");
    return r;
}

std::int64_t sub(std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    if (__builtin_sub_overflow(a, b, &r)) throw Fault("integer overflow");
    return r;
}

std::int64_t mul(std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r)) throw Fault("integer overflow");
    return r;
}

Value python_floordiv(const Value& a, const Value& b) {
    if (a.kind() != Value::Kind::Float && b.kind() != Value::Kind::Float) {
        std::int64_t x = a.as_int(), y = b.as_int();
        if (y == 0) throw Fault("integer division or modulo by zero");
        if (x == std::numeric_limits<std::int64_t>::min() && y == -1) throw Fault("integer overflow");
        std::int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
        return Value(q);
    }
    double x = a.as_double(), y = b.as_double();
    if (y == 0) throw Fault("float floor division by zero");
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1.0;
    double floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
    return Value(floordiv);
}

Value python_mod(const Value& a, const Value& b) {
    if (a.kind() != Value::Kind::Float && b.kind() != Value::Kind::Float) {
        std::int64_t x = a.as_int(), y = b.as_int();
        if (y == 0) throw Fault("integer division or modulo by zero");
        if (y == -1) return Value(std::int64_t{0});
        std::int64_t r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        return Value(r);
    }
    double x = a.as_double(), y = b.as_double();
    if (y == 0) throw Fault("float modulo");
    double mod = std::fmod(x, y);
    if (mod != 0 && ((y < 0) != (mod < 0))) mod += y;
    return Value(mod);
}

Value python_pow(const Value& a, const Value& b) {
    if (a.kind() != Value::Kind::Float && b.kind() != Value::Kind::Float && b.as_int() >= 0) {
        std::int64_t base = a.as_int(), exp = b.as_int(), result = 1;
        while (exp > 0) {
            if (exp & 1) result = mul(result, base);
            exp >>= 1;
            if (exp > 0) base = mul(base, base);
        }
        return Value(result);
    }
    if (a.as_double() == 0 && b.as_double() < 0) throw Fault("0.0 cannot be raised to a negative power");
    double r = std::pow(a.as_double(), b.as_double());
    if (std::isinf(r) && std::isfinite(a.as_double()) && std::isfinite(b.as_double()))
        throw Fault("(34, 'Numerical result out of range')");
    return Value(r);
}

// Python's slice.indices() and the items it selects.
std::vector<std::size_t> slice_indices(std::int64_t length, const Value& start_v, const Value& stop_v,
                                       const Value& step_v) {
    auto bound = [](const Value& v) -> std::optional<std::int64_t> {
        if (v.is_none()) return std::nullopt;
        if (!v.is_int()) throw Fault("slice indices must be integers or None");
        return v.as_int();
    };
    std::int64_t step = bound(step_v).value_or(1);
    if (step == 0) throw Fault("slice step cannot be zero");
    auto clamp = [&](std::optional<std::int64_t> v, std::int64_t dflt) {
        if (!v) return dflt;
        std::int64_t x = *v;
        if (x < 0) {
            x += length;
            if (x < 0) x = step < 0 ? -1 : 0;
        } else if (x >= length) {
            x = step < 0 ? length - 1 : length;
        }
        return x;
    };
    std::int64_t start = clamp(bound(start_v), step < 0 ? length - 1 : 0);
    std::int64_t stop = clamp(bound(stop_v), step < 0 ? -1 : length);
    std::vector<std::size_t> out;
    if (step > 0)
        for (std::int64_t i = start; i < stop; i += step) out.push_back(static_cast<std::size_t>(i));
    else
        for (std::int64_t i = start; i > stop; i += step) out.push_back(static_cast<std::size_t>(i));
    return out;
}

// Python's printf-style `str % args` (and jinja2's format filter): %s %r %d %i %x %X %o %e %f %g %c %%, with
// flags, width and precision, and %(name)s from a dict.
std::string percent_format(const std::string& fmt, const Value& args) {
    std::vector<Value> positional;
    const Value* mapping = nullptr;
    if (args.is_tuple()) positional = args.array();
    else positional.push_back(args);
    if (args.is_object()) mapping = &args;
    std::size_t next = 0;
    bool used_mapping = false;
    std::string out;
    for (std::size_t i = 0; i < fmt.size(); ++i) {
        if (fmt[i] != '%') {
            out += fmt[i];
            continue;
        }
        if (++i >= fmt.size()) throw Fault("incomplete format");
        const Value* arg = nullptr;
        if (fmt[i] == '(') {
            std::size_t close = fmt.find(')', i);
            if (close == std::string::npos || mapping == nullptr) throw Fault("format requires a mapping");
            arg = mapping->find(Value(fmt.substr(i + 1, close - i - 1)));
            if (arg == nullptr) throw Fault("KeyError: " + fmt.substr(i + 1, close - i - 1));
            used_mapping = true;
            i = close + 1;
        }
        std::string flags;
        while (i < fmt.size() && std::strchr("-+ #0", fmt[i]) != nullptr) flags += fmt[i++];
        int width = 0, precision = -1;
        while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9' && width < 100000) width = width * 10 + (fmt[i++] - '0');
        if (i < fmt.size() && fmt[i] == '.') {
            precision = 0;
            ++i;
            while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9' && precision < 100000)
                precision = precision * 10 + (fmt[i++] - '0');
        }
        while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
        if (i >= fmt.size()) throw Fault("incomplete format");
        char type = fmt[i];
        if (type == '%' && flags.empty() && width == 0 && precision < 0 && arg == nullptr) {
            out += '%';
            continue;
        }
        if (arg == nullptr) {
            if (next >= positional.size()) throw Fault("not enough arguments for format string");
            arg = &positional[next++];
        }
        std::string text;
        switch (type) {
            case 's': case 'r': case 'a': {
                text = type == 's' ? arg->to_string() : arg->repr();
                if (precision >= 0) text = encode(decode(text).substr(0, static_cast<std::size_t>(precision)));
                auto len = static_cast<int>(code_points(text));
                if (width > len) {
                    std::string fill(static_cast<std::size_t>(width - len), ' ');
                    text = flags.find('-') != std::string::npos ? text + fill : fill + text;
                }
                break;
            }
            case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': case 'c': {
                if (!arg->is_number())
                    throw Fault("%" + std::string(1, type) + " format: a real number is required, not " + arg->type_name());
                if (arg->kind() == Value::Kind::Float && (type == 'x' || type == 'X' || type == 'o' || type == 'c'))
                    throw Fault("%" + std::string(1, type) + " format: an integer is required, not float");
                double d = arg->as_double();
                if (arg->kind() == Value::Kind::Float && (!std::isfinite(d) || std::fabs(d) > 9e18))
                    throw Fault("cannot convert float to integer");
                long long v = arg->kind() == Value::Kind::Float ? static_cast<long long>(d) : arg->as_int();
                if (type == 'c') {
                    if (v < 0 || v > 0x10FFFF) throw Fault("%c arg not in range(0x110000)");
                    text = encode(std::u32string(1, static_cast<char32_t>(v)));
                    break;
                }
                char conv = type == 'i' || type == 'u' ? 'd' : type;
                std::string spec = "%" + flags + (width > 0 ? std::to_string(std::min(width, 100)) : "") +
                                   (precision >= 0 ? "." + std::to_string(std::min(precision, 100)) : "") + "ll" + conv;
                char buf[256];
                std::snprintf(buf, sizeof buf, spec.c_str(), v);
                text = buf;
                break;
            }
            case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': {
                if (!arg->is_number()) throw Fault("must be real number, not " + arg->type_name());
                std::string spec = "%" + flags + (width > 0 ? std::to_string(std::min(width, 100)) : "") + "." +
                                   std::to_string(precision >= 0 ? std::min(precision, 100) : 6) + type;
                char buf[512];
                std::snprintf(buf, sizeof buf, spec.c_str(), arg->as_double());
                text = buf;
                break;
            }
            default: throw Fault(std::string("unsupported format character '") + type + "'");
        }
        out += text;
        if (out.size() > kMaxStringBytes) throw Fault("string too large (over 64 MiB)");
    }
    if (!used_mapping && mapping == nullptr && next < positional.size())
        throw Fault("not all arguments converted during string formatting");
    return out;
}

}  // namespace

// ---- the interpreter

class Interpreter {
public:
    enum class Flow { Normal, Break, Continue };

    Interpreter(const nlohmann::ordered_json& context, const RenderOptions& options) : options_(options) {
        root_ = std::make_shared<Frame>();
        if (context.is_object())
            for (const auto& [key, value] : context.items()) root_->vars.emplace_back(key, Value::from_json(value));
        frame_ = root_;
    }

    ~Interpreter() {
        // Namespaces can hold themselves (`set ns.me = ns`); emptying them frees such cycles.
        for (const auto& ns : namespaces_)
            if (auto alive = ns.lock()) alive->attributes.clear();
    }

    std::string render(const Program& program) {
        std::string out;
        out_ = &out;
        exec_body(program.body);
        return out;
    }

    // Counts work towards kMaxSteps.
    void charge(std::uint64_t steps) {
        steps_ += steps;
        if (steps_ > kMaxSteps) throw Fault("the template does too much work (over 1000000 loop iterations and items)");
    }

    Value string_value(std::string s, bool safe = false) {
        if (s.size() > kMaxStringBytes) throw Fault("string too large (over 64 MiB)");
        charge(s.size() / kBytesPerStep);
        return Value(std::move(s), safe);
    }

    Value make_namespace(Object attributes) {
        auto ns = std::make_shared<Namespace>();
        ns->attributes = std::move(attributes);
        namespaces_.push_back(ns);
        return Value(ns);
    }

    Value call(const Value& fn, const Args& args) {
        if (fn.is_undefined()) throw Fault(fn.undefined_hint());
        if (!fn.is_callable()) throw Fault("'" + fn.type_name() + "' object is not callable");
        return fn.callable().call(*this, args);
    }

    Value apply_filter(const std::string& name, const Value& input, const Args& args);
    bool apply_test(const std::string& name, const Value& input, const Args& args);
    Value get_attribute(const Value& obj, const std::string& name);
    // Python's getattr() alone, without get_attribute's fallback to a dict's keys (jinja2's attr filter).
    Value attribute_only(const Value& obj, const std::string& name);
    Value get_item(const Value& obj, const Value& key);
    Array iterate(const Value& v);
    // `g` with its items produced.
    Generator& pull(Generator& g) {
        if (g.produce) {
            auto produce = std::move(g.produce);
            g.produce = nullptr;
            g.items = produce(*this);
        }
        return g;
    }
    bool contains(const Value& container, const Value& item);
    // `a op b` for an arithmetic or comparison operator, with Python's rules.
    Value binary(const std::string& op, const Value& a, const Value& b);
    std::time_t now() const { return options_.now ? *options_.now : std::time(nullptr); }

private:
    struct Frame {
        std::vector<std::pair<std::string, Value>> vars;
        std::shared_ptr<Frame> parent;
    };

    struct Depth {
        explicit Depth(Interpreter& i) : interp(i) {
            if (++interp.depth_ > kMaxDepth) throw Fault("template recursion too deep (over 512 levels)");
        }
        ~Depth() { --interp.depth_; }
        Interpreter& interp;
    };

    void emit(const std::string& s) {
        output_bytes_ += s.size();
        if (output_bytes_ > kMaxOutputBytes) throw Fault("output too large (over 64 MiB)");
        out_->append(s);
    }

    Value lookup(const std::string& name) const;
    void assign(const std::string& name, Value v) {
        for (auto& [k, value] : frame_->vars) {
            if (k == name) {
                value = std::move(v);
                return;
            }
        }
        frame_->vars.emplace_back(name, std::move(v));
    }
    void bind(const std::vector<std::string>& targets, const Value& v) {
        if (targets.size() == 1) {
            assign(targets[0], v);
            return;
        }
        Array items = iterate(v);
        if (items.size() != targets.size())
            throw Fault(items.size() < targets.size() ? "not enough values to unpack" : "too many values to unpack");
        for (std::size_t i = 0; i < targets.size(); ++i) assign(targets[i], items[i]);
    }

    Flow exec_body(const Body& body) {
        for (const Stmt& s : body) {
            Flow flow = exec(s);
            if (flow != Flow::Normal) return flow;
        }
        return Flow::Normal;
    }

    Flow exec(const Stmt& s) {
        try {
            return exec_statement(s);
        } catch (const Fault& f) {
            fail_at(s.line, f.what());
        }
    }

    std::string capture(const Body& body, std::shared_ptr<Frame> parent) {
        std::string text;
        std::string* saved_out = out_;
        auto saved_frame = frame_;
        out_ = &text;
        frame_ = std::make_shared<Frame>();
        frame_->parent = std::move(parent);
        exec_body(body);
        out_ = saved_out;
        frame_ = saved_frame;
        return text;
    }

    Flow exec_statement(const Stmt& s);
    Flow exec_for(const Stmt& s);
    Value call_macro(const Stmt& def, const std::weak_ptr<Frame>& scope, const Args& args);
    Value make_macro(const Stmt& def, bool is_caller);
    Value eval(const Expr& e);
    Value eval_filter(const Expr& e, const Value* block_input);
    Args eval_args(const Expr& e, std::size_t first);

    RenderOptions options_;
    std::shared_ptr<Frame> root_;
    std::shared_ptr<Frame> frame_;
    std::string* out_ = nullptr;
    std::size_t output_bytes_ = 0;
    std::uint64_t steps_ = 0;
    int depth_ = 0;
    std::vector<std::weak_ptr<Namespace>> namespaces_;
};

namespace {

using Builtin = Value (*)(Interpreter&, const Args&);

Value arg_or(const Args& args, std::size_t index, std::string_view name, Value fallback) {
    const Value* v = args.get(index, name);
    return v ? *v : std::move(fallback);
}

std::shared_ptr<const Callable> callable(std::string name, std::function<Value(Interpreter&, const Args&)> fn) {
    return std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
}

// ---- globals

Value global_range(Interpreter& interp, const Args& args) {
    std::int64_t start = 0, stop = 0, step = 1;
    auto integer = [](const Value& v) {
        if (!v.is_int()) throw Fault("'" + v.type_name() + "' object cannot be interpreted as an integer");
        return v.as_int();
    };
    const auto& p = args.positional;
    if (p.size() == 1) {
        stop = integer(p[0]);
    } else if (p.size() == 2 || p.size() == 3) {
        start = integer(p[0]);
        stop = integer(p[1]);
        if (p.size() == 3) step = integer(p[2]);
    } else {
        throw Fault("range expected 1 to 3 arguments");
    }
    if (step == 0) throw Fault("range() arg 3 must not be zero");
    long double count = step > 0 ? std::ceil((static_cast<long double>(stop) - start) / step)
                                 : std::ceil((static_cast<long double>(start) - stop) / -step);
    if (count > kMaxRange) throw Fault("range too big, maximum size for range is 100000");
    Array out;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
    interp.charge(out.size());
    return Value(std::move(out));
}

Value global_namespace(Interpreter& interp, const Args& args) {
    Object attributes;
    for (const Value& p : args.positional) {
        if (!p.is_object()) throw Fault("namespace() takes a dict");
        attributes = p.object();
    }
    for (const auto& [k, v] : args.keywords) attributes.emplace_back(Value(k), v);
    return interp.make_namespace(std::move(attributes));
}

Value global_dict(Interpreter&, const Args& args) {
    Object out;
    auto put = [&](const Value& k, const Value& v) {
        for (auto& [key, value] : out) {
            if (equals(key, k)) {
                value = v;
                return;
            }
        }
        out.emplace_back(k, v);
    };
    for (const Value& p : args.positional) {
        if (p.is_object()) {
            for (const auto& [k, v] : p.object()) put(k, v);
        } else if (p.is_array()) {
            for (const Value& pair : p.array()) {
                if (!pair.is_array() || pair.array().size() != 2) throw Fault("dict() needs pairs");
                put(pair.array()[0], pair.array()[1]);
            }
        } else {
            throw Fault("'" + p.type_name() + "' object is not iterable");
        }
    }
    for (const auto& [k, v] : args.keywords) put(Value(k), v);
    return Value(std::move(out));
}

Value global_raise_exception(Interpreter&, const Args& args) {
    const Value* msg = args.get(0, "message");
    throw Fault(msg ? msg->to_string() : "raise_exception() called");
}

Value global_strftime_now(Interpreter& interp, const Args& args) {
    const Value* fmt = args.get(0, "format");
    if (!fmt || !fmt->is_string()) throw Fault("strftime_now() takes a format string");
    std::time_t t = interp.now();
    std::tm tm{};
    localtime_r(&t, &tm);
    if (fmt->str().empty()) return Value(std::string());
    std::vector<char> buf(256);
    while (buf.size() <= 65536) {
        std::size_t n = std::strftime(buf.data(), buf.size(), fmt->str().c_str(), &tm);
        if (n > 0) return Value(std::string(buf.data(), n));
        buf.resize(buf.size() * 4);
    }
    return Value(std::string());
}

const std::unordered_map<std::string, Builtin>& globals() {
    static const std::unordered_map<std::string, Builtin> table = {
        {"range", global_range},
        {"namespace", global_namespace},
        {"dict", global_dict},
        {"raise_exception", global_raise_exception},
        {"strftime_now", global_strftime_now},
    };
    return table;
}

}  // namespace

Value Interpreter::lookup(const std::string& name) const {
    for (const Frame* f = frame_.get(); f != nullptr; f = f->parent.get())
        for (const auto& [k, v] : f->vars)
            if (k == name) return v;
    auto g = globals().find(name);
    if (g != globals().end()) {
        Builtin fn = g->second;
        return Value(callable(name, [fn](Interpreter& i, const Args& a) { return fn(i, a); }));
    }
    return Value::undefined("'" + name + "' is undefined");
}

Array Interpreter::iterate(const Value& v) {
    switch (v.kind()) {
        case Value::Kind::Undefined: return {};
        case Value::Kind::List: return v.array();
        case Value::Kind::Dict: {
            Array keys;
            for (const auto& [k, e] : v.object()) keys.push_back(k);
            return keys;
        }
        case Value::Kind::Str: {
            charge(code_points(v.str()));
            Array chars;
            for (char32_t c : decode(v.str())) chars.emplace_back(encode(std::u32string(1, c)));
            return chars;
        }
        case Value::Kind::Loop: return v.loop().items.array();
        case Value::Kind::Generator: {
            Generator& g = pull(v.generator());
            Array rest(g.items.begin() + static_cast<std::ptrdiff_t>(g.next), g.items.end());
            g.next = g.items.size();
            return rest;
        }
        default: throw Fault("'" + v.type_name() + "' object is not iterable");
    }
}

// ---- attributes, items and methods

namespace {

bool is_unsafe_method(const Value& obj, const std::string& name) {
    static const char* const list_mutators[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
    static const char* const dict_mutators[] = {"pop", "popitem", "setdefault", "update", "clear"};
    if (obj.is_array() && !obj.is_tuple())
        return std::find(std::begin(list_mutators), std::end(list_mutators), name) != std::end(list_mutators);
    if (obj.is_object())
        return std::find(std::begin(dict_mutators), std::end(dict_mutators), name) != std::end(dict_mutators);
    return false;
}

Value items_of(const Value& obj) {
    Array items;
    for (const auto& [k, v] : obj.object()) items.emplace_back(Array{k, v}, true);
    return Value(std::move(items));
}

std::string format_string(Interpreter& interp, const std::string& fmt, const Args& args) {
    std::string out;
    std::size_t auto_index = 0;
    for (std::size_t i = 0; i < fmt.size(); ++i) {
        char c = fmt[i];
        if (c == '}') {
            if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
            else throw Fault("Single '}' encountered in format string");
            out += '}';
            continue;
        }
        if (c != '{') {
            out += c;
            continue;
        }
        if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
            out += '{';
            ++i;
            continue;
        }
        std::size_t end = fmt.find('}', i);
        if (end == std::string::npos) throw Fault("Single '{' encountered in format string");
        std::string field = fmt.substr(i + 1, end - i - 1);
        i = end;
        std::string conversion;
        if (auto bang = field.find('!'); bang != std::string::npos) {
            conversion = field.substr(bang + 1);
            field.resize(bang);
        }
        if (field.find(':') != std::string::npos) throw Fault("format specs are not supported in str.format");
        const Value* v = nullptr;
        if (field.empty()) {
            v = auto_index < args.positional.size() ? &args.positional[auto_index] : nullptr;
            ++auto_index;
        } else if (field.size() < 9 && std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
            std::size_t index = std::stoul(field);
            v = index < args.positional.size() ? &args.positional[index] : nullptr;
        } else {
            for (const auto& [k, value] : args.keywords)
                if (k == field) v = &value;
        }
        if (v == nullptr) throw Fault("Replacement index out of range in str.format");
        out += conversion == "r" ? v->repr() : v->to_string();
        if (out.size() > kMaxStringBytes) throw Fault("string too large (over 64 MiB)");
    }
    interp.charge(out.size() / kBytesPerStep);
    return out;
}

// Python's str.split / rsplit.
Value split(Interpreter& interp, const std::string& s, const Args& args, bool from_right) {
    const Value* sep = args.get(0, "sep");
    const Value* max_v = args.get(1, "maxsplit");
    if (max_v && !max_v->is_int()) throw Fault("'" + max_v->type_name() + "' object cannot be interpreted as an integer");
    std::int64_t maxsplit = max_v ? max_v->as_int() : -1;
    std::vector<std::string> parts;
    if (sep == nullptr || sep->is_none()) {
        std::u32string u = decode(s);
        std::vector<std::pair<std::size_t, std::size_t>> words;
        for (std::size_t i = 0; i < u.size();) {
            while (i < u.size() && is_py_space(u[i])) ++i;
            if (i >= u.size()) break;
            std::size_t b = i;
            while (i < u.size() && !is_py_space(u[i])) ++i;
            words.emplace_back(b, i);
        }
        if (maxsplit >= 0 && static_cast<std::size_t>(maxsplit) < words.size()) {
            auto m = static_cast<std::size_t>(maxsplit);
            std::vector<std::pair<std::size_t, std::size_t>> kept;
            // The unsplit remainder keeps its whitespace on the inner side.
            if (!from_right) {
                kept.assign(words.begin(), words.begin() + static_cast<std::ptrdiff_t>(m));
                kept.emplace_back(words[m].first, u.size());
            } else {
                std::size_t first = words.size() - m;
                kept.emplace_back(0, words[first - 1].second);
                kept.insert(kept.end(), words.begin() + static_cast<std::ptrdiff_t>(first), words.end());
            }
            words = std::move(kept);
        }
        for (auto [b, e] : words) parts.push_back(encode(u.substr(b, e - b)));
    } else {
        if (!sep->is_string()) throw Fault("must be str or None, not " + sep->type_name());
        const std::string& d = sep->str();
        if (d.empty()) throw Fault("empty separator");
        if (!from_right) {
            std::size_t start = 0;
            while (maxsplit < 0 || static_cast<std::int64_t>(parts.size()) < maxsplit) {
                std::size_t at = s.find(d, start);
                if (at == std::string::npos) break;
                parts.push_back(s.substr(start, at - start));
                start = at + d.size();
            }
            parts.push_back(s.substr(start));
        } else {
            std::size_t end = s.size();
            std::vector<std::string> rev;
            while (maxsplit < 0 || static_cast<std::int64_t>(rev.size()) < maxsplit) {
                if (end < d.size()) break;
                std::size_t at = s.rfind(d, end - d.size());
                if (at == std::string::npos) break;
                rev.push_back(s.substr(at + d.size(), end - at - d.size()));
                end = at;
            }
            rev.push_back(s.substr(0, end));
            parts.assign(rev.rbegin(), rev.rend());
        }
    }
    interp.charge(parts.size());
    Array out;
    for (auto& p : parts) out.emplace_back(std::move(p));
    return Value(std::move(out));
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
    auto one = [&](const Value& a) {
        if (!a.is_string()) throw Fault("startswith/endswith first arg must be str or a tuple of str");
        const std::string& x = a.str();
        if (x.size() > s.size()) return false;
        return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
    };
    if (affix.is_array()) {
        for (const Value& a : affix.array())
            if (one(a)) return true;
        return false;
    }
    return one(affix);
}

std::string replace_all(Interpreter& interp, const std::string& s, const std::string& from, const std::string& to,
                        std::int64_t count) {
    std::string out;
    std::size_t n = 0;
    if (from.empty()) {
        std::u32string u = decode(s);
        for (std::size_t i = 0; i <= u.size(); ++i) {
            if (count < 0 || static_cast<std::int64_t>(n) < count) {
                out += to;
                ++n;
            }
            if (i < u.size()) out += encode(std::u32string(1, u[i]));
            if (out.size() > kMaxStringBytes) throw Fault("string too large (over 64 MiB)");
        }
    } else {
        std::size_t start = 0;
        while (count < 0 || static_cast<std::int64_t>(n) < count) {
            std::size_t at = s.find(from, start);
            if (at == std::string::npos) break;
            out.append(s, start, at - start);
            out += to;
            start = at + from.size();
            ++n;
            if (out.size() > kMaxStringBytes) throw Fault("string too large (over 64 MiB)");
        }
        out.append(s, start, std::string::npos);
    }
    interp.charge(out.size() / kBytesPerStep);
    return out;
}

std::string pad(Interpreter& interp, const std::string& s, const Args& args, int where) {
    const Value* w = args.get(0, "width");
    if (!w || !w->is_int()) throw Fault("width must be an integer");
    std::string fill = arg_or(args, 1, "fillchar", Value(" ")).to_string();
    if (code_points(fill) != 1) throw Fault("The fill character must be exactly one character long");
    std::int64_t width = w->as_int();
    auto len = static_cast<std::int64_t>(code_points(s));
    if (width <= len) return s;
    if (width > static_cast<std::int64_t>(kMaxStringBytes)) throw Fault("string too large (over 64 MiB)");
    interp.charge(static_cast<std::uint64_t>(width) / kBytesPerStep);
    std::int64_t total = width - len;
    std::int64_t left = where < 0 ? 0 : where > 0 ? total : total / 2 + (total & width & 1);
    std::string out;
    for (std::int64_t i = 0; i < left; ++i) out += fill;
    out += s;
    for (std::int64_t i = 0; i < total - left; ++i) out += fill;
    return out;
}

// A str method bound to `self`; nullopt when str has no such method.
std::optional<Value> string_method(const Value& self, const std::string& name) {
    using Fn = std::function<Value(Interpreter&, const std::string&, const Args&)>;
    static const std::unordered_map<std::string, Fn> methods = {
        {"strip", [](Interpreter&, const std::string& s, const Args& a) { return Value(strip(s, a.get(0, "chars"), true, true)); }},
        {"lstrip", [](Interpreter&, const std::string& s, const Args& a) { return Value(strip(s, a.get(0, "chars"), true, false)); }},
        {"rstrip", [](Interpreter&, const std::string& s, const Args& a) { return Value(strip(s, a.get(0, "chars"), false, true)); }},
        {"split", [](Interpreter& i, const std::string& s, const Args& a) { return split(i, s, a, false); }},
        {"rsplit", [](Interpreter& i, const std::string& s, const Args& a) { return split(i, s, a, true); }},
        {"splitlines", [](Interpreter&, const std::string& s, const Args&) {
             Array out;
             for (auto& l : split_lines(s)) out.emplace_back(std::move(l));
             return Value(std::move(out));
         }},
        {"startswith", [](Interpreter&, const std::string& s, const Args& a) {
             const Value* p = a.get(0, "prefix");
             if (!p) throw Fault("startswith() takes at least 1 argument");
             return Value(affix_match(s, *p, true));
         }},
        {"endswith", [](Interpreter&, const std::string& s, const Args& a) {
             const Value* p = a.get(0, "suffix");
             if (!p) throw Fault("endswith() takes at least 1 argument");
             return Value(affix_match(s, *p, false));
         }},
        {"upper", [](Interpreter&, const std::string& s, const Args&) { return Value(upper(s)); }},
        {"lower", [](Interpreter&, const std::string& s, const Args&) { return Value(lower(s)); }},
        {"title", [](Interpreter&, const std::string& s, const Args&) { return Value(py_title(s)); }},
        {"capitalize", [](Interpreter&, const std::string& s, const Args&) { return Value(capitalize(s)); }},
        {"replace", [](Interpreter& i, const std::string& s, const Args& a) {
             const Value* from = a.get(0, "old");
             const Value* to = a.get(1, "new");
             if (!from || !to || !from->is_string() || !to->is_string()) throw Fault("replace() takes two strings");
             const Value* count = a.get(2, "count");
             return i.string_value(replace_all(i, s, from->str(), to->str(), count && count->is_int() ? count->as_int() : -1));
         }},
        {"find", [](Interpreter&, const std::string& s, const Args& a) {
             const Value* sub = a.get(0, "sub");
             if (!sub || !sub->is_string()) throw Fault("find() takes a string");
             std::size_t at = s.find(sub->str());
             return Value(at == std::string::npos ? std::int64_t{-1} : static_cast<std::int64_t>(code_points(s.substr(0, at))));
         }},
        {"rfind", [](Interpreter&, const std::string& s, const Args& a) {
             const Value* sub = a.get(0, "sub");
             if (!sub || !sub->is_string()) throw Fault("rfind() takes a string");
             std::size_t at = s.rfind(sub->str());
             return Value(at == std::string::npos ? std::int64_t{-1} : static_cast<std::int64_t>(code_points(s.substr(0, at))));
         }},
        {"count", [](Interpreter&, const std::string& s, const Args& a) {
             const Value* sub = a.get(0, "sub");
             if (!sub || !sub->is_string()) throw Fault("count() takes a string");
             if (sub->str().empty()) return Value(static_cast<std::int64_t>(code_points(s) + 1));
             std::int64_t n = 0;
             for (std::size_t at = s.find(sub->str()); at != std::string::npos; at = s.find(sub->str(), at + sub->str().size())) ++n;
             return Value(n);
         }},
        {"join", [](Interpreter& i, const std::string& s, const Args& a) {
             const Value* items = a.get(0, "iterable");
             if (!items) throw Fault("join() takes exactly one argument");
             std::string out;
             bool first = true;
             for (const Value& v : i.iterate(*items)) {
                 if (!v.is_string()) throw Fault("sequence item: expected str instance, " + v.type_name() + " found");
                 if (!first) out += s;
                 first = false;
                 out += v.str();
                 if (out.size() > kMaxStringBytes) throw Fault("string too large (over 64 MiB)");
             }
             return i.string_value(std::move(out));
         }},
        {"format", [](Interpreter& i, const std::string& s, const Args& a) { return Value(format_string(i, s, a)); }},
        {"isdigit", [](Interpreter&, const std::string& s, const Args&) {
             std::u32string u = decode(s);
             return Value(!u.empty() && std::all_of(u.begin(), u.end(), is_digit));
         }},
        {"isalpha", [](Interpreter&, const std::string& s, const Args&) {
             std::u32string u = decode(s);
             return Value(!u.empty() && std::all_of(u.begin(), u.end(), is_alpha));
         }},
        {"isalnum", [](Interpreter&, const std::string& s, const Args&) {
             std::u32string u = decode(s);
             return Value(!u.empty() && std::all_of(u.begin(), u.end(), [](char32_t c) { return is_alpha(c) || is_digit(c); }));
         }},
        {"isspace", [](Interpreter&, const std::string& s, const Args&) {
             std::u32string u = decode(s);
             return Value(!u.empty() && std::all_of(u.begin(), u.end(), is_py_space));
         }},
        {"islower", [](Interpreter&, const std::string& s, const Args&) {
             return Value(lower(s) == s && upper(s) != s);
         }},
        {"isupper", [](Interpreter&, const std::string& s, const Args&) {
             return Value(upper(s) == s && lower(s) != s);
         }},
        {"index", [](Interpreter&, const std::string& s, const Args& a) {
             const Value* sub = a.get(0, "sub");
             if (!sub || !sub->is_string()) throw Fault("index() takes a string");
             std::size_t at = s.find(sub->str());
             if (at == std::string::npos) throw Fault("substring not found");
             return Value(static_cast<std::int64_t>(code_points(s.substr(0, at))));
         }},
        {"rindex", [](Interpreter&, const std::string& s, const Args& a) {
             const Value* sub = a.get(0, "sub");
             if (!sub || !sub->is_string()) throw Fault("rindex() takes a string");
             std::size_t at = s.rfind(sub->str());
             if (at == std::string::npos) throw Fault("substring not found");
             return Value(static_cast<std::int64_t>(code_points(s.substr(0, at))));
         }},
        {"zfill", [](Interpreter& i, const std::string& s, const Args& a) {
             Value width = arg_or(a, 0, "width", Value(std::int64_t{0}));
             if (!width.is_int()) throw Fault("zfill() takes an integer");
             std::int64_t missing = width.as_int() - static_cast<std::int64_t>(code_points(s));
             if (missing <= 0) return Value(s);
             if (missing > static_cast<std::int64_t>(kMaxStringBytes)) throw Fault("string too large (over 64 MiB)");
             i.charge(static_cast<std::uint64_t>(missing) / kBytesPerStep);
             std::string zeros(static_cast<std::size_t>(missing), '0');
             bool sign = !s.empty() && (s[0] == '-' || s[0] == '+');
             return Value(sign ? s.substr(0, 1) + zeros + s.substr(1) : zeros + s);
         }},
        {"swapcase", [](Interpreter&, const std::string& s, const Args&) {
             std::u32string u = decode(s);
             for (char32_t& c : u) c = to_lower(c) != c ? to_lower(c) : to_upper(c);
             return Value(encode(u));
         }},
        {"casefold", [](Interpreter&, const std::string& s, const Args&) { return Value(lower(s)); }},
        {"partition", [](Interpreter&, const std::string& s, const Args& a) {
             const Value* sep = a.get(0, "sep");
             if (!sep || !sep->is_string() || sep->str().empty()) throw Fault("partition() takes a non-empty string");
             std::size_t at = s.find(sep->str());
             if (at == std::string::npos) return Value(Array{Value(s), Value(""), Value("")}, true);
             return Value(Array{Value(s.substr(0, at)), *sep, Value(s.substr(at + sep->str().size()))}, true);
         }},
        {"rpartition", [](Interpreter&, const std::string& s, const Args& a) {
             const Value* sep = a.get(0, "sep");
             if (!sep || !sep->is_string() || sep->str().empty()) throw Fault("rpartition() takes a non-empty string");
             std::size_t at = s.rfind(sep->str());
             if (at == std::string::npos) return Value(Array{Value(""), Value(""), Value(s)}, true);
             return Value(Array{Value(s.substr(0, at)), *sep, Value(s.substr(at + sep->str().size()))}, true);
         }},
        {"isnumeric", [](Interpreter&, const std::string& s, const Args&) {
             std::u32string u = decode(s);
             return Value(!u.empty() && std::all_of(u.begin(), u.end(), is_digit));
         }},
        {"isdecimal", [](Interpreter&, const std::string& s, const Args&) {
             std::u32string u = decode(s);
             return Value(!u.empty() && std::all_of(u.begin(), u.end(), is_digit));
         }},
        {"center", [](Interpreter& i, const std::string& s, const Args& a) { return Value(pad(i, s, a, 0)); }},
        {"ljust", [](Interpreter& i, const std::string& s, const Args& a) { return Value(pad(i, s, a, -1)); }},
        {"rjust", [](Interpreter& i, const std::string& s, const Args& a) { return Value(pad(i, s, a, 1)); }},
        {"removeprefix", [](Interpreter&, const std::string& s, const Args& a) {
             const Value* p = a.get(0, "prefix");
             if (!p || !p->is_string()) throw Fault("removeprefix() takes a string");
             return Value(s.compare(0, p->str().size(), p->str()) == 0 ? s.substr(p->str().size()) : s);
         }},
        {"removesuffix", [](Interpreter&, const std::string& s, const Args& a) {
             const Value* p = a.get(0, "suffix");
             if (!p || !p->is_string()) throw Fault("removesuffix() takes a string");
             const std::string& x = p->str();
             bool has = !x.empty() && x.size() <= s.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
             return Value(has ? s.substr(0, s.size() - x.size()) : s);
         }},
    };
    auto it = methods.find(name);
    if (it == methods.end()) return std::nullopt;
    // Python's str methods take their arguments by position (split and rsplit also by name), this many at most.
    static const std::unordered_map<std::string, std::size_t> max_arguments = {
        {"strip", 1}, {"lstrip", 1}, {"rstrip", 1}, {"split", 2}, {"rsplit", 2}, {"splitlines", 1}, {"startswith", 3},
        {"endswith", 3}, {"replace", 3}, {"find", 3}, {"rfind", 3}, {"index", 3}, {"rindex", 3}, {"count", 3},
        {"join", 1}, {"center", 2}, {"ljust", 2}, {"rjust", 2}, {"zfill", 1}, {"partition", 1}, {"rpartition", 1},
        {"removeprefix", 1}, {"removesuffix", 1}, {"format", SIZE_MAX},
    };
    auto limit = max_arguments.find(name);
    std::size_t max_args = limit == max_arguments.end() ? 0 : limit->second;
    bool keywords_allowed = name == "split" || name == "rsplit" || name == "format";
    Fn fn = it->second;
    bool safe = self.is_safe();
    std::string receiver = self.str();
    return Value(callable(name, [fn, receiver, safe, name, max_args, keywords_allowed](Interpreter& i, const Args& a) {
        if (a.positional.size() + a.keywords.size() > max_args)
            throw Fault("str." + name + "() takes at most " + std::to_string(max_args) + " argument(s)");
        if (!keywords_allowed && !a.keywords.empty()) throw Fault("str." + name + "() takes no keyword arguments");
        i.charge(receiver.size() / kBytesPerStep);
        Value r = fn(i, receiver, a);
        // Markup's methods return Markup.
        if (safe && r.is_string() && name != "format") return Value(r.str(), true);
        return r;
    }));
}

std::optional<Value> container_method(const Value& self, const std::string& name) {
    if (is_unsafe_method(self, name)) {
        std::string message = "access to attribute '" + name + "' of '" + self.type_name() + "' object is unsafe.";
        return Value(callable(name, [message](Interpreter&, const Args&) -> Value { throw Fault(message); }));
    }
    if (self.is_object()) {
        if (name == "items") return Value(callable(name, [self](Interpreter&, const Args&) { return items_of(self); }));
        if (name == "keys")
            return Value(callable(name, [self](Interpreter& i, const Args&) { return Value(i.iterate(self)); }));
        if (name == "values")
            return Value(callable(name, [self](Interpreter&, const Args&) {
                Array values;
                for (const auto& [k, v] : self.object()) values.push_back(v);
                return Value(std::move(values));
            }));
        if (name == "get")
            return Value(callable(name, [self](Interpreter&, const Args& a) {
                const Value* key = a.get(0, "key");
                if (!key) throw Fault("get expected at least 1 argument");
                const Value* v = self.find(*key);
                return v ? *v : arg_or(a, 1, "default", Value::none());
            }));
        if (name == "copy") return Value(callable(name, [self](Interpreter&, const Args&) { return self; }));
    }
    if (self.is_array()) {
        if (name == "index")
            return Value(callable(name, [self](Interpreter&, const Args& a) {
                const Value* x = a.get(0, "value");
                if (!x) throw Fault("index expected 1 argument");
                for (std::size_t i = 0; i < self.array().size(); ++i)
                    if (equals(self.array()[i], *x)) return Value(static_cast<std::int64_t>(i));
                throw Fault(x->repr() + " is not in list");
            }));
        if (name == "count")
            return Value(callable(name, [self](Interpreter&, const Args& a) {
                const Value* x = a.get(0, "value");
                if (!x) throw Fault("count expected 1 argument");
                return Value(static_cast<std::int64_t>(
                    std::count_if(self.array().begin(), self.array().end(), [&](const Value& v) { return equals(v, *x); })));
            }));
        if (name == "copy" && !self.is_tuple())
            return Value(callable(name, [self](Interpreter&, const Args&) { return self; }));
    }
    return std::nullopt;
}

Value loop_attribute(const Value& loop_value, const std::string& name) {
    const LoopState& loop = loop_value.loop();
    const Array& items = loop.items.array();
    auto index = static_cast<std::int64_t>(loop.index0);
    auto length = static_cast<std::int64_t>(items.size());
    if (name == "index") return Value(index + 1);
    if (name == "index0") return Value(index);
    if (name == "revindex") return Value(length - index);
    if (name == "revindex0") return Value(length - index - 1);
    if (name == "first") return Value(index == 0);
    if (name == "last") return Value(index == length - 1);
    if (name == "length") return Value(length);
    if (name == "depth") return Value(std::int64_t{1});
    if (name == "depth0") return Value(std::int64_t{0});
    if (name == "previtem") return index > 0 ? items[loop.index0 - 1] : Value::undefined("there is no previous item");
    if (name == "nextitem") return index + 1 < length ? items[loop.index0 + 1] : Value::undefined("there is no next item");
    if (name == "cycle") {
        std::size_t at = loop.index0;
        return Value(callable("cycle", [at](Interpreter&, const Args& a) {
            if (a.positional.empty()) throw Fault("no items for cycling given");
            return a.positional[at % a.positional.size()];
        }));
    }
    return Value::undefined("'LoopContext' object has no attribute '" + name + "'");
}

}  // namespace

Value Interpreter::get_attribute(const Value& obj, const std::string& name) {
    switch (obj.kind()) {
        case Value::Kind::Undefined: throw Fault(obj.undefined_hint());
        case Value::Kind::Str:
            if (auto m = string_method(obj, name)) return *m;
            break;
        case Value::Kind::Dict: {
            if (auto m = container_method(obj, name)) return *m;
            if (const Value* v = obj.find(Value(name))) return *v;
            break;
        }
        case Value::Kind::List:
            if (auto m = container_method(obj, name)) return *m;
            break;
        case Value::Kind::Ns:
            for (const auto& [k, v] : obj.ns().attributes)
                if (k.is_string() && k.str() == name) return v;
            break;
        case Value::Kind::Loop: return loop_attribute(obj, name);
        default: break;
    }
    return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
}

Value Interpreter::attribute_only(const Value& obj, const std::string& name) {
    if (obj.is_object()) {
        if (auto m = container_method(obj, name)) return *m;
        return Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    return get_attribute(obj, name);
}

Value Interpreter::get_item(const Value& obj, const Value& key) {
    switch (obj.kind()) {
        case Value::Kind::Undefined: throw Fault(obj.undefined_hint());
        case Value::Kind::Dict:
            if (const Value* v = obj.find(key)) return *v;
            break;
        case Value::Kind::List:
            if (key.is_int()) {
                std::int64_t i = key.as_int();
                auto n = static_cast<std::int64_t>(obj.array().size());
                if (i < 0) i += n;
                if (i >= 0 && i < n) return obj.array()[static_cast<std::size_t>(i)];
            }
            break;
        case Value::Kind::Str:
            if (key.is_int()) {
                charge(obj.str().size() / kBytesPerStep);
                std::u32string u = decode(obj.str());
                std::int64_t i = key.as_int();
                auto n = static_cast<std::int64_t>(u.size());
                if (i < 0) i += n;
                if (i >= 0 && i < n) return Value(encode(u.substr(static_cast<std::size_t>(i), 1)));
            }
            break;
        default: break;
    }
    // jinja2 falls back to the attribute of that name.
    if (key.is_string()) return get_attribute(obj, key.str());
    return Value::undefined("'" + obj.type_name() + " object' has no element " + key.repr());
}

bool Interpreter::contains(const Value& container, const Value& item) {
    switch (container.kind()) {
        case Value::Kind::Undefined: return false;
        case Value::Kind::Str:
            if (!item.is_string()) throw Fault("'in <string>' requires string as left operand, not " + item.type_name());
            return container.str().find(item.str()) != std::string::npos;
        case Value::Kind::List:
            charge(container.array().size() / 16);
            return std::any_of(container.array().begin(), container.array().end(),
                               [&](const Value& v) { return equals(v, item); });
        case Value::Kind::Dict: return container.find(item) != nullptr;
        case Value::Kind::Loop: return contains(container.loop().items, item);
        case Value::Kind::Generator: {
            Generator& g = pull(container.generator());
            while (g.next < g.items.size())
                if (equals(g.items[g.next++], item)) return true;
            return false;
        }
        default: throw Fault("argument of type '" + container.type_name() + "' is not iterable");
    }
}

Value Interpreter::binary(const std::string& op, const Value& a, const Value& b) {
    auto type_error = [&]() -> Fault {
        return Fault("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
    };
    if (a.is_undefined() && op != "==" && op != "!=" && op != "in" && op != "not in") throw Fault(a.undefined_hint());
    if (b.is_undefined() && op != "==" && op != "!=" && op != "in" && op != "not in") throw Fault(b.undefined_hint());
    if (op == "==") return Value(equals(a, b));
    if (op == "!=") return Value(!equals(a, b));
    if (op == "<") return Value(less(a, b));
    if (op == ">") return Value(less(b, a));
    if (op == "<=") return Value(!less(b, a));
    if (op == ">=") return Value(!less(a, b));
    if (op == "in") return Value(contains(b, a));
    if (op == "not in") return Value(!contains(b, a));
    bool numbers = a.is_number() && b.is_number();
    bool floats = numbers && (a.kind() == Value::Kind::Float || b.kind() == Value::Kind::Float);
    if (op == "+") {
        if (numbers) {
            if (floats) return Value(a.as_double() + b.as_double());
            return Value(add(a.as_int(), b.as_int()));
        }
        if (a.is_string() && b.is_string()) {
            // Markup escapes the plain string it meets.
            bool safe = a.is_safe() || b.is_safe();
            std::string left = safe && !a.is_safe() ? html_escape(a.str()) : a.str();
            std::string right = safe && !b.is_safe() ? html_escape(b.str()) : b.str();
            if (left.size() + right.size() > kMaxStringBytes) throw Fault("string too large (over 64 MiB)");
            return string_value(left + right, safe);
        }
        if (a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
            Array out = a.array();
            out.insert(out.end(), b.array().begin(), b.array().end());
            charge(out.size());
            return Value(std::move(out), a.is_tuple());
        }
        if (a.is_string() || b.is_string())
            throw Fault("can only concatenate str (not \"" + (a.is_string() ? b : a).type_name() + "\") to str");
        throw type_error();
    }
    if (op == "-") {
        if (!numbers) throw type_error();
        if (floats) return Value(a.as_double() - b.as_double());
        return Value(sub(a.as_int(), b.as_int()));
    }
    if (op == "*") {
        if (numbers) {
            if (floats) return Value(a.as_double() * b.as_double());
            return Value(mul(a.as_int(), b.as_int()));
        }
        const Value& seq = a.is_int() ? b : a;
        const Value& times = a.is_int() ? a : b;
        if (!times.is_int() || !(seq.is_string() || seq.is_array())) throw type_error();
        std::int64_t n = std::max<std::int64_t>(0, times.as_int());
        if (seq.is_string()) {
            if (n > 0 && seq.str().size() > kMaxStringBytes / static_cast<std::size_t>(n))
                throw Fault("string too large (over 64 MiB)");
            std::string out;
            for (std::int64_t i = 0; i < n; ++i) out += seq.str();
            return string_value(std::move(out), seq.is_safe());
        }
        if (n > 0 && seq.array().size() > kMaxListItems / static_cast<std::size_t>(n))
            throw Fault("list too large (over 1000000 items)");
        charge(seq.array().size() * static_cast<std::size_t>(n));
        Array out;
        for (std::int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.array().begin(), seq.array().end());
        return Value(std::move(out), seq.is_tuple());
    }
    if (op == "%" && a.is_string()) return string_value(percent_format(a.str(), b), a.is_safe());
    if (!numbers) throw type_error();
    if (op == "/") {
        if (b.as_double() == 0) throw Fault("division by zero");
        return Value(a.as_double() / b.as_double());
    }
    if (op == "//") return python_floordiv(a, b);
    if (op == "%") return python_mod(a, b);
    if (op == "**") return python_pow(a, b);
    throw Fault("unknown operator " + op);
}

// ---- evaluation

Args Interpreter::eval_args(const Expr& e, std::size_t first) {
    Args args;
    for (std::size_t i = first; i < e.operands.size(); ++i) args.positional.push_back(eval(*e.operands[i]));
    for (const auto& [name, value] : e.keywords) args.keywords.emplace_back(name, eval(*value));
    return args;
}

Value Interpreter::eval_filter(const Expr& e, const Value* block_input) {
    Value input;
    if (!e.operands[0]) input = *block_input;
    else if (e.operands[0]->kind == ExprKind::Filter) input = eval_filter(*e.operands[0], block_input);
    else input = eval(*e.operands[0]);
    if (!e.known) throw Fault("no filter named '" + e.name + "'");
    return apply_filter(e.name, input, eval_args(e, 1));
}

Value Interpreter::eval(const Expr& e) {
    Depth depth(*this);
    switch (e.kind) {
        case ExprKind::Literal: return e.value;
        case ExprKind::Name: return lookup(e.name);
        case ExprKind::Attribute: return get_attribute(eval(*e.operands[0]), e.name);
        case ExprKind::Subscript: {
            Value obj = eval(*e.operands[0]);
            return get_item(obj, eval(*e.operands[1]));
        }
        case ExprKind::Slice: {
            Value obj = eval(*e.operands[0]);
            Value start = e.operands[1] ? eval(*e.operands[1]) : Value::none();
            Value stop = e.operands[2] ? eval(*e.operands[2]) : Value::none();
            Value step = e.operands[3] ? eval(*e.operands[3]) : Value::none();
            if (obj.is_undefined()) throw Fault(obj.undefined_hint());
            if (obj.is_string()) {
                charge(obj.str().size() / kBytesPerStep);
                std::u32string u = decode(obj.str());
                std::u32string out;
                for (std::size_t i : slice_indices(static_cast<std::int64_t>(u.size()), start, stop, step)) out += u[i];
                return Value(encode(out), obj.is_safe());
            }
            if (obj.is_array()) {
                Array out;
                for (std::size_t i : slice_indices(static_cast<std::int64_t>(obj.array().size()), start, stop, step))
                    out.push_back(obj.array()[i]);
                charge(out.size());
                return Value(std::move(out), obj.is_tuple());
            }
            return Value::undefined("'" + obj.type_name() + " object' cannot be sliced");
        }
        case ExprKind::Unary: {
            Value v = eval(*e.operands[0]);
            if (e.name == "not") return Value(!v.truthy());
            if (v.is_undefined()) throw Fault(v.undefined_hint());
            if (!v.is_number()) throw Fault("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
            if (e.name == "+") return v.is_bool() ? Value(v.as_int()) : v;
            if (v.kind() == Value::Kind::Float) return Value(-v.as_double());
            if (v.as_int() == std::numeric_limits<std::int64_t>::min()) throw Fault("integer overflow");
            return Value(-v.as_int());
        }
        case ExprKind::Compare: {
            // a < b < c is a < b and b < c, b evaluated once.
            Value left = eval(*e.operands[0]);
            for (std::size_t i = 1; i < e.operands.size(); ++i) {
                Value right = eval(*e.operands[i]);
                if (!binary(e.comparisons[i - 1], left, right).truthy()) return Value(false);
                left = std::move(right);
            }
            return Value(true);
        }
        case ExprKind::Binary: {
            Value left = eval(*e.operands[0]);
            if (e.name == "and") return left.truthy() ? eval(*e.operands[1]) : left;
            if (e.name == "or") return left.truthy() ? left : eval(*e.operands[1]);
            return binary(e.name, left, eval(*e.operands[1]));
        }
        case ExprKind::Concat: {
            std::string out;
            for (const auto& part : e.operands) {
                out += eval(*part).to_string();
                if (out.size() > kMaxStringBytes) throw Fault("string too large (over 64 MiB)");
            }
            return string_value(std::move(out));
        }
        case ExprKind::Condition:
            if (eval(*e.operands[0]).truthy()) return eval(*e.operands[1]);
            if (e.operands[2]) return eval(*e.operands[2]);
            return Value::undefined("the inline if expression evaluated to false and no else section was defined");
        case ExprKind::Filter: return eval_filter(e, nullptr);
        case ExprKind::Test: {
            Value v = eval(*e.operands[0]);
            if (!e.known) throw Fault("no test named '" + e.name + "'");
            bool r = apply_test(e.name, v, eval_args(e, 1));
            return Value(e.negated ? !r : r);
        }
        case ExprKind::Call: {
            Value fn = eval(*e.operands[0]);
            return call(fn, eval_args(e, 1));
        }
        case ExprKind::List:
        case ExprKind::Tuple: {
            Array items;
            for (const auto& o : e.operands) items.push_back(eval(*o));
            return Value(std::move(items), e.kind == ExprKind::Tuple);
        }
        case ExprKind::Dict: {
            Object items;
            for (std::size_t i = 0; i + 1 < e.operands.size(); i += 2) {
                Value k = eval(*e.operands[i]);
                Value v = eval(*e.operands[i + 1]);
                auto existing =
                    std::find_if(items.begin(), items.end(), [&](const auto& kv) { return equals(kv.first, k); });
                if (existing != items.end()) existing->second = std::move(v);
                else items.emplace_back(std::move(k), std::move(v));
            }
            return Value(std::move(items));
        }
    }
    return Value();
}

// ---- statements

Value Interpreter::make_macro(const Stmt& def, bool is_caller) {
    std::weak_ptr<Frame> scope = frame_;
    const Stmt* d = &def;
    return Value(callable(is_caller ? "caller" : def.text, [d, scope](Interpreter& i, const Args& a) {
        return i.call_macro(*d, scope, a);
    }));
}

Value Interpreter::call_macro(const Stmt& def, const std::weak_ptr<Frame>& scope, const Args& args) {
    Depth depth(*this);
    charge(1);
    auto frame = std::make_shared<Frame>();
    frame->parent = scope.lock();
    if (!frame->parent) frame->parent = root_;
    // As jinja2: extra arguments and caller() only for a macro whose body reads varargs, kwargs or caller.
    if (args.positional.size() > def.params.size() && !def.reads_varargs)
        throw Fault("macro '" + def.text + "' takes not more than " + std::to_string(def.params.size()) + " argument(s)");
    std::vector<bool> given(def.params.size(), false);
    Array varargs;
    Object kwargs;
    for (std::size_t i = 0; i < args.positional.size(); ++i) {
        if (i >= def.params.size()) {
            varargs.push_back(args.positional[i]);
            continue;
        }
        frame->vars.emplace_back(def.params[i].name, args.positional[i]);
        given[i] = true;
    }
    bool has_caller = false;
    for (const auto& keyword : args.keywords) {
        const std::string& name = keyword.first;
        const Value& value = keyword.second;
        if (name == "caller" && def.reads_caller) {
            frame->vars.emplace_back("caller", value);
            has_caller = true;
            continue;
        }
        auto it = std::find_if(def.params.begin(), def.params.end(), [&](const Param& p) { return p.name == name; });
        if (it == def.params.end()) {
            if (!def.reads_kwargs) throw Fault("macro '" + def.text + "' takes no keyword argument '" + name + "'");
            kwargs.emplace_back(Value(name), value);
            continue;
        }
        auto index = static_cast<std::size_t>(it - def.params.begin());
        if (given[index]) throw Fault("macro '" + def.text + "' got multiple values for argument '" + name + "'");
        frame->vars.emplace_back(name, value);
        given[index] = true;
    }
    if (def.reads_caller && !has_caller) frame->vars.emplace_back("caller", Value::undefined("No caller defined"));
    if (def.reads_varargs) frame->vars.emplace_back("varargs", Value(std::move(varargs), true));
    if (def.reads_kwargs) frame->vars.emplace_back("kwargs", Value(std::move(kwargs)));
    std::string* saved_out = out_;
    auto saved_frame = frame_;
    frame_ = frame;
    for (std::size_t i = 0; i < def.params.size(); ++i) {
        if (given[i]) continue;
        const Param& p = def.params[i];
        frame->vars.emplace_back(p.name, p.default_value ? eval(*p.default_value)
                                                         : Value::undefined("parameter '" + p.name + "' was not provided"));
    }
    std::string text;
    out_ = &text;
    exec_body(def.body);
    out_ = saved_out;
    frame_ = saved_frame;
    return Value(std::move(text));
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s) {
    Value iterable = eval(*s.expr);
    Array items = iterate(iterable);
    auto outer = frame_;
    if (s.condition) {
        Array kept;
        for (const Value& item : items) {
            charge(1);
            frame_ = std::make_shared<Frame>();
            frame_->parent = outer;
            bind(s.targets, item);
            bool keep = eval(*s.condition).truthy();
            frame_ = outer;
            if (keep) kept.push_back(item);
        }
        items = std::move(kept);
    }
    if (items.empty()) return exec_body(s.else_body);
    auto state = std::make_shared<LoopState>();
    state->items = Value(std::move(items));
    Value loop(state);
    const Array& seq = state->items.array();
    for (std::size_t i = 0; i < seq.size(); ++i) {
        charge(1);
        state->index0 = i;
        frame_ = std::make_shared<Frame>();
        frame_->parent = outer;
        bind(s.targets, seq[i]);
        assign("loop", loop);
        Flow flow = exec_body(s.body);
        frame_ = outer;
        if (flow == Flow::Break) break;
    }
    return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_statement(const Stmt& s) {
    Depth depth(*this);
    switch (s.kind) {
        case StmtKind::Text: emit(s.text); return Flow::Normal;
        case StmtKind::Output: emit(eval(*s.expr).to_string()); return Flow::Normal;
        case StmtKind::If:
            for (std::size_t i = 0; i < s.conditions.size(); ++i)
                if (eval(*s.conditions[i]).truthy()) return exec_body(s.bodies[i]);
            if (s.bodies.size() > s.conditions.size()) return exec_body(s.bodies.back());
            return Flow::Normal;
        case StmtKind::For: return exec_for(s);
        case StmtKind::Set: {
            Value v = eval(*s.expr);
            if (s.attribute.empty()) {
                bind(s.targets, v);
                return Flow::Normal;
            }
            Value target = lookup(s.targets[0]);
            if (target.kind() != Value::Kind::Ns) throw Fault("cannot assign attribute on non-namespace object");
            Object& attributes = target.ns().attributes;
            for (auto& [k, value] : attributes) {
                if (k.is_string() && k.str() == s.attribute) {
                    value = std::move(v);
                    return Flow::Normal;
                }
            }
            attributes.emplace_back(Value(s.attribute), std::move(v));
            return Flow::Normal;
        }
        case StmtKind::SetBlock: {
            Value text(capture(s.body, frame_));
            bind(s.targets, s.expr ? eval_filter(*s.expr, &text) : text);
            return Flow::Normal;
        }
        case StmtKind::Macro: assign(s.text, make_macro(s, false)); return Flow::Normal;
        case StmtKind::CallBlock: {
            const Expr& call_expr = *s.expr;
            Value fn = eval(*call_expr.operands[0]);
            Args args = eval_args(call_expr, 1);
            args.keywords.emplace_back("caller", make_macro(s, true));
            emit(call(fn, args).to_string());
            return Flow::Normal;
        }
        case StmtKind::FilterBlock: {
            Value text(capture(s.body, frame_));
            emit(eval_filter(*s.expr, &text).to_string());
            return Flow::Normal;
        }
        case StmtKind::Generation: emit(capture(s.body, frame_)); return Flow::Normal;
        case StmtKind::Break: return Flow::Break;
        case StmtKind::Continue: return Flow::Continue;
    }
    return Flow::Normal;
}

// ---- filters

namespace {

using Filter = Value (*)(Interpreter&, const Value&, const Args&);
using Test = bool (*)(Interpreter&, const Value&, const Args&);

const std::unordered_map<std::string, Test>& tests();
const std::unordered_map<std::string, Filter>& filters();

// The string a filter works on (jinja2's soft_str keeps Markup).
Value soft_str(const Value& v) { return v.is_string() ? v : Value(v.to_string()); }

// jinja2's make_attrgetter: "a.b.0" looked up item by item.
Value attribute_path(Interpreter& interp, Value v, const std::string& path) {
    std::size_t start = 0;
    while (true) {
        std::size_t dot = path.find('.', start);
        std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
        v = interp.get_item(v, digits && part.size() < 18 ? Value(static_cast<std::int64_t>(std::stoll(part))) : Value(part));
        if (dot == std::string::npos) return v;
        start = dot + 1;
    }
}

Value generator(Array items) {
    auto g = std::make_shared<Generator>();
    g->items = std::move(items);
    return Value(std::move(g));
}

// A generator whose items (and errors) come when it is first consumed, as a Python generator's body runs.
Value lazy(std::function<Array(Interpreter&)> produce) {
    auto g = std::make_shared<Generator>();
    g->produce = std::move(produce);
    return Value(std::move(g));
}

// `item`, or its `attribute` path when the filter was given one.
Value item_or_attribute(Interpreter& interp, const Value& item, const Value* attribute) {
    return attribute && !attribute->is_none() ? attribute_path(interp, item, attribute->to_string()) : item;
}

// Sort key for filters with case_sensitive=False.
Value fold_case(const Value& v, bool case_sensitive) {
    return !case_sensitive && v.is_string() ? Value(lower(v.str())) : v;
}

bool flag(const Args& args, std::size_t index, std::string_view name, bool fallback) {
    const Value* v = args.get(index, name);
    return v ? v->truthy() : fallback;
}

Value filter_tojson(Interpreter& interp, const Value& v, const Args& args) {
    // transformers' override: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
    JsonStyle style;
    style.ensure_ascii = flag(args, 0, "ensure_ascii", false);
    const Value* indent = args.get(1, "indent");
    if (indent && !indent->is_none()) {
        style.indented = true;
        style.item_separator = ",";
        if (indent->is_string()) style.indent = indent->str();
        else if (indent->is_int())
            style.indent = std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(indent->as_int(), 0, 1024)), ' ');
        else throw Fault("indent must be an int or a str");
    }
    const Value* separators = args.get(2, "separators");
    if (separators && !separators->is_none()) {
        if (!separators->is_array() || separators->array().size() != 2 || !separators->array()[0].is_string() ||
            !separators->array()[1].is_string())
            throw Fault("separators must be a (item_separator, key_separator) pair of strings");
        style.item_separator = separators->array()[0].str();
        style.key_separator = separators->array()[1].str();
    }
    style.sort_keys = flag(args, 3, "sort_keys", false);
    std::string out;
    to_json(out, v, style, 0);
    return interp.string_value(std::move(out));
}

Value filter_trim(Interpreter&, const Value& v, const Args& args) {
    Value s = soft_str(v);
    return Value(strip(s.str(), args.get(0, "chars"), true, true), s.is_safe());
}

Value filter_upper(Interpreter&, const Value& v, const Args&) { return Value(upper(soft_str(v).str())); }
Value filter_lower(Interpreter&, const Value& v, const Args&) { return Value(lower(soft_str(v).str())); }
Value filter_capitalize(Interpreter&, const Value& v, const Args&) { return Value(capitalize(soft_str(v).str())); }

// jinja2's do_title: each word (split at whitespace, '-', and opening brackets) capitalised.
Value filter_title(Interpreter&, const Value& v, const Args&) {
    std::u32string u = decode(soft_str(v).str());
    auto separator = [](char32_t c) { return is_py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<'; };
    bool word_start = true;
    for (char32_t& c : u) {
        if (separator(c)) {
            word_start = true;
            continue;
        }
        c = word_start ? to_upper(c) : to_lower(c);
        word_start = false;
    }
    return Value(encode(u));
}

Value filter_length(Interpreter&, const Value& v, const Args&) {
    switch (v.kind()) {
        case Value::Kind::Undefined: return Value(std::int64_t{0});
        case Value::Kind::Str: return Value(static_cast<std::int64_t>(code_points(v.str())));
        case Value::Kind::List: return Value(static_cast<std::int64_t>(v.array().size()));
        case Value::Kind::Dict: return Value(static_cast<std::int64_t>(v.object().size()));
        case Value::Kind::Loop: return Value(static_cast<std::int64_t>(v.loop().items.array().size()));
        default: throw Fault("object of type '" + v.type_name() + "' has no len()");
    }
}

Value filter_list(Interpreter& interp, const Value& v, const Args&) { return Value(interp.iterate(v)); }

Value filter_first(Interpreter& interp, const Value& v, const Args&) {
    if (v.kind() == Value::Kind::Generator) {
        Generator& g = interp.pull(v.generator());
        return g.next < g.items.size() ? g.items[g.next++] : Value::undefined("No first item, sequence was empty.");
    }
    Array items = interp.iterate(v);
    return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value filter_last(Interpreter& interp, const Value& v, const Args&) {
    if (v.kind() == Value::Kind::Generator) throw Fault("'generator' object is not reversible");
    Array items = interp.iterate(v);
    return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value filter_join(Interpreter& interp, const Value& v, const Args& args) {
    std::string separator = arg_or(args, 0, "d", Value("")).to_string();
    const Value* attribute = args.get(1, "attribute");
    std::string out;
    bool first = true;
    Array items = interp.iterate(v);
    interp.charge(items.size());
    for (const Value& item : items) {
        if (!first) out += separator;
        first = false;
        out += (item_or_attribute(interp, item, attribute)).to_string();
        if (out.size() > kMaxStringBytes) throw Fault("string too large (over 64 MiB)");
    }
    return interp.string_value(std::move(out));
}

Value filter_default(Interpreter&, const Value& v, const Args& args) {
    Value fallback = arg_or(args, 0, "default_value", Value(""));
    bool boolean = flag(args, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !v.truthy())) return fallback;
    return v;
}

Value filter_replace(Interpreter& interp, const Value& v, const Args& args) {
    const Value* from = args.get(0, "old");
    const Value* to = args.get(1, "new");
    if (!from || !to) throw Fault("replace() takes old and new");
    const Value* count = args.get(2, "count");
    return interp.string_value(replace_all(interp, soft_str(v).str(), from->to_string(), to->to_string(),
                                           count && count->is_int() ? count->as_int() : -1));
}

Value filter_items(Interpreter&, const Value& v, const Args&) {
    return lazy([v](Interpreter&) {
        if (v.is_undefined()) return Array{};
        if (!v.is_object()) throw Fault("can only get item pairs from a mapping");
        return items_of(v).array();
    });
}

// select/reject/selectattr/rejectattr: `test_at` is where the test's name sits in args.
Array select_items(Interpreter& interp, const Value& v, const Args& args, bool by_attribute, bool keep_matching) {
    std::string attribute;
    std::size_t test_at = 0;
    if (by_attribute) {
        const Value* a = args.get(0, "attr");
        if (!a) throw Fault("selectattr/rejectattr need an attribute");
        attribute = a->to_string();
        test_at = 1;
    }
    std::string test_name;
    Args test_args;
    if (args.positional.size() > test_at) {
        test_name = args.positional[test_at].to_string();
        test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(test_at) + 1, args.positional.end());
        test_args.keywords = args.keywords;
    }
    Array out;
    Array items = v.truthy() ? interp.iterate(v) : Array{};
    // jinja2 looks the test up lazily, when the first item needs it.
    if (!items.empty() && !test_name.empty() && tests().find(test_name) == tests().end())
        throw Fault("no test named '" + test_name + "'");
    interp.charge(items.size());
    for (const Value& item : items) {
        Value subject = by_attribute ? attribute_path(interp, item, attribute) : item;
        bool match = test_name.empty() ? subject.truthy() : interp.apply_test(test_name, subject, test_args);
        if (match == keep_matching) out.push_back(item);
    }
    return out;
}

Value select_lazily(const Value& v, const Args& args, bool by_attribute, bool keep_matching) {
    return lazy([v, args, by_attribute, keep_matching](Interpreter& i) {
        return select_items(i, v, args, by_attribute, keep_matching);
    });
}

Value filter_select(Interpreter&, const Value& v, const Args& a) { return select_lazily(v, a, false, true); }
Value filter_reject(Interpreter&, const Value& v, const Args& a) { return select_lazily(v, a, false, false); }
Value filter_selectattr(Interpreter&, const Value& v, const Args& a) { return select_lazily(v, a, true, true); }
Value filter_rejectattr(Interpreter&, const Value& v, const Args& a) { return select_lazily(v, a, true, false); }

Array map_items(Interpreter& interp, const Value& v, const Args& args) {
    if (!v.truthy()) return {};
    Array items = interp.iterate(v);
    interp.charge(items.size());
    Array out;
    if (args.positional.empty()) {
        const Value* attribute = args.get(args.positional.size(), "attribute");
        if (!attribute) throw Fault("map requires a filter argument");
        const Value* fallback = args.get(args.positional.size(), "default");
        for (const Value& item : items) {
            Value r = attribute_path(interp, item, attribute->to_string());
            out.push_back(r.is_undefined() && fallback ? *fallback : r);
        }
        return out;
    }
    std::string name = args.positional[0].to_string();
    if (!items.empty() && filters().find(name) == filters().end()) throw Fault("no filter named '" + name + "'");
    Args rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keywords = args.keywords;
    for (const Value& item : items) out.push_back(interp.apply_filter(name, item, rest));
    return out;
}

Value filter_map(Interpreter&, const Value& v, const Args& args) {
    return lazy([v, args](Interpreter& i) { return map_items(i, v, args); });
}

Value filter_string(Interpreter&, const Value& v, const Args&) { return soft_str(v); }

// Python's int(str): optional sign, digits with single underscores, surrounding whitespace.
std::optional<std::int64_t> parse_int(const std::string& text, int base) {
    std::string s = strip(text, nullptr, true, true);
    std::size_t i = 0;
    bool negative = false;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
    if (i >= s.size()) return std::nullopt;
    static const char* const prefixes[] = {"", "", "0b", "", "", "", "", "", "0o", "", "", "", "", "", "", "", "0x"};
    if (base == 2 || base == 8 || base == 16) {
        std::string prefix = prefixes[base];
        if (s.size() >= i + 2 && lower(s.substr(i, 2)) == prefix) {
            i += 2;
            if (i < s.size() && s[i] == '_') ++i;
        }
    }
    std::int64_t v = 0;
    bool last_underscore = true;
    for (; i < s.size(); ++i) {
        char c = s[i];
        if (c == '_' && !last_underscore) {
            last_underscore = true;
            continue;
        }
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'z' ? c - 'a' + 10
                : c >= 'A' && c <= 'Z' ? c - 'A' + 10
                                       : 99;
        if (d >= base) return std::nullopt;
        if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return std::nullopt;
        last_underscore = false;
    }
    if (last_underscore) return std::nullopt;
    return negative ? -v : v;
}

std::optional<double> parse_float(const std::string& text) {
    std::string s = strip(text, nullptr, true, true);
    if (s.empty()) return std::nullopt;
    std::string l = lower(s);
    std::string body = (l[0] == '+' || l[0] == '-') ? l.substr(1) : l;
    if (body == "inf" || body == "infinity" || body == "nan") {
        double r = body == "nan" ? std::nan("") : HUGE_VAL;
        return l[0] == '-' ? -r : r;
    }
    if (s.find_first_not_of("0123456789.eE+-") != std::string::npos)
        return std::nullopt;
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) return std::nullopt;
    return d;
}

Value filter_int(Interpreter&, const Value& v, const Args& args) {
    Value fallback = arg_or(args, 0, "default", Value(std::int64_t{0}));
    Value base_v = arg_or(args, 1, "base", Value(std::int64_t{10}));
    if (v.is_undefined()) throw Fault(v.undefined_hint());
    // Python's int() refuses other bases; the filter then falls back to its default.
    if (!base_v.is_int() || base_v.as_int() < 2 || base_v.as_int() > 36) return fallback;
    int base = static_cast<int>(base_v.as_int());
    if (v.is_int()) return Value(v.as_int());
    if (v.kind() == Value::Kind::Float) {
        double d = v.as_double();
        if (!std::isfinite(d) || std::fabs(d) > 9.2e18) throw Fault("cannot convert float to integer");
        return Value(static_cast<std::int64_t>(d));
    }
    if (v.is_string()) {
        if (auto i = parse_int(v.str(), base)) return Value(*i);
        if (auto d = parse_float(v.str()); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18)
            return Value(static_cast<std::int64_t>(*d));
    }
    return fallback;
}

Value filter_float(Interpreter&, const Value& v, const Args& args) {
    Value fallback = arg_or(args, 0, "default", Value(0.0));
    if (v.is_undefined()) throw Fault(v.undefined_hint());
    if (v.is_number()) return Value(v.as_double());
    if (v.is_string())
        if (auto d = parse_float(v.str())) return Value(*d);
    return fallback;
}

Value filter_abs(Interpreter&, const Value& v, const Args&) {
    if (!v.is_number()) throw Fault("bad operand type for abs(): '" + v.type_name() + "'");
    if (v.kind() == Value::Kind::Float) return Value(std::fabs(v.as_double()));
    if (v.as_int() == std::numeric_limits<std::int64_t>::min()) throw Fault("integer overflow");
    return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
}

Value filter_round(Interpreter&, const Value& v, const Args& args) {
    Value precision_v = arg_or(args, 0, "precision", Value(std::int64_t{0}));
    std::string method = arg_or(args, 1, "method", Value("common")).to_string();
    if (!v.is_number()) throw Fault("type " + v.type_name() + " doesn't define __round__ method");
    int precision = precision_v.is_int() ? static_cast<int>(std::clamp<std::int64_t>(precision_v.as_int(), -300, 300)) : 0;
    if (method == "common") {
        if (v.kind() != Value::Kind::Float) return Value(v.as_int());
        if (precision < 0 || !std::isfinite(v.as_double())) {
            double scale = std::pow(10.0, -precision);
            return Value(std::nearbyint(v.as_double() / scale) * scale);
        }
        // printf rounds the exact binary value half to even, as Python's round() does.
        char buf[512];
        std::snprintf(buf, sizeof buf, "%.*f", precision, v.as_double());
        return Value(std::strtod(buf, nullptr));
    }
    if (method != "ceil" && method != "floor") throw Fault("method must be common, ceil or floor");
    double scale = std::pow(10.0, precision);
    double x = v.as_double() * scale;
    return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value filter_unique(Interpreter&, const Value& v, const Args& args) {
    return lazy([v, args](Interpreter& interp) {
        bool case_sensitive = flag(args, 0, "case_sensitive", false);
        const Value* attribute = args.get(1, "attribute");
        Array items = interp.iterate(v);
        interp.charge(items.size() * std::min<std::size_t>(items.size(), 1000));
        Array out;
        std::vector<Value> seen;
        for (const Value& item : items) {
            Value key = fold_case(item_or_attribute(interp, item, attribute), case_sensitive);
            if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
                seen.push_back(key);
                out.push_back(item);
            }
        }
        return out;
    });
}

Value filter_sort(Interpreter& interp, const Value& v, const Args& args) {
    bool reverse = flag(args, 0, "reverse", false);
    bool case_sensitive = flag(args, 1, "case_sensitive", false);
    const Value* attribute = args.get(2, "attribute");
    Array items = interp.iterate(v);
    interp.charge(items.size() * 8);
    std::vector<std::pair<Value, Value>> keyed;
    for (const Value& item : items)
        keyed.emplace_back(fold_case(item_or_attribute(interp, item, attribute),
                                     case_sensitive),
                           item);
    std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
        return reverse ? less(b.first, a.first) : less(a.first, b.first);
    });
    Array out;
    for (auto& [k, item] : keyed) out.push_back(std::move(item));
    return Value(std::move(out));
}

Value filter_reverse(Interpreter& interp, const Value& v, const Args&) {
    if (v.is_string()) {
        std::u32string u = decode(v.str());
        std::reverse(u.begin(), u.end());
        return Value(encode(u));
    }
    bool reversible = v.is_array() || v.is_object();
    Array items = interp.iterate(v);
    std::reverse(items.begin(), items.end());
    return reversible ? generator(std::move(items)) : Value(std::move(items));
}

Value filter_dictsort(Interpreter& interp, const Value& v, const Args& args) {
    if (!v.is_object()) throw Fault("dictsort needs a mapping");
    bool case_sensitive = flag(args, 0, "case_sensitive", false);
    std::string by = arg_or(args, 1, "by", Value("key")).to_string();
    bool reverse = flag(args, 2, "reverse", false);
    if (by != "key" && by != "value") throw Fault("You can only sort by either \"key\" or \"value\"");
    std::size_t at = by == "key" ? 0 : 1;
    Array pairs = items_of(v).array();
    interp.charge(pairs.size() * 8);
    std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
        Value x = fold_case(a.array()[at], case_sensitive);
        Value y = fold_case(b.array()[at], case_sensitive);
        return reverse ? less(y, x) : less(x, y);
    });
    return Value(std::move(pairs));
}

// jinja2's do_indent, splitlines() quirks included.
Value filter_indent(Interpreter& interp, const Value& v, const Args& args) {
    Value width = arg_or(args, 0, "width", Value(std::int64_t{4}));
    bool first = flag(args, 1, "first", false);
    bool blank = flag(args, 2, "blank", false);
    std::string indention;
    if (width.is_string()) indention = width.str();
    else if (width.is_int())
        indention = std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(width.as_int(), 0, 4096)), ' ');
    else throw Fault("indent width must be an int or a str");
    std::vector<std::string> lines = split_lines(soft_str(v).str() + "\n");
    std::string out;
    for (std::size_t i = 0; i < lines.size(); ++i) {
        if (i > 0) out += "\n";
        if (i > 0 && (blank || !lines[i].empty())) out += indention;
        out += lines[i];
        if (out.size() > kMaxStringBytes) throw Fault("string too large (over 64 MiB)");
    }
    if (first) out = indention + out;
    return interp.string_value(std::move(out));
}

Value filter_safe(Interpreter&, const Value& v, const Args&) { return Value(soft_str(v).str(), true); }

Value filter_escape(Interpreter&, const Value& v, const Args&) {
    if (v.is_safe()) return v;
    return Value(html_escape(v.to_string()), true);
}

Value filter_wordcount(Interpreter&, const Value& v, const Args&) {
    std::u32string u = decode(soft_str(v).str());
    std::int64_t words = 0;
    bool in_word = false;
    for (char32_t c : u) {
        bool w = is_alpha(c) || is_digit(c) || c == '_';
        if (w && !in_word) ++words;
        in_word = w;
    }
    return Value(words);
}

Value filter_batch(Interpreter&, const Value& v, const Args& args) {
    if (!args.get(0, "linecount")) throw Fault("batch() missing required argument 'linecount'");
    return lazy([v, args](Interpreter& interp) {
        const Value& count_v = *args.get(0, "linecount");
        const Value* fill = args.get(1, "fill_with");
        // jinja2 closes a row when its length equals linecount: never, for 0 or less or a non-number.
        std::int64_t count = count_v.is_int() ? count_v.as_int() : 0;
        Array items = interp.iterate(v);
        interp.charge(items.size());
        Array out, row;
        for (const Value& item : items) {
            row.push_back(item);
            if (count > 0 && static_cast<std::int64_t>(row.size()) == count) {
                out.emplace_back(std::move(row));
                row = {};
            }
        }
        if (!row.empty()) {
            if (fill && !fill->is_none()) {
                if (!count_v.is_int()) throw Fault("'<' not supported between instances of 'int' and '" + count_v.type_name() + "'");
                while (static_cast<std::int64_t>(row.size()) < count) row.push_back(*fill);
            }
            out.emplace_back(std::move(row));
        }
        return out;
    });
}

Value extreme(Interpreter& interp, const Value& v, const Args& args, bool want_max) {
    bool case_sensitive = flag(args, 0, "case_sensitive", false);
    const Value* attribute = args.get(1, "attribute");
    Array items = interp.iterate(v);
    interp.charge(items.size());
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    auto key = [&](const Value& item) {
        return fold_case(item_or_attribute(interp, item, attribute),
                         case_sensitive);
    };
    std::size_t best = 0;
    Value best_key = key(items[0]);
    for (std::size_t i = 1; i < items.size(); ++i) {
        Value k = key(items[i]);
        if (want_max ? less(best_key, k) : less(k, best_key)) {
            best = i;
            best_key = k;
        }
    }
    return items[best];
}

Value filter_max(Interpreter& i, const Value& v, const Args& a) { return extreme(i, v, a, true); }
Value filter_min(Interpreter& i, const Value& v, const Args& a) { return extreme(i, v, a, false); }

Value filter_sum(Interpreter& interp, const Value& v, const Args& args) {
    const Value* attribute = args.get(0, "attribute");
    Value total = arg_or(args, 1, "start", Value(std::int64_t{0}));
    Array items = interp.iterate(v);
    interp.charge(items.size());
    for (const Value& item : items)
        total = interp.binary("+", total, item_or_attribute(interp, item, attribute));
    return total;
}

Value filter_attr(Interpreter& interp, const Value& v, const Args& args) {
    const Value* name = args.get(0, "name");
    if (!name) throw Fault("attr needs a name");
    return interp.attribute_only(v, name->to_string());
}

Value filter_format(Interpreter& interp, const Value& v, const Args& args) {
    if (!args.positional.empty() && !args.keywords.empty())
        throw Fault("can't handle positional and keyword arguments at the same time");
    Value values;
    if (!args.keywords.empty()) {
        Object mapping;
        for (const auto& [k, x] : args.keywords) mapping.emplace_back(Value(k), x);
        values = Value(std::move(mapping));
    } else {
        values = Value(args.positional, true);
    }
    return interp.string_value(percent_format(soft_str(v).str(), values));
}

// jinja2's do_truncate (leeway 5).
Value filter_truncate(Interpreter&, const Value& v, const Args& args) {
    std::u32string s = decode(soft_str(v).str());
    Value length_v = arg_or(args, 0, "length", Value(std::int64_t{255}));
    bool killwords = flag(args, 1, "killwords", false);
    Value end_v = arg_or(args, 2, "end", Value("..."));
    if (!end_v.is_string()) throw Fault("object of type '" + end_v.type_name() + "' has no len()");
    std::u32string end = decode(end_v.str());
    Value leeway_v = arg_or(args, 3, "leeway", Value(std::int64_t{5}));
    if (!length_v.is_int() || !leeway_v.is_int()) throw Fault("truncate takes integer length and leeway");
    std::int64_t length = length_v.as_int(), leeway = leeway_v.as_int();
    if (length < static_cast<std::int64_t>(end.size())) throw Fault("expected length >= " + std::to_string(end.size()));
    if (leeway < 0) throw Fault("expected leeway >= 0");
    if (static_cast<std::int64_t>(s.size()) <= length + leeway) return soft_str(v);
    std::u32string head = s.substr(0, static_cast<std::size_t>(length) - end.size());
    if (!killwords) {
        std::size_t space = head.rfind(U' ');
        if (space != std::u32string::npos) head.resize(space);
    }
    return Value(encode(head + end));
}

Value filter_center(Interpreter& interp, const Value& v, const Args& args) {
    Args a;
    a.positional.push_back(arg_or(args, 0, "width", Value(std::int64_t{80})));
    return Value(pad(interp, soft_str(v).str(), a, 0));
}

Value filter_pprint(Interpreter&, const Value& v, const Args&) { return Value(v.repr()); }

const std::unordered_map<std::string, Filter>& filters() {
    static const std::unordered_map<std::string, Filter> table = {
        {"tojson", filter_tojson},   {"trim", filter_trim},           {"upper", filter_upper},
        {"lower", filter_lower},     {"capitalize", filter_capitalize}, {"title", filter_title},
        {"length", filter_length},   {"count", filter_length},         {"list", filter_list},
        {"first", filter_first},     {"last", filter_last},            {"join", filter_join},
        {"default", filter_default}, {"d", filter_default},            {"replace", filter_replace},
        {"items", filter_items},     {"select", filter_select},        {"reject", filter_reject},
        {"selectattr", filter_selectattr}, {"rejectattr", filter_rejectattr}, {"map", filter_map},
        {"string", filter_string},   {"int", filter_int},              {"float", filter_float},
        {"abs", filter_abs},         {"round", filter_round},          {"unique", filter_unique},
        {"sort", filter_sort},       {"reverse", filter_reverse},      {"dictsort", filter_dictsort},
        {"indent", filter_indent},   {"safe", filter_safe},            {"escape", filter_escape},
        {"e", filter_escape},        {"forceescape", filter_escape},   {"wordcount", filter_wordcount},
        {"batch", filter_batch},     {"max", filter_max},              {"min", filter_min},
        {"sum", filter_sum},         {"attr", filter_attr},            {"center", filter_center},
        {"pprint", filter_pprint},   {"format", filter_format},       {"truncate", filter_truncate},
    };
    return table;
}

// ---- tests

bool test_defined(Interpreter&, const Value& v, const Args&) { return !v.is_undefined(); }
bool test_undefined(Interpreter&, const Value& v, const Args&) { return v.is_undefined(); }
bool test_none(Interpreter&, const Value& v, const Args&) { return v.is_none(); }
bool test_boolean(Interpreter&, const Value& v, const Args&) { return v.is_bool(); }
bool test_true(Interpreter&, const Value& v, const Args&) { return v.is_bool() && v.as_bool(); }
bool test_false(Interpreter&, const Value& v, const Args&) { return v.is_bool() && !v.as_bool(); }
bool test_integer(Interpreter&, const Value& v, const Args&) { return v.kind() == Value::Kind::Int; }
bool test_float(Interpreter&, const Value& v, const Args&) { return v.kind() == Value::Kind::Float; }
bool test_number(Interpreter&, const Value& v, const Args&) { return v.is_number(); }
bool test_string(Interpreter&, const Value& v, const Args&) { return v.is_string(); }
bool test_mapping(Interpreter&, const Value& v, const Args&) { return v.is_object(); }
bool test_callable(Interpreter&, const Value& v, const Args&) { return v.is_callable() || v.is_undefined(); }
bool test_escaped(Interpreter&, const Value& v, const Args&) { return v.is_safe(); }

// Undefined iterates (as empty) and has len() and [] in jinja2, so it is iterable and a sequence.
bool test_iterable(Interpreter&, const Value& v, const Args&) {
    using K = Value::Kind;
    return v.kind() == K::Undefined || v.kind() == K::Str || v.kind() == K::List || v.kind() == K::Dict ||
           v.kind() == K::Loop || v.kind() == K::Generator;
}
bool test_sequence(Interpreter&, const Value& v, const Args&) {
    using K = Value::Kind;
    return v.kind() == K::Undefined || v.kind() == K::Str || v.kind() == K::List || v.kind() == K::Dict;
}

Value test_operand(const Args& args, const char* name) {
    const Value* v = args.get(0, name);
    if (!v) throw Fault(std::string("test needs an argument (") + name + ")");
    return *v;
}

bool test_odd(Interpreter&, const Value& v, const Args&) {
    if (!v.is_number()) throw Fault("unsupported operand type(s) for %: '" + v.type_name() + "' and 'int'");
    return python_mod(v, Value(std::int64_t{2})).as_double() == 1;
}
bool test_even(Interpreter&, const Value& v, const Args&) {
    if (!v.is_number()) throw Fault("unsupported operand type(s) for %: '" + v.type_name() + "' and 'int'");
    return python_mod(v, Value(std::int64_t{2})).as_double() == 0;
}
bool test_divisibleby(Interpreter&, const Value& v, const Args& args) {
    Value n = test_operand(args, "num");
    if (!v.is_number() || !n.is_number()) throw Fault("unsupported operand type(s) for %");
    return python_mod(v, n).as_double() == 0;
}
bool test_eq(Interpreter&, const Value& v, const Args& a) { return equals(v, test_operand(a, "other")); }
bool test_ne(Interpreter&, const Value& v, const Args& a) { return !equals(v, test_operand(a, "other")); }
bool test_lt(Interpreter&, const Value& v, const Args& a) { return less(v, test_operand(a, "other")); }
bool test_gt(Interpreter&, const Value& v, const Args& a) { return less(test_operand(a, "other"), v); }
bool test_le(Interpreter&, const Value& v, const Args& a) {
    Value o = test_operand(a, "other");
    return equals(v, o) || less(v, o);
}
bool test_ge(Interpreter&, const Value& v, const Args& a) {
    Value o = test_operand(a, "other");
    return equals(v, o) || less(o, v);
}
bool test_in(Interpreter& interp, const Value& v, const Args& a) {
    return interp.contains(test_operand(a, "seq"), v);
}
bool test_lower(Interpreter&, const Value& v, const Args&) {
    std::string s = v.to_string();
    return lower(s) == s && upper(s) != s;
}
bool test_upper(Interpreter&, const Value& v, const Args&) {
    std::string s = v.to_string();
    return upper(s) == s && lower(s) != s;
}
bool test_sameas(Interpreter&, const Value& v, const Args& a) {
    Value o = test_operand(a, "other");
    if (v.kind() != o.kind()) return false;
    switch (v.kind()) {
        case Value::Kind::List: return &v.array() == &o.array();
        case Value::Kind::Dict: return &v.object() == &o.object();
        default: return equals(v, o);
    }
}
bool test_filter(Interpreter&, const Value& v, const Args&) { return v.is_string() && filters().count(v.str()) > 0; }
bool test_test(Interpreter&, const Value& v, const Args&) { return v.is_string() && tests().count(v.str()) > 0; }

const std::unordered_map<std::string, Test>& tests() {
    static const std::unordered_map<std::string, Test> table = {
        {"defined", test_defined},   {"undefined", test_undefined}, {"none", test_none},
        {"boolean", test_boolean},   {"true", test_true},           {"false", test_false},
        {"integer", test_integer},   {"float", test_float},         {"number", test_number},
        {"string", test_string},     {"mapping", test_mapping},     {"iterable", test_iterable},
        {"sequence", test_sequence}, {"callable", test_callable},   {"escaped", test_escaped},
        {"odd", test_odd},           {"even", test_even},           {"divisibleby", test_divisibleby},
        {"eq", test_eq},             {"equalto", test_eq},          {"==", test_eq},
        {"ne", test_ne},             {"!=", test_ne},               {"lt", test_lt},
        {"lessthan", test_lt},       {"<", test_lt},                {"le", test_le},
        {"<=", test_le},             {"gt", test_gt},               {"greaterthan", test_gt},
        {">", test_gt},              {"ge", test_ge},               {">=", test_ge},
        {"in", test_in},             {"lower", test_lower},         {"upper", test_upper},
        {"sameas", test_sameas},     {"filter", test_filter},       {"test", test_test},
    };
    return table;
}

// The parameters (after the value) of each filter that takes a fixed set; absent: variadic (map, select, ...).
const std::unordered_map<std::string, std::vector<std::string>>& filter_parameters() {
    static const std::unordered_map<std::string, std::vector<std::string>> table = {
        {"tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}},
        {"trim", {"chars"}}, {"upper", {}}, {"lower", {}}, {"capitalize", {}}, {"title", {}}, {"length", {}},
        {"count", {}}, {"list", {}}, {"first", {}}, {"last", {}}, {"join", {"d", "attribute"}},
        {"default", {"default_value", "boolean"}}, {"d", {"default_value", "boolean"}}, {"replace", {"old", "new", "count"}},
        {"items", {}}, {"string", {}}, {"int", {"default", "base"}}, {"float", {"default"}}, {"abs", {}},
        {"round", {"precision", "method"}}, {"unique", {"case_sensitive", "attribute"}},
        {"sort", {"reverse", "case_sensitive", "attribute"}}, {"reverse", {}},
        {"dictsort", {"case_sensitive", "by", "reverse"}},
        {"indent", {"width", "first", "blank"}}, {"safe", {}}, {"escape", {}}, {"e", {}}, {"forceescape", {}},
        {"wordcount", {}}, {"batch", {"linecount", "fill_with"}}, {"max", {"case_sensitive", "attribute"}},
        {"min", {"case_sensitive", "attribute"}}, {"sum", {"attribute", "start"}}, {"attr", {"name"}}, {"center", {"width"}},
        {"pprint", {}}, {"truncate", {"length", "killwords", "end", "leeway"}},
    };
    return table;
}

// Python's TypeError for arguments a function does not take.
void check_arguments(const std::string& name, const std::vector<std::string>& parameters, const Args& args) {
    if (args.positional.size() > parameters.size())
        throw Fault(name + "() takes " + std::to_string(parameters.size() + 1) + " positional argument(s) but " +
                    std::to_string(args.positional.size() + 1) + " were given");
    for (const auto& keyword : args.keywords) {
        auto it = std::find(parameters.begin(), parameters.end(), keyword.first);
        if (it == parameters.end()) throw Fault(name + "() got an unexpected keyword argument '" + keyword.first + "'");
        if (static_cast<std::size_t>(it - parameters.begin()) < args.positional.size())
            throw Fault(name + "() got multiple values for argument '" + keyword.first + "'");
    }
}

const std::vector<std::string>& test_parameters(const std::string& name) {
    static const std::vector<std::string> none, other{"other"}, num{"num"}, seq{"seq"};
    static const std::unordered_map<std::string, const std::vector<std::string>*> table = {
        {"divisibleby", &num}, {"in", &seq},    {"eq", &other},          {"equalto", &other}, {"==", &other},
        {"ne", &other},        {"!=", &other},  {"lt", &other},          {"lessthan", &other}, {"<", &other},
        {"le", &other},        {"<=", &other},  {"gt", &other},          {"greaterthan", &other}, {">", &other},
        {"ge", &other},        {">=", &other},  {"sameas", &other},
    };
    auto it = table.find(name);
    return it == table.end() ? none : *it->second;
}

}  // namespace

Value Interpreter::apply_filter(const std::string& name, const Value& input, const Args& args) {
    auto it = filters().find(name);
    if (it == filters().end()) throw Fault("no filter named '" + name + "'");
    auto parameters = filter_parameters().find(name);
    if (parameters != filter_parameters().end()) check_arguments(name, parameters->second, args);
    charge(input.is_string() ? input.str().size() / kBytesPerStep : input.is_array() ? input.array().size() : 1);
    return it->second(*this, input, args);
}

bool Interpreter::apply_test(const std::string& name, const Value& input, const Args& args) {
    auto it = tests().find(name);
    if (it == tests().end()) throw Fault("no test named '" + name + "'");
    const auto& parameters = test_parameters(name);
    check_arguments(name, parameters, args);
    return it->second(*this, input, args);
}

bool is_known_filter(const std::string& name) { return filters().count(name) > 0; }
bool is_known_test(const std::string& name) { return tests().count(name) > 0; }

// ---- the public face (template.h)

Template::Template(std::shared_ptr<const Program> program) : program_(std::move(program)) {}

Template Template::parse(std::string_view source) {
    return Template(std::make_shared<const Program>(parse_program(tokenize(source))));
}

std::string Template::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
    try {
        Interpreter interp(context, options);
        return interp.render(*program_);
    } catch (const Fault& f) {
        throw TemplateError(std::string("chat template: ") + f.what());
    }
}

}  // namespace cellm::jinja
