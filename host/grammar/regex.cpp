// ECMAScript regex -> GBNF over JSON string text. The pattern is parsed into a small tree (character sets,
// sequences, alternations, repetitions), then each character set is written as the JSON spellings of its
// members, so the grammar constrains the decoded string while matching the escaped text.
#include "grammar/regex.h"

#include "grammar/grammar.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <optional>

namespace cellm::grammar {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int kUnbounded = -1;

using CharSet = std::vector<CharRange>;

CharSet normalized(CharSet set) {
    std::sort(set.begin(), set.end(), [](const CharRange& a, const CharRange& b) { return a.first < b.first; });
    CharSet out;
    for (const CharRange& r : set) {
        if (!out.empty() && r.first <= out.back().last + 1)
            out.back().last = std::max(out.back().last, r.last);
        else
            out.push_back(r);
    }
    return out;
}

// Surrogates are not characters: a decoded JSON string never holds one on its own.
CharSet complement(const CharSet& set) {
    CharSet out;
    uint32_t next = 0;
    for (const CharRange& r : normalized(set)) {
        if (r.first > next) out.push_back({next, r.first - 1});
        next = r.last + 1;
    }
    if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
    CharSet without_surrogates;
    for (const CharRange& r : out) {
        if (r.last < 0xD800 || r.first > 0xDFFF) {
            without_surrogates.push_back(r);
            continue;
        }
        if (r.first < 0xD800) without_surrogates.push_back({r.first, 0xD7FF});
        if (r.last > 0xDFFF) without_surrogates.push_back({0xE000, r.last});
    }
    return without_surrogates;
}

CharSet intersect(const CharSet& a, const CharSet& b) {
    CharSet out;
    for (const CharRange& x : a)
        for (const CharRange& y : b) {
            uint32_t first = std::max(x.first, y.first), last = std::min(x.last, y.last);
            if (first <= last) out.push_back({first, last});
        }
    return normalized(out);
}

bool contains(const CharSet& set, uint32_t c) {
    return std::any_of(set.begin(), set.end(), [c](const CharRange& r) { return r.first <= c && c <= r.last; });
}

const CharSet kDigits = {{'0', '9'}};
const CharSet kWordChars = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMAScript's WhiteSpace and LineTerminator.
const CharSet kSpaces = {{0x09, 0x0D}, {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
                         {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
// What `.` leaves out: the line terminators.
const CharSet kLineTerminators = {{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}};

struct Node {
    enum Kind { Chars, Seq, Alt, Repeat, Begin, End };
    Kind kind = Seq;
    CharSet chars;
    std::vector<Node> kids;
    int min = 0, max = 0;  // Repeat
};

Node make(Node::Kind kind) {
    Node n;
    n.kind = kind;
    return n;
}

class Parser {
public:
    explicit Parser(std::string_view pattern) : pattern_(pattern) {
        for (size_t i = 0; i < pattern.size();) text_.push_back(decode(pattern, i));
    }

    Node parse() {
        Node n = alternation();
        if (pos_ < text_.size()) fail("unbalanced ')'");
        return n;
    }

private:
    [[noreturn]] void fail(const std::string& what) const {
        throw GrammarError("pattern \"" + std::string(pattern_) + "\": " + what);
    }

    static uint32_t decode(std::string_view s, size_t& i) {
        auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
        uint8_t b = byte(i);
        int extra = b < 0x80 ? 0 : b < 0xE0 ? 1 : b < 0xF0 ? 2 : 3;
        uint32_t c = extra == 0 ? b : extra == 1 ? (b & 0x1F) : extra == 2 ? (b & 0x0F) : (b & 0x07);
        ++i;
        for (int k = 0; k < extra && i < s.size(); ++k, ++i) c = (c << 6) | (byte(i) & 0x3F);
        return c;
    }

    bool at_end() const { return pos_ >= text_.size(); }
    uint32_t peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : 0; }
    bool eat(uint32_t c) {
        if (at_end() || text_[pos_] != c) return false;
        ++pos_;
        return true;
    }

    Node alternation() {
        Node alt = make(Node::Alt);
        alt.kids.push_back(sequence());
        while (eat('|')) alt.kids.push_back(sequence());
        return alt.kids.size() == 1 ? std::move(alt.kids[0]) : alt;
    }

    Node sequence() {
        Node seq = make(Node::Seq);
        while (!at_end() && peek() != '|' && peek() != ')') seq.kids.push_back(term());
        return seq;
    }

    Node term() {
        Node atom_node = atom();
        for (;;) {
            int min = 0, max = 0;
            if (eat('*')) {
                max = kUnbounded;
            } else if (eat('+')) {
                min = 1, max = kUnbounded;
            } else if (eat('?')) {
                max = 1;
            } else if (!counted(min, max)) {
                return atom_node;
            }
            if (atom_node.kind == Node::Begin || atom_node.kind == Node::End) fail("quantified anchor");
            if (max != kUnbounded && max < min) fail("quantifier {m,n} with n < m");
            eat('?');  // lazy: the same language
            Node rep = make(Node::Repeat);
            rep.min = min, rep.max = max;
            rep.kids.push_back(std::move(atom_node));
            atom_node = std::move(rep);
        }
    }

    // {m}, {m,}, {m,n}; a '{' that starts none of them is a literal (Annex B), left for atom().
    bool counted(int& min, int& max) {
        if (peek() != '{') return false;
        size_t p = pos_ + 1;
        auto number = [&](int& out) {
            size_t start = p;
            long long v = 0;
            while (p < text_.size() && text_[p] >= '0' && text_[p] <= '9') {
                v = std::min<long long>(v * 10 + (text_[p] - '0'), 1 << 20);
                ++p;
            }
            out = static_cast<int>(v);
            return p > start;
        };
        if (!number(min)) return false;
        max = min;
        if (p < text_.size() && text_[p] == ',') {
            ++p;
            if (!number(max)) max = kUnbounded;
        }
        if (p >= text_.size() || text_[p] != '}') return false;
        if (min > 10000 || max > 10000) fail("repetition count over 10000");
        pos_ = p + 1;
        return true;
    }

    Node chars(CharSet set) {
        Node n = make(Node::Chars);
        n.chars = normalized(std::move(set));
        return n;
    }

    Node atom() {
        uint32_t c = text_[pos_++];
        switch (c) {
            case '^': return make(Node::Begin);
            case '$': return make(Node::End);
            case '.': return chars(complement(kLineTerminators));
            case '[': return char_class();
            case '\\': return escape(false);
            case '*':
            case '+':
            case '?': fail("nothing to repeat");
            case '(': {
                if (eat('?')) {
                    if (eat(':')) {
                    } else if (peek() == '=' || peek() == '!') {
                        fail("lookahead (?= / (?! is not supported");
                    } else if (peek() == '<' && (peek(1) == '=' || peek(1) == '!')) {
                        fail("lookbehind (?<= / (?<! is not supported");
                    } else if (eat('<')) {
                        while (!at_end() && peek() != '>') ++pos_;
                        if (!eat('>')) fail("unterminated group name");
                    } else {
                        fail("unsupported group syntax (?" + std::string(1, static_cast<char>(peek())));
                    }
                }
                Node inner = alternation();
                if (!eat(')')) fail("missing ')'");
                return inner;
            }
            default: return chars({{c, c}});
        }
    }

    uint32_t hex(int digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i) {
            uint32_t d = peek();
            if (d >= '0' && d <= '9')
                v = v * 16 + (d - '0');
            else if ((d | 0x20) >= 'a' && (d | 0x20) <= 'f')
                v = v * 16 + ((d | 0x20) - 'a' + 10);
            else
                fail("bad hex escape");
            ++pos_;
        }
        return v;
    }

    // After a backslash: a set (\d \w \s and complements) or one character. In a class, \b is backspace.
    Node escape(bool in_class) {
        if (at_end()) fail("trailing backslash");
        uint32_t c = text_[pos_++];
        switch (c) {
            case 'd': return chars(kDigits);
            case 'D': return chars(complement(kDigits));
            case 'w': return chars(kWordChars);
            case 'W': return chars(complement(kWordChars));
            case 's': return chars(kSpaces);
            case 'S': return chars(complement(kSpaces));
            case 'n': return chars({{'\n', '\n'}});
            case 'r': return chars({{'\r', '\r'}});
            case 't': return chars({{'\t', '\t'}});
            case 'v': return chars({{0x0B, 0x0B}});
            case 'f': return chars({{0x0C, 0x0C}});
            case 'b':
                if (in_class) return chars({{0x08, 0x08}});
                fail("word boundary \\b is not supported");
            case 'B': fail("word boundary \\B is not supported");
            case 'k': fail("backreference \\k is not supported");
            case 'p':
            case 'P': fail("Unicode property escape \\" + std::string(1, static_cast<char>(c)) + " is not supported");
            case 'c': {
                uint32_t letter = peek();
                if (((letter | 0x20) < 'a' || (letter | 0x20) > 'z')) return chars({{'\\', '\\'}, {'c', 'c'}});
                ++pos_;
                return chars({{letter % 32, letter % 32}});
            }
            case 'x': {
                uint32_t v = hex(2);
                return chars({{v, v}});
            }
            case 'u': {
                uint32_t v;
                if (eat('{')) {
                    v = 0;
                    while (!at_end() && peek() != '}') v = v * 16 + hex(1);
                    if (!eat('}') || v > kMaxCodePoint) fail("bad \\u{...} escape");
                } else {
                    v = hex(4);
                    // A surrogate pair written as two escapes is one character.
                    if (v >= 0xD800 && v <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
                        size_t save = pos_;
                        pos_ += 2;
                        uint32_t low = hex(4);
                        if (low >= 0xDC00 && low <= 0xDFFF)
                            v = 0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00);
                        else
                            pos_ = save;
                    }
                }
                if (v >= 0xD800 && v <= 0xDFFF) fail("lone surrogate escape");
                return chars({{v, v}});
            }
            case '0':
                if (peek() >= '0' && peek() <= '9') fail("octal escape is not supported");
                return chars({{0, 0}});
            default:
                if (c >= '1' && c <= '9') {
                    if (in_class) fail("octal escape is not supported");
                    fail("backreference \\" + std::string(1, static_cast<char>(c)) + " is not supported");
                }
                return chars({{c, c}});  // identity escape: \. \\ \/ \- ...
        }
    }

    Node char_class() {
        bool negated = eat('^');
        CharSet set;
        for (;;) {
            if (at_end()) fail("missing ']'");
            if (eat(']')) break;
            Node low = class_atom();
            if (peek() == '-' && peek(1) != ']' && pos_ + 1 < text_.size()) {
                size_t save = pos_;
                ++pos_;
                Node high = class_atom();
                bool single = low.chars.size() == 1 && low.chars[0].first == low.chars[0].last &&
                              high.chars.size() == 1 && high.chars[0].first == high.chars[0].last;
                if (single) {
                    if (high.chars[0].first < low.chars[0].first) fail("class range out of order");
                    set.push_back({low.chars[0].first, high.chars[0].first});
                    continue;
                }
                pos_ = save;  // [\d-z]: the '-' is a literal (Annex B)
            }
            set.insert(set.end(), low.chars.begin(), low.chars.end());
        }
        return chars(negated ? complement(set) : set);
    }

    Node class_atom() {
        uint32_t c = text_[pos_++];
        if (c == '\\') {
            if (peek() == '-') {
                ++pos_;
                return chars({{'-', '-'}});
            }
            return escape(true);
        }
        return chars({{c, c}});
    }

    std::string_view pattern_;
    std::vector<uint32_t> text_;
    size_t pos_ = 0;
};

// GBNF character-class text for code point c.
std::string class_char(uint32_t c) {
    char buf[16];
    if (c < 0x20 || c == 0x7F || c == '"' || c == '\\' || c == ']' || c == '[' || c == '-' || c == '^') {
        std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned>(c));
        return buf;
    }
    if (c < 0x80) return std::string(1, static_cast<char>(c));
    if (c <= 0xFFFF) {
        std::snprintf(buf, sizeof buf, "\\u%04X", static_cast<unsigned>(c));
        return buf;
    }
    // Beyond the BMP the text carries the character itself, in UTF-8.
    std::string out;
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
    return out;
}

std::string class_text(const CharSet& set) {
    std::string out = "[";
    for (const CharRange& r : set) {
        out += class_char(r.first);
        if (r.last == r.first) continue;
        if (r.last > r.first + 1) out += '-';
        out += class_char(r.last);
    }
    return out + "]";
}

// One character of `set` in its JSON spellings: plain where JSON allows it, escaped where it must be
// (and `/`, which JSON may escape).
std::string json_char(const CharSet& set) {
    static const CharSet kPlain = complement({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
    std::vector<std::string> alternatives;
    CharSet plain = intersect(set, kPlain);
    if (!plain.empty()) alternatives.push_back(class_text(plain));
    if (contains(set, '"')) alternatives.push_back("\"\\\\\\\"\"");
    if (contains(set, '\\')) alternatives.push_back("\"\\\\\\\\\"");
    if (contains(set, '/')) alternatives.push_back("\"\\\\/\"");
    static const std::pair<uint32_t, char> kShort[] = {{0x08, 'b'}, {0x0C, 'f'}, {0x0A, 'n'}, {0x0D, 'r'}, {0x09, 't'}};
    for (auto [c, letter] : kShort)
        if (contains(set, c)) alternatives.push_back(std::string("\"\\\\") + letter + "\"");
    for (uint32_t high = 0; high < 2; ++high) {
        std::string lows;
        for (uint32_t low = 0; low < 16; ++low) {
            if (!contains(set, high * 16 + low)) continue;
            lows += "0123456789abcdef"[low];
            if (low >= 10) lows += "0123456789ABCDEF"[low];
        }
        if (!lows.empty()) alternatives.push_back("\"\\\\u00" + std::to_string(high) + "\" [" + lows + "]");
    }
    if (alternatives.empty()) throw GrammarError("pattern has a character class that matches nothing");
    if (alternatives.size() == 1) return alternatives[0];
    std::string out = "(";
    for (size_t i = 0; i < alternatives.size(); ++i) {
        if (i > 0) out += " | ";
        out += alternatives[i];
    }
    return out + ")";
}

std::string emit(const Node& n) {
    switch (n.kind) {
        case Node::Chars: return json_char(n.chars);
        case Node::Begin: throw GrammarError("anchor ^ is supported only at the start of the pattern");
        case Node::End: throw GrammarError("anchor $ is supported only at the end of the pattern");
        case Node::Seq: {
            if (n.kids.empty()) return "\"\"";
            std::string out;
            for (const Node& k : n.kids) {
                if (!out.empty()) out += ' ';
                out += emit(k);
            }
            return n.kids.size() == 1 ? out : "(" + out + ")";
        }
        case Node::Alt: {
            std::string out = "(";
            for (size_t i = 0; i < n.kids.size(); ++i) {
                if (i > 0) out += " | ";
                out += emit(n.kids[i]);
            }
            return out + ")";
        }
        case Node::Repeat: {
            std::string inner = emit(n.kids[0]);
            if (n.kids[0].kind != Node::Chars) inner = "(" + inner + ")";  // (a{4})* : one postfix per item
            if (n.max == 0) return "\"\"";
            if (n.min == 0 && n.max == kUnbounded) return inner + "*";
            if (n.min == 1 && n.max == kUnbounded) return inner + "+";
            if (n.min == 0 && n.max == 1) return inner + "?";
            // x{n} x* rather than x{n,}: an open count is the costliest repetition to expand.
            if (n.max == kUnbounded) return inner + "{" + std::to_string(n.min) + "} " + inner + "*";
            if (n.min == n.max) return inner + "{" + std::to_string(n.min) + "}";
            return inner + "{" + std::to_string(n.min) + "," + std::to_string(n.max) + "}";
        }
    }
    return "";
}

}  // namespace

std::string regex_to_gbnf(std::string_view pattern) {
    Node tree = Parser(pattern).parse();
    // Anchors count only at the ends of a top-level alternative; an unanchored side matches any characters.
    static const std::string kAnyChars =
        "([^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}))*";
    std::vector<Node> alternatives = tree.kind == Node::Alt ? std::move(tree.kids) : std::vector<Node>{tree};
    std::string out;
    for (Node& alt : alternatives) {
        if (alt.kind != Node::Seq) {
            Node seq = make(Node::Seq);
            seq.kids.push_back(std::move(alt));
            alt = std::move(seq);
        }
        bool begins = false, ends = false;
        while (!alt.kids.empty() && alt.kids.front().kind == Node::Begin) {
            begins = true;
            alt.kids.erase(alt.kids.begin());
        }
        while (!alt.kids.empty() && alt.kids.back().kind == Node::End) {
            ends = true;
            alt.kids.pop_back();
        }
        std::string body = emit(alt);
        if (!begins) body = kAnyChars + " " + body;
        if (!ends) body += " " + kAnyChars;
        out += (out.empty() ? "" : " | ") + body;
    }
    return out;
}

namespace {

// Backtracking over the tree: does `n` match text[pos..] so that `next` accepts where it ends?
bool match(const Node& n, const std::vector<uint32_t>& text, size_t pos, const std::function<bool(size_t)>& next) {
    switch (n.kind) {
        case Node::Chars: return pos < text.size() && contains(n.chars, text[pos]) && next(pos + 1);
        case Node::Begin: return pos == 0 && next(pos);
        case Node::End: return pos == text.size() && next(pos);
        case Node::Alt:
            return std::any_of(n.kids.begin(), n.kids.end(), [&](const Node& k) { return match(k, text, pos, next); });
        case Node::Seq: {
            std::function<bool(size_t, size_t)> from = [&](size_t i, size_t p) {
                return i == n.kids.size() ? next(p) : match(n.kids[i], text, p, [&](size_t q) { return from(i + 1, q); });
            };
            return from(0, pos);
        }
        case Node::Repeat: {
            // Greedy; an iteration that consumes nothing ends the repetition (as ECMAScript does).
            std::function<bool(int, size_t)> times = [&](int count, size_t p) {
                if ((n.max == kUnbounded || count < n.max) &&
                    match(n.kids[0], text, p, [&](size_t q) { return q != p && times(count + 1, q); }))
                    return true;
                return count >= n.min && next(p);
            };
            return times(0, pos);
        }
    }
    return false;
}

}  // namespace

bool regex_search(std::string_view pattern, std::string_view text) {
    Node tree = Parser(pattern).parse();
    std::vector<uint32_t> code_points;
    for (size_t i = 0; i < text.size();) {
        auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
        uint8_t b = byte(i);
        int extra = b < 0x80 ? 0 : b < 0xE0 ? 1 : b < 0xF0 ? 2 : 3;
        uint32_t c = extra == 0 ? b : extra == 1 ? (b & 0x1F) : extra == 2 ? (b & 0x0F) : (b & 0x07);
        ++i;
        for (int k = 0; k < extra && i < text.size(); ++k, ++i) c = (c << 6) | (byte(i) & 0x3F);
        code_points.push_back(c);
    }
    for (size_t start = 0; start <= code_points.size(); ++start)
        if (match(tree, code_points, start, [](size_t) { return true; })) return true;
    return false;
}

}  // namespace cellm::grammar
