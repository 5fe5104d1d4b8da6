#include "grammar/gbnf.h"

#include <algorithm>
#include <unordered_map>

namespace cellm::grammar {

namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
// Bounds a{m,n}: each count copies the item, so a huge one would build a huge grammar.
constexpr uint32_t kMaxRepeat = 10000;

class Parser {
public:
    Parser(std::string_view text, size_t max_bytes) : text_(text), max_bytes_(max_bytes) {}

    RuleSet parse() {
        if (text_.size() > max_bytes_) {
            throw GrammarError("the grammar is " + std::to_string(text_.size()) + " bytes; the limit is " +
                               std::to_string(max_bytes_));
        }
        skip_space(true);
        while (pos_ < text_.size()) {
            const std::string name = parse_name();
            skip_space(false);
            if (text_.substr(pos_, 3) != "::=") fail("expected '::=' after rule name '" + name + "'");
            pos_ += 3;
            skip_space(true);
            const uint32_t id = rule_id(name);
            if (defined_[id]) fail("rule '" + name + "' is defined twice");
            defined_[id] = true;
            set_.rules[id].alternatives = parse_alternatives(false);
            if (pos_ < text_.size() && text_[pos_] != '\n' && text_[pos_] != '\r') fail("unexpected character");
            skip_space(true);
        }
        for (size_t i = 0; i < set_.rules.size(); ++i) {
            if (!defined_[i]) throw GrammarError("undefined rule '" + set_.rules[i].name + "'");
        }
        const auto root = names_.find("root");
        if (root == names_.end()) throw GrammarError("the grammar has no rule 'root'");
        set_.root = root->second;
        return std::move(set_);
    }

private:
    using Sequence = std::vector<RuleItem>;

    [[noreturn]] void fail(const std::string& what) const {
        size_t line = 1, column = 1;
        for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
            if (text_[i] == '\n') {
                ++line;
                column = 1;
            } else {
                ++column;
            }
        }
        throw GrammarError("GBNF line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + what);
    }

    bool at_end() const { return pos_ >= text_.size(); }
    char peek() const { return at_end() ? '\0' : text_[pos_]; }

    // Spaces, tabs and comments; line breaks too where a rule cannot end here.
    void skip_space(bool newlines) {
        while (!at_end()) {
            const char c = text_[pos_];
            if (c == ' ' || c == '\t') {
                ++pos_;
            } else if (c == '#') {
                while (!at_end() && text_[pos_] != '\n') ++pos_;
            } else if ((c == '\n' || c == '\r') && newlines) {
                ++pos_;
            } else {
                break;
            }
        }
    }

    // At a line break inside a rule: whether the next line goes on with '|'.
    bool continues_with_bar() {
        size_t p = pos_;
        while (p < text_.size()) {
            const char c = text_[p];
            if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
                ++p;
            } else if (c == '#') {
                while (p < text_.size() && text_[p] != '\n') ++p;
            } else {
                break;
            }
        }
        if (p < text_.size() && text_[p] == '|') {
            pos_ = p;
            return true;
        }
        return false;
    }

    static bool is_name_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    }

    std::string parse_name() {
        const size_t start = pos_;
        while (!at_end() && is_name_char(text_[pos_])) ++pos_;
        if (pos_ == start) fail("expected a rule name");
        return std::string(text_.substr(start, pos_ - start));
    }

    uint32_t rule_id(const std::string& name) {
        const auto [it, added] = names_.emplace(name, static_cast<uint32_t>(set_.rules.size()));
        if (added) {
            set_.rules.push_back({name, {}});
            defined_.push_back(false);
        }
        return it->second;
    }

    uint32_t new_rule(std::vector<Sequence> alternatives) {
        const uint32_t id = static_cast<uint32_t>(set_.rules.size());
        // Named after its id; GBNF names cannot hold parentheses, so it never clashes. (Built with append: GCC
        // 12 warns falsely on literal + string here.)
        std::string name = "(";
        name.append(std::to_string(id)).append(")");
        set_.rules.push_back({std::move(name), std::move(alternatives)});
        defined_.push_back(true);
        return id;
    }

    static RuleItem ref(uint32_t rule) {
        RuleItem item;
        item.kind = RuleItem::Rule;
        item.rule = rule;
        return item;
    }

    static uint32_t hex_digit(char c) {
        if (c >= '0' && c <= '9') return static_cast<uint32_t>(c - '0');
        if (c >= 'a' && c <= 'f') return static_cast<uint32_t>(c - 'a' + 10);
        if (c >= 'A' && c <= 'F') return static_cast<uint32_t>(c - 'A' + 10);
        return 16;
    }

    // One character of a string or class, escapes and UTF-8 decoded.
    uint32_t parse_char() {
        if (at_end()) fail("unexpected end of grammar");
        const auto byte = static_cast<unsigned char>(text_[pos_]);
        if (byte == '\\') {
            ++pos_;
            if (at_end()) fail("unexpected end of grammar after '\\'");
            const char e = text_[pos_++];
            switch (e) {
                case 'n': return '\n';
                case 'r': return '\r';
                case 't': return '\t';
                case '\\': case '"': case '\'': case '[': case ']': case '-': case '/': return static_cast<uint32_t>(e);
                case 'x': return parse_hex(2);
                case 'u': return parse_hex(4);
                case 'U': return parse_hex(8);
                default: --pos_; fail(std::string("unknown escape '\\") + e + "'");
            }
        }
        if (byte < 0x80) {
            ++pos_;
            return byte;
        }
        const int length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 0;
        if (length == 0 || byte > 0xF4 || pos_ + static_cast<size_t>(length) > text_.size()) fail("malformed UTF-8");
        uint32_t cp = byte & (0x7Fu >> length);
        for (int i = 1; i < length; ++i) {
            const auto next = static_cast<unsigned char>(text_[pos_ + static_cast<size_t>(i)]);
            if ((next & 0xC0) != 0x80) fail("malformed UTF-8");
            cp = (cp << 6) | (next & 0x3Fu);
        }
        static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < kMin[length] || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) fail("malformed UTF-8");
        pos_ += static_cast<size_t>(length);
        return cp;
    }

    uint32_t parse_hex(int digits) {
        uint32_t value = 0;
        for (int i = 0; i < digits; ++i) {
            const uint32_t d = at_end() ? 16 : hex_digit(text_[pos_]);
            if (d == 16) fail("expected " + std::to_string(digits) + " hex digits");
            value = value * 16 + d;
            ++pos_;
        }
        if (value > kMaxCodePoint) fail("code point out of range");
        return value;
    }

    static RuleItem chars(std::vector<CharRange> ranges) {
        RuleItem item;
        item.kind = RuleItem::Chars;
        item.chars = std::move(ranges);
        return item;
    }

    // [abc], [a-z0-9], [^"\\]: the code points matched, complemented for [^...].
    RuleItem parse_class() {
        ++pos_;  // '['
        bool negated = false;
        if (peek() == '^') {
            negated = true;
            ++pos_;
        }
        std::vector<CharRange> ranges;
        while (peek() != ']') {
            if (at_end()) fail("unterminated character class");
            const uint32_t first = parse_char();
            uint32_t last = first;
            if (peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
                ++pos_;
                last = parse_char();
                if (last < first) fail("character range out of order");
            }
            ranges.push_back({first, last});
        }
        ++pos_;  // ']'
        std::sort(ranges.begin(), ranges.end(), [](CharRange a, CharRange b) { return a.first < b.first; });
        if (!negated) return chars(std::move(ranges));
        std::vector<CharRange> complement;
        uint32_t next = 0;
        for (const CharRange& r : ranges) {
            if (r.first > next) complement.push_back({next, r.first - 1});
            next = std::max(next, r.last + 1);
        }
        if (next <= kMaxCodePoint) complement.push_back({next, kMaxCodePoint});
        if (complement.empty()) fail("character class matches nothing");
        return chars(std::move(complement));
    }

    uint32_t parse_count() {
        const size_t start = pos_;
        uint64_t value = 0;
        while (!at_end() && text_[pos_] >= '0' && text_[pos_] <= '9') {
            value = value * 10 + static_cast<uint64_t>(text_[pos_] - '0');
            if (value > kMaxRepeat) fail("repetition count over " + std::to_string(kMaxRepeat));
            ++pos_;
        }
        if (pos_ == start) fail("expected a number");
        return static_cast<uint32_t>(value);
    }

    // Replaces items [from, end) of `seq` with their repetition min..max times (max < 0: unbounded).
    void repeat(Sequence& seq, size_t from, uint32_t min, int64_t max) {
        const Sequence item(seq.begin() + static_cast<std::ptrdiff_t>(from), seq.end());
        // Each count copies the item: bound what the copies add up to before making them.
        const uint64_t copies = std::max<uint64_t>(min, max < 0 ? 1 : static_cast<uint64_t>(max));
        copied_ += item.size() * copies + 1;
        if (copied_ > kMaxElements) fail("the repetitions make the grammar too large");
        seq.resize(from);
        for (uint32_t i = 0; i < min; ++i) seq.insert(seq.end(), item.begin(), item.end());
        if (max < 0) {
            // star ::= item star | (empty): right recursion, which the recognizer runs as a loop.
            const uint32_t star = new_rule({});
            Sequence again = item;
            again.push_back(ref(star));
            set_.rules[star].alternatives = {std::move(again), {}};
            seq.push_back(ref(star));
            return;
        }
        // Up to (max - min) more: opt_k ::= item opt_(k-1) | (empty), nested so no count is matched twice.
        uint32_t inner = 0;
        bool has_inner = false;
        for (int64_t k = 0; k < max - static_cast<int64_t>(min); ++k) {
            Sequence more = item;
            if (has_inner) more.push_back(ref(inner));
            inner = new_rule({std::move(more), {}});
            set_.rules[inner].counted = true;
            has_inner = true;
        }
        if (has_inner) seq.push_back(ref(inner));
    }

    Sequence parse_sequence(bool nested) {
        Sequence seq;
        size_t last_start = 0;
        bool has_last = false;
        while (!at_end()) {
            const char c = text_[pos_];
            const size_t start = seq.size();
            if (c == '"') {
                ++pos_;
                while (peek() != '"') {
                    if (at_end() || peek() == '\n') fail("unterminated string");
                    const uint32_t cp = parse_char();
                    seq.push_back(chars({{cp, cp}}));
                }
                ++pos_;
                // An empty string matches the empty sequence; a repetition after it repeats nothing.
            } else if (c == '[') {
                seq.push_back(parse_class());
            } else if (c == '.') {
                ++pos_;
                seq.push_back(chars({{0, kMaxCodePoint}}));
            } else if (is_name_char(c)) {
                seq.push_back(ref(rule_id(parse_name())));
            } else if (c == '(') {
                ++pos_;
                skip_space(true);
                std::vector<Sequence> alternatives = parse_alternatives(true);
                if (peek() != ')') fail("expected ')'");
                ++pos_;
                seq.push_back(ref(new_rule(std::move(alternatives))));
            } else if (c == '*' || c == '+' || c == '?' || c == '{') {
                if (!has_last) fail(std::string("'") + c + "' repeats nothing");
                ++pos_;
                if (c == '*') {
                    repeat(seq, last_start, 0, -1);
                } else if (c == '+') {
                    repeat(seq, last_start, 1, -1);
                } else if (c == '?') {
                    repeat(seq, last_start, 0, 1);
                } else {
                    skip_space(false);
                    const uint32_t min = parse_count();
                    skip_space(false);
                    int64_t max = min;
                    if (peek() == ',') {
                        ++pos_;
                        skip_space(false);
                        max = peek() == '}' ? -1 : parse_count();
                        skip_space(false);
                    }
                    if (peek() != '}') fail("expected '}'");
                    ++pos_;
                    if (max >= 0 && max < min) fail("repetition maximum below its minimum");
                    repeat(seq, last_start, min, max);
                }
                has_last = false;  // a{2}* is a syntax error in llama.cpp too
                skip_space(nested);
                continue;
            } else {
                break;
            }
            last_start = start;
            has_last = true;
            skip_space(nested);
        }
        return seq;
    }

    std::vector<Sequence> parse_alternatives(bool nested) {
        std::vector<Sequence> alternatives;
        alternatives.push_back(parse_sequence(nested));
        while (peek() == '|' || (!nested && (peek() == '\n' || peek() == '\r') && continues_with_bar())) {
            ++pos_;
            skip_space(true);
            alternatives.push_back(parse_sequence(nested));
        }
        return alternatives;
    }

    std::string_view text_;
    size_t max_bytes_;
    size_t pos_ = 0;
    uint64_t copied_ = 0;  // items the repetitions copied so far
    RuleSet set_;
    std::vector<bool> defined_;
    std::unordered_map<std::string, uint32_t> names_;
};

}  // namespace

RuleSet parse_gbnf(std::string_view text, size_t max_bytes) { return Parser(text, max_bytes).parse(); }

std::string gbnf_literal(std::string_view text) {
    std::string out = "\"";
    for (char c : text) {
        auto u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (u < 0x20 || u == 0x7F) {
            static const char* hex = "0123456789ABCDEF";
            out += "\\x";
            out += hex[u >> 4];
            out += hex[u & 15];
        } else {
            out += c;
        }
    }
    return out + "\"";
}

}  // namespace cellm::grammar
