#include "jinja/lexer.h"

#include "jinja/template.h"
#include "tokenize/utf8.h"

#include <cstring>
#include <limits>

namespace cellm::jinja {

void fail_at(int line, const std::string& message) {
    throw TemplateError("chat template line " + std::to_string(line) + ": " + message);
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

class Lexer {
public:
    explicit Lexer(std::string_view source) {
        // jinja2 lexes with every newline as \n and, keep_trailing_newline being off, without the last one.
        src_.reserve(source.size());
        for (std::size_t i = 0; i < source.size(); ++i) {
            if (source[i] == '\r') {
                src_ += '\n';
                if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
            } else {
                src_ += source[i];
            }
        }
        if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    }

    std::vector<Token> run() {
        while (pos_ < src_.size()) {
            std::size_t tag = find_tag(pos_);
            std::string text = src_.substr(pos_, tag - pos_);
            int text_line = line_;
            bool line_starting = pos_ == 0 || src_[pos_ - 1] == '\n';
            advance_to(tag);
            if (tag == src_.size()) {
                emit_text(std::move(text), text_line);
                break;
            }
            char type = src_[tag + 1];
            char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
            if (sign == '-') {
                while (!text.empty() && is_space(text.back())) text.pop_back();
            } else if (type != '{' && sign != '+') {
                // lstrip_blocks: a block or comment tag alone on its line loses the indentation before it.
                std::size_t l_pos = text.rfind('\n');
                l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
                if (l_pos > 0 || line_starting) {
                    bool blank = true;
                    for (std::size_t i = l_pos; i < text.size(); ++i) blank = blank && is_space(text[i]);
                    if (blank) text.resize(l_pos);
                }
            }
            emit_text(std::move(text), text_line);
            std::size_t body = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
            if (type == '#') {
                comment(body);
            } else if (type == '%' && raw_block(body)) {
                continue;
            } else {
                advance_to(body);
                tag_tokens(type == '{');
            }
        }
        tokens_.push_back({TokenKind::End, "", line_});
        return std::move(tokens_);
    }

private:
    std::size_t find_tag(std::size_t from) const {
        for (std::size_t i = from; i + 1 < src_.size(); ++i)
            if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
        return src_.size();
    }

    void advance_to(std::size_t to) {
        for (; pos_ < to; ++pos_)
            if (src_[pos_] == '\n') ++line_;
    }

    void emit_text(std::string text, int line) {
        if (!text.empty()) tokens_.push_back({TokenKind::Text, std::move(text), line});
    }

    // After a tag's closing marker: `-` strips what whitespace follows, else trim_blocks drops one newline
    // (`+` keeps it).
    void after_tag(char sign, bool trim) {
        if (sign == '-') {
            while (pos_ < src_.size() && is_space(src_[pos_])) advance_to(pos_ + 1);
        } else if (trim && sign != '+' && pos_ < src_.size() && src_[pos_] == '\n') {
            advance_to(pos_ + 1);
        }
    }

    void comment(std::size_t body) {
        std::size_t end = src_.find("#}", body);
        if (end == std::string::npos) fail_at(line_, "unclosed comment");
        char sign = end > body && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : '\0';
        advance_to(end + 2);
        after_tag(sign, true);
    }

    // `{% raw %}...{% endraw %}` at `body` (just past `{%` and its sign): the text between, verbatim.
    bool raw_block(std::size_t body) {
        std::size_t p = body;
        while (p < src_.size() && is_space(src_[p])) ++p;
        if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_name_char(src_[p + 3]))) return false;
        p += 3;
        while (p < src_.size() && is_space(src_[p])) ++p;
        char open_sign = '\0';
        if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) open_sign = src_[p++];
        if (src_.compare(p, 2, "%}") != 0) return false;
        int line = line_;
        advance_to(p + 2);
        if (open_sign == '-') after_tag('-', false);
        // The closing tag: {%[-+]? endraw [-+]?%}
        for (std::size_t q = src_.find("{%", pos_); q != std::string::npos; q = src_.find("{%", q + 2)) {
            std::size_t r = q + 2;
            char close_lead = '\0';
            if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) close_lead = src_[r++];
            while (r < src_.size() && is_space(src_[r])) ++r;
            if (src_.compare(r, 6, "endraw") != 0) continue;
            r += 6;
            while (r < src_.size() && is_space(src_[r])) ++r;
            char close_sign = '\0';
            if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) close_sign = src_[r++];
            if (src_.compare(r, 2, "%}") != 0) continue;
            std::string text = src_.substr(pos_, q - pos_);
            if (close_lead == '-')
                while (!text.empty() && is_space(text.back())) text.pop_back();
            emit_text(std::move(text), line_);
            advance_to(r + 2);
            after_tag(close_sign, true);
            return true;
        }
        fail_at(line, "unclosed raw block (expected {% endraw %})");
    }

    // The tokens inside {{ }} or {% %}, then the closing marker.
    void tag_tokens(bool variable) {
        tokens_.push_back({variable ? TokenKind::VariableBegin : TokenKind::BlockBegin, "", line_});
        int open_line = line_;
        while (true) {
            while (pos_ < src_.size() && is_space(src_[pos_])) advance_to(pos_ + 1);
            if (pos_ >= src_.size())
                fail_at(open_line, variable ? "unclosed '{{' (expected '}}')" : "unclosed '{%' (expected '%}')");
            const char* close = variable ? "}}" : "%}";
            char sign = '\0';
            std::size_t at = pos_;
            bool signed_close = src_[at] == '-' || (!variable && src_[at] == '+');
            if (signed_close && src_.compare(at + 1, 2, close) == 0) sign = src_[at++];
            if (src_.compare(at, 2, close) == 0) {
                tokens_.push_back({variable ? TokenKind::VariableEnd : TokenKind::BlockEnd, "", line_});
                advance_to(at + 2);
                after_tag(sign, !variable);
                return;
            }
            token();
        }
    }

    void token() {
        char c = src_[pos_];
        int line = line_;
        if (c == '\'' || c == '"') {
            tokens_.push_back({TokenKind::String, string_literal(), line});
        } else if (is_digit(c)) {
            number();
        } else if (is_name_start(c)) {
            std::size_t start = pos_;
            while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
            tokens_.push_back({TokenKind::Name, src_.substr(start, pos_ - start), line});
        } else {
            static const char* const two[] = {"//", "**", "==", "!=", ">=", "<="};
            for (const char* op : two) {
                if (src_.compare(pos_, 2, op) == 0) {
                    tokens_.push_back({TokenKind::Operator, op, line});
                    pos_ += 2;
                    return;
                }
            }
            if (std::strchr("+-/*%~[](){}><=.:|,;", c) == nullptr || c == '\0')
                fail_at(line, std::string("unexpected character '") + c + "'");
            tokens_.push_back({TokenKind::Operator, std::string(1, c), line});
            ++pos_;
        }
    }

    void number() {
        int line = line_;
        std::string digits;
        bool is_float = false;
        auto take_digits = [&] {
            // Digits with single underscores between them (1_000).
            auto underscore = [&] { return src_[pos_] == '_' && pos_ + 1 < src_.size() && is_digit(src_[pos_ + 1]); };
            while (pos_ < src_.size() && (is_digit(src_[pos_]) || underscore()))
                if (src_[pos_++] != '_') digits += src_[pos_ - 1];
        };
        take_digits();
        if (pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
            is_float = true;
            digits += src_[pos_++];
            take_digits();
        }
        if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
            std::size_t p = pos_ + 1;
            if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
            if (p < src_.size() && is_digit(src_[p])) {
                is_float = true;
                digits += 'e';
                digits.append(src_, pos_ + 1, p - pos_ - 1);
                pos_ = p;
                take_digits();
            }
        }
        // jinja2's integers are 0 or start with 1-9; what follows a leading 0 never parses.
        if (!is_float && digits.size() > 1 && digits[0] == '0' && digits.find_first_not_of('0') != std::string::npos)
            fail_at(line, "leading zeros in an integer literal (" + digits + ")");
        Token t{is_float ? TokenKind::Float : TokenKind::Integer, digits, line};
        if (is_float) {
            t.number = std::strtod(digits.c_str(), nullptr);
        } else {
            std::int64_t v = 0;
            for (char d : digits) {
                if (v > (std::numeric_limits<std::int64_t>::max() - (d - '0')) / 10) fail_at(line, "integer literal too large");
                v = v * 10 + (d - '0');
            }
            t.integer = v;
        }
        tokens_.push_back(std::move(t));
    }

    // A quoted literal, decoded as Python's unicode-escape does (unknown escapes stay as written).
    std::string string_literal() {
        char quote = src_[pos_];
        int line = line_;
        std::size_t p = pos_ + 1;
        std::string out;
        while (true) {
            if (p >= src_.size()) fail_at(line, "unclosed string literal");
            char c = src_[p];
            if (c == quote) break;
            if (c != '\\' || p + 1 >= src_.size()) {
                out += c;
                ++p;
                continue;
            }
            char e = src_[p + 1];
            p += 2;
            switch (e) {
                case '\n': break;
                case '\\': out += '\\'; break;
                case '\'': out += '\''; break;
                case '"': out += '"'; break;
                case 'a': out += '\a'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'v': out += '\v'; break;
                case 'x': case 'u': case 'U': {
                    std::size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                    std::uint32_t cp = 0;
                    for (std::size_t i = 0; i < n; ++i) {
                        int h = p + i < src_.size() ? hex_value(src_[p + i]) : -1;
                        if (h < 0) fail_at(line, std::string("truncated \\") + e + " escape in string literal");
                        cp = cp * 16 + static_cast<std::uint32_t>(h);
                    }
                    if (cp > 0x10FFFF) fail_at(line, "illegal Unicode character in string literal");
                    p += n;
                    utf8::append(out, cp);
                    break;
                }
                default:
                    if (e >= '0' && e <= '7') {
                        std::uint32_t cp = static_cast<std::uint32_t>(e - '0');
                        for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i)
                            cp = cp * 8 + static_cast<std::uint32_t>(src_[p++] - '0');
                        utf8::append(out, cp);
                    } else {
                        out += '\\';
                        out += e;
                    }
            }
        }
        advance_to(p + 1);
        return out;
    }

    std::string src_;
    std::size_t pos_ = 0;
    int line_ = 1;
    std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace cellm::jinja
