// Template source -> tokens, with jinja2's whitespace rules as transformers configures them: newlines
// normalised and one trailing newline dropped, `{%-`/`-%}` strip, trim_blocks drops the newline after a block or
// comment tag, lstrip_blocks drops the indentation before one. Comments vanish, `{% raw %}` becomes text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cellm::jinja {

enum class TokenKind : std::uint8_t {
    Text,           // template text between tags
    VariableBegin,  // {{
    VariableEnd,    // }}
    BlockBegin,     // {%
    BlockEnd,       // %}
    Name,
    String,  // text holds the decoded value
    Integer,
    Float,
    Operator,  // text holds the operator: "+", "//", "==", "(", ...
    End,
};

struct Token {
    TokenKind kind;
    std::string text;
    int line;
    std::int64_t integer = 0;
    double number = 0;
};

// Throws TemplateError naming the line (unclosed tag or string, stray character).
std::vector<Token> tokenize(std::string_view source);

// "chat template line N: message", the one format every TemplateError uses.
[[noreturn]] void fail_at(int line, const std::string& message);

}  // namespace cellm::jinja
