// Tokens -> the template's tree: expressions with jinja2's precedence, statements with their bodies.
#pragma once

#include "jinja/lexer.h"
#include "jinja/value.h"

#include <memory>
#include <string>
#include <vector>

namespace cellm::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind : std::uint8_t {
    Literal,    // value
    Name,       // name
    Attribute,  // operands[0].name
    Subscript,  // operands[0][operands[1]]
    Slice,      // operands[0][operands[1]:operands[2]:operands[3]], absent bounds null
    Unary,      // name ("not", "-", "+") operands[0]
    Binary,     // operands[0] name operands[1]: arithmetic, comparison, "in", "not in", "and", "or"
    Compare,    // a chain, operands[0] comparisons[0] operands[1] comparisons[1] operands[2] ...
    Concat,     // operands joined by ~
    Condition,  // operands[1] if operands[0] else operands[2] (null: undefined)
    Filter,     // operands[0] | name(operands[1..], keywords); operands[0] null inside {% filter %} and block set
    Test,       // operands[0] is [not] name(operands[1..])
    Call,       // operands[0](operands[1..], keywords)
    List,
    Tuple,
    Dict,  // operands: key, value, key, value, ...
};

struct Expr {
    ExprKind kind;
    int line;
    std::string name;
    Value value;
    std::vector<ExprPtr> operands;
    std::vector<std::pair<std::string, ExprPtr>> keywords;
    std::vector<std::string> comparisons;  // Compare's operators
    bool negated = false;  // `is not`
    bool known = true;     // a filter or test the interpreter has; unknown ones fail when evaluated
    int height = 1;        // of this subtree, bounded so evaluating and freeing it stay shallow
};

struct Stmt;
using Body = std::vector<Stmt>;

enum class StmtKind : std::uint8_t {
    Text,         // text
    Output,       // {{ expr }}
    If,           // conditions[i] -> bodies[i]; one more body is the else
    For,          // for targets in expr [if condition] body [else else_body]
    Set,          // set targets = expr, or set target.attribute = expr
    SetBlock,     // set target [| filter] body endset
    Macro,        // macro name(params) body
    CallBlock,    // call[(params)] expr body endcall: expr called with caller() rendering body
    FilterBlock,  // filter expr body endfilter
    Generation,   // generation body endgeneration (transformers' assistant-mask tag: renders its body)
    Break,
    Continue,
};

struct Param {
    std::string name;
    ExprPtr default_value;  // null: required (undefined when omitted)
};

struct Stmt {
    StmtKind kind;
    int line;
    std::string text{};                  // Text: the text; Macro: the name
    std::vector<std::string> targets{};  // For, Set, SetBlock: the names bound
    std::string attribute{};             // `set ns.attribute = ...`
    ExprPtr expr{};
    ExprPtr condition{};  // For: the loop's `if`
    std::vector<ExprPtr> conditions{};
    std::vector<Body> bodies{};
    Body body{};
    Body else_body{};
    std::vector<Param> params{};
    // Macro: whether the body reads caller, varargs or kwargs, which decides the calls it accepts.
    bool reads_caller = false;
    bool reads_varargs = false;
    bool reads_kwargs = false;
};

struct Program {
    Body body;
};

// Throws TemplateError naming the line.
Program parse_program(std::vector<Token> tokens);

// The interpreter's filters and tests (interpreter.cpp); jinja2 rejects unknown ones when it compiles the
// template unless they sit under an `if`.
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

}  // namespace cellm::jinja
