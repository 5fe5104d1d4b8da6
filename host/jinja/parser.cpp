#include "jinja/parser.h"

#include <algorithm>
#include <initializer_list>

namespace cellm::jinja {

namespace {

// Deeper than any real template nests; keeps parsing, evaluating and freeing the tree on a small stack.
constexpr int kMaxNesting = 256;

bool reads(const Expr* e, const std::string& name);

bool reads(const Body& body, const std::string& name) {
    for (const Stmt& s : body) {
        if (reads(s.expr.get(), name) || reads(s.condition.get(), name) || reads(s.body, name) || reads(s.else_body, name))
            return true;
        for (const auto& c : s.conditions)
            if (reads(c.get(), name)) return true;
        for (const auto& b : s.bodies)
            if (reads(b, name)) return true;
        for (const auto& p : s.params)
            if (reads(p.default_value.get(), name)) return true;
    }
    return false;
}

// Whether `e` mentions the variable `name`.
bool reads(const Expr* e, const std::string& name) {
    if (e == nullptr) return false;
    if (e->kind == ExprKind::Name && e->name == name) return true;
    for (const auto& o : e->operands)
        if (reads(o.get(), name)) return true;
    for (const auto& k : e->keywords)
        if (reads(k.second.get(), name)) return true;
    return false;
}

class Parser {
public:
    explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

    Program run() {
        Program program;
        program.body = parse_body({});
        if (!unknown_.empty()) {
            const Expr* e = unknown_.front();
            fail_at(e->line, std::string("unknown ") + (e->kind == ExprKind::Filter ? "filter '" : "test '") + e->name + "'");
        }
        return program;
    }

private:
    // ---- token stream
    const Token& peek(std::size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
    const Token& next() {
        const Token& t = tokens_[pos_];
        if (pos_ + 1 < tokens_.size()) ++pos_;
        return t;
    }
    bool is_op(const char* op, std::size_t ahead = 0) const {
        return peek(ahead).kind == TokenKind::Operator && peek(ahead).text == op;
    }
    bool is_name(const char* name, std::size_t ahead = 0) const {
        return peek(ahead).kind == TokenKind::Name && peek(ahead).text == name;
    }
    bool skip_op(const char* op) {
        if (!is_op(op)) return false;
        next();
        return true;
    }
    bool skip_name(const char* name) {
        if (!is_name(name)) return false;
        next();
        return true;
    }
    [[noreturn]] void unexpected(const char* expected) const {
        const Token& t = peek();
        std::string got;
        switch (t.kind) {
            case TokenKind::End: got = "end of template"; break;
            case TokenKind::BlockEnd: got = "'%}'"; break;
            case TokenKind::VariableEnd: got = "'}}'"; break;
            case TokenKind::Text: got = "template text"; break;
            case TokenKind::String: got = "a string"; break;
            default: got = "'" + t.text + "'";
        }
        fail_at(t.line, std::string("expected ") + expected + ", got " + got);
    }
    void expect_op(const char* op) {
        if (!skip_op(op)) unexpected((std::string("'") + op + "'").c_str());
    }
    std::string expect_name() {
        if (peek().kind != TokenKind::Name) unexpected("a name");
        return next().text;
    }
    void expect_block_end() {
        if (peek().kind != TokenKind::BlockEnd) unexpected("'%}'");
        next();
    }

    struct Nesting {
        explicit Nesting(Parser& p) : parser(p) {
            if (++parser.depth_ > kMaxNesting) fail_at(parser.peek().line, "template nested too deeply");
        }
        ~Nesting() { --parser.depth_; }
        Parser& parser;
    };

    ExprPtr make(ExprKind kind, int line, std::vector<ExprPtr> operands = {}) {
        auto e = std::make_unique<Expr>();
        e->kind = kind;
        e->line = line;
        e->operands = std::move(operands);
        for (const auto& o : e->operands)
            if (o) e->height = std::max(e->height, o->height + 1);
        if (e->height > kMaxNesting) fail_at(line, "expression nested too deeply");
        return e;
    }
    void add_keywords(Expr& e, std::vector<std::pair<std::string, ExprPtr>> keywords) {
        for (const auto& [name, value] : keywords) e.height = std::max(e.height, value->height + 1);
        if (e.height > kMaxNesting) fail_at(e.line, "expression nested too deeply");
        e.keywords = std::move(keywords);
    }

    // ---- statements
    // Statements up to one of `ends` (its name is consumed, its '%}' is not); `ended` receives which.
    Body parse_body(std::initializer_list<const char*> ends, std::string* ended = nullptr) {
        Nesting nesting(*this);
        Body body;
        while (true) {
            const Token& t = peek();
            if (t.kind == TokenKind::End) {
                if (ends.size() == 0) return body;
                fail_at(t.line, std::string("unexpected end of template, expected '") + *(ends.end() - 1) + "'");
            }
            if (t.kind == TokenKind::Text) {
                Stmt s{StmtKind::Text, t.line};
                s.text = next().text;
                body.push_back(std::move(s));
            } else if (t.kind == TokenKind::VariableBegin) {
                int line = next().line;
                Stmt s{StmtKind::Output, line};
                s.expr = parse_tuple();
                if (peek().kind != TokenKind::VariableEnd) unexpected("'}}'");
                next();
                body.push_back(std::move(s));
            } else if (t.kind == TokenKind::BlockBegin) {
                next();
                if (peek().kind != TokenKind::Name) unexpected("a tag name");
                const std::string& tag = peek().text;
                for (const char* end : ends) {
                    if (tag == end) {
                        if (ended) *ended = tag;
                        next();
                        return body;
                    }
                }
                body.push_back(parse_statement());
            } else {
                unexpected("template text or a tag");
            }
        }
    }

    Stmt parse_statement() {
        const Token& t = next();
        int line = t.line;
        const std::string tag = t.text;
        if (tag == "if") return parse_if(line);
        if (tag == "for") return parse_for(line);
        if (tag == "set") return parse_set(line);
        if (tag == "macro") return parse_macro(line);
        if (tag == "call") return parse_call_block(line);
        if (tag == "filter") return parse_filter_block(line);
        if (tag == "generation") {
            Stmt s{StmtKind::Generation, line};
            expect_block_end();
            s.body = parse_scoped_body({"endgeneration"});
            expect_block_end();
            return s;
        }
        if (tag == "break" || tag == "continue") {
            if (loop_depth_ == 0) fail_at(line, "'" + tag + "' outside of a loop");
            expect_block_end();
            return Stmt{tag == "break" ? StmtKind::Break : StmtKind::Continue, line};
        }
        if (tag.rfind("end", 0) == 0 || tag == "elif" || tag == "else") fail_at(line, "unexpected '" + tag + "'");
        fail_at(line, "unknown tag '" + tag + "'");
    }

    // A body with a frame of its own (loop, macro, call, filter, block set), where jinja2's compile-time check
    // of filter and test names applies again.
    Body parse_scoped_body(std::initializer_list<const char*> ends, std::string* ended = nullptr) {
        bool soft = soft_;
        soft_ = false;
        Body body = parse_body(ends, ended);
        soft_ = soft;
        return body;
    }

    Stmt parse_if(int line) {
        Stmt s{StmtKind::If, line};
        bool soft = soft_;
        soft_ = true;
        s.conditions.push_back(parse_tuple(false));
        while (true) {
            expect_block_end();
            std::string ended;
            s.bodies.push_back(parse_body({"elif", "else", "endif"}, &ended));
            if (ended == "elif") {
                s.conditions.push_back(parse_tuple(false));
            } else if (ended == "else") {
                expect_block_end();
                s.bodies.push_back(parse_body({"endif"}));
                expect_block_end();
                break;
            } else {
                expect_block_end();
                break;
            }
        }
        soft_ = soft;
        return s;
    }

    std::vector<std::string> parse_names(const char* stop) {
        std::vector<std::string> names;
        bool paren = skip_op("(");
        do {
            if (paren && is_op(")")) break;
            if (!paren && is_name(stop)) break;
            names.push_back(expect_name());
        } while (skip_op(","));
        if (paren) expect_op(")");
        if (names.empty()) unexpected("a name");
        return names;
    }

    Stmt parse_for(int line) {
        Stmt s{StmtKind::For, line};
        s.targets = parse_names("in");
        if (!skip_name("in")) unexpected("'in'");
        s.expr = parse_tuple(false);
        bool soft = soft_;
        soft_ = false;
        if (skip_name("if")) s.condition = parse_expression();
        soft_ = soft;
        if (is_name("recursive")) fail_at(peek().line, "recursive loops are not supported");
        expect_block_end();
        ++loop_depth_;
        std::string ended;
        s.body = parse_scoped_body({"else", "endfor"}, &ended);
        --loop_depth_;
        if (ended == "else") {
            expect_block_end();
            s.else_body = parse_body({"endfor"});
        }
        expect_block_end();
        return s;
    }

    Stmt parse_set(int line) {
        Stmt s{StmtKind::Set, line};
        std::string first = expect_name();
        if (skip_op(".")) {
            s.targets.push_back(first);
            s.attribute = expect_name();
        } else {
            s.targets.push_back(first);
            while (skip_op(",")) s.targets.push_back(expect_name());
        }
        if (skip_op("=")) {
            s.expr = parse_tuple();
            expect_block_end();
            return s;
        }
        if (s.targets.size() != 1) unexpected("'='");
        s.kind = StmtKind::SetBlock;
        if (is_op("|")) s.expr = parse_filter_chain(nullptr);
        expect_block_end();
        s.body = parse_scoped_body({"endset"});
        expect_block_end();
        return s;
    }

    std::vector<Param> parse_params() {
        std::vector<Param> params;
        expect_op("(");
        while (!is_op(")")) {
            if (!params.empty()) expect_op(",");
            if (is_op(")")) break;
            Param p{expect_name(), nullptr};
            if (skip_op("=")) p.default_value = parse_expression();
            params.push_back(std::move(p));
        }
        next();
        return params;
    }

    Stmt parse_macro(int line) {
        Stmt s{StmtKind::Macro, line};
        s.text = expect_name();
        s.params = parse_params();
        expect_block_end();
        int loops = loop_depth_;
        loop_depth_ = 0;
        s.body = parse_scoped_body({"endmacro"});
        s.reads_caller = reads(s.body, "caller");
        s.reads_varargs = reads(s.body, "varargs");
        s.reads_kwargs = reads(s.body, "kwargs");
        loop_depth_ = loops;
        expect_block_end();
        return s;
    }

    Stmt parse_call_block(int line) {
        Stmt s{StmtKind::CallBlock, line};
        if (is_op("(")) s.params = parse_params();
        s.expr = parse_expression();
        if (s.expr->kind != ExprKind::Call) fail_at(line, "expected a call after 'call'");
        expect_block_end();
        s.body = parse_scoped_body({"endcall"});
        expect_block_end();
        return s;
    }

    Stmt parse_filter_block(int line) {
        Stmt s{StmtKind::FilterBlock, line};
        s.expr = parse_filter_chain(nullptr, false);
        expect_block_end();
        s.body = parse_scoped_body({"endfilter"});
        expect_block_end();
        return s;
    }

    // ---- expressions, from loosest to tightest binding (jinja2's parser.py)
    ExprPtr parse_tuple(bool with_condition = true, bool explicit_parens = false) {
        int line = peek().line;
        std::vector<ExprPtr> items;
        bool is_tuple = false;
        while (true) {
            if (!items.empty()) expect_op(",");
            TokenKind k = peek().kind;
            if (k == TokenKind::VariableEnd || k == TokenKind::BlockEnd || is_op(")")) break;
            items.push_back(with_condition ? parse_expression() : parse_or());
            if (is_op(",")) {
                is_tuple = true;
            } else {
                break;
            }
        }
        if (!is_tuple) {
            if (!items.empty()) return std::move(items.front());
            if (!explicit_parens) unexpected("an expression");
        }
        return make(ExprKind::Tuple, line, std::move(items));
    }

    ExprPtr parse_expression() {
        Nesting nesting(*this);
        std::size_t mark = unknown_.size();
        ExprPtr then = parse_or();
        while (is_name("if")) {
            int line = next().line;
            // The whole conditional is a soft frame: unknown filters in either branch fail only when reached.
            unknown_.resize(mark);
            bool soft = soft_;
            soft_ = true;
            std::vector<ExprPtr> ops;
            ops.push_back(parse_or());
            ops.push_back(std::move(then));
            ops.push_back(skip_name("else") ? parse_expression() : nullptr);
            soft_ = soft;
            then = make(ExprKind::Condition, line, std::move(ops));
        }
        return then;
    }

    ExprPtr binary(const std::string& op, int line, ExprPtr left, ExprPtr right) {
        std::vector<ExprPtr> ops;
        ops.push_back(std::move(left));
        ops.push_back(std::move(right));
        ExprPtr e = make(ExprKind::Binary, line, std::move(ops));
        e->name = op;
        return e;
    }

    ExprPtr parse_or() {
        ExprPtr left = parse_and();
        while (is_name("or")) {
            int line = next().line;
            left = binary("or", line, std::move(left), parse_and());
        }
        return left;
    }

    ExprPtr parse_and() {
        ExprPtr left = parse_not();
        while (is_name("and")) {
            int line = next().line;
            left = binary("and", line, std::move(left), parse_not());
        }
        return left;
    }

    ExprPtr parse_not() {
        if (is_name("not")) {
            Nesting nesting(*this);
            int line = next().line;
            std::vector<ExprPtr> ops;
            ops.push_back(parse_not());
            ExprPtr e = make(ExprKind::Unary, line, std::move(ops));
            e->name = "not";
            return e;
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        int line = peek().line;
        std::vector<ExprPtr> operands;
        std::vector<std::string> ops;
        operands.push_back(parse_math1());
        while (true) {
            if (peek().kind == TokenKind::Operator &&
                (is_op("==") || is_op("!=") || is_op("<") || is_op("<=") || is_op(">") || is_op(">="))) {
                ops.push_back(next().text);
            } else if (is_name("in")) {
                next();
                ops.push_back("in");
            } else if (is_name("not") && is_name("in", 1)) {
                next();
                next();
                ops.push_back("not in");
            } else {
                break;
            }
            operands.push_back(parse_math1());
        }
        if (ops.empty()) return std::move(operands.front());
        if (ops.size() == 1) return binary(ops[0], line, std::move(operands[0]), std::move(operands[1]));
        ExprPtr e = make(ExprKind::Compare, line, std::move(operands));
        e->comparisons = std::move(ops);
        return e;
    }

    ExprPtr parse_math1() {
        ExprPtr left = parse_concat();
        while (is_op("+") || is_op("-")) {
            const Token& t = next();
            std::string op = t.text;
            left = binary(op, t.line, std::move(left), parse_concat());
        }
        return left;
    }

    ExprPtr parse_concat() {
        int line = peek().line;
        std::vector<ExprPtr> parts;
        parts.push_back(parse_math2());
        while (skip_op("~")) parts.push_back(parse_math2());
        if (parts.size() == 1) return std::move(parts.front());
        return make(ExprKind::Concat, line, std::move(parts));
    }

    ExprPtr parse_math2() {
        ExprPtr left = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            const Token& t = next();
            std::string op = t.text;
            left = binary(op, t.line, std::move(left), parse_pow());
        }
        return left;
    }

    ExprPtr parse_pow() {
        ExprPtr left = parse_unary();
        while (is_op("**")) {
            int line = next().line;
            left = binary("**", line, std::move(left), parse_unary());
        }
        return left;
    }

    ExprPtr parse_unary(bool with_filter = true) {
        Nesting nesting(*this);
        ExprPtr node;
        if (is_op("-") || is_op("+")) {
            const Token& t = next();
            std::string op = t.text;
            std::vector<ExprPtr> ops;
            ops.push_back(parse_unary(false));
            node = make(ExprKind::Unary, t.line, std::move(ops));
            node->name = op;
        } else {
            node = parse_primary();
        }
        node = parse_postfix(std::move(node));
        if (with_filter) node = parse_filter_expr(std::move(node));
        return node;
    }

    ExprPtr parse_primary() {
        const Token& t = peek();
        int line = t.line;
        switch (t.kind) {
            case TokenKind::Name: {
                std::string name = next().text;
                ExprPtr e = make(ExprKind::Literal, line);
                if (name == "true" || name == "True") {
                    e->value = Value(true);
                } else if (name == "false" || name == "False") {
                    e->value = Value(false);
                } else if (name == "none" || name == "None") {
                    e->value = Value::none();
                } else {
                    e->kind = ExprKind::Name;
                    e->name = name;
                }
                return e;
            }
            case TokenKind::String: {
                std::string s;
                while (peek().kind == TokenKind::String) s += next().text;
                ExprPtr e = make(ExprKind::Literal, line);
                e->value = Value(std::move(s));
                return e;
            }
            case TokenKind::Integer: {
                ExprPtr e = make(ExprKind::Literal, line);
                e->value = Value(next().integer);
                return e;
            }
            case TokenKind::Float: {
                ExprPtr e = make(ExprKind::Literal, line);
                e->value = Value(next().number);
                return e;
            }
            default: break;
        }
        if (skip_op("(")) {
            ExprPtr e = parse_tuple(true, true);
            expect_op(")");
            return e;
        }
        if (skip_op("[")) {
            std::vector<ExprPtr> items;
            while (!is_op("]")) {
                if (!items.empty()) expect_op(",");
                if (is_op("]")) break;
                items.push_back(parse_expression());
            }
            next();
            return make(ExprKind::List, line, std::move(items));
        }
        if (skip_op("{")) {
            std::vector<ExprPtr> items;
            while (!is_op("}")) {
                if (!items.empty()) expect_op(",");
                if (is_op("}")) break;
                items.push_back(parse_expression());
                expect_op(":");
                items.push_back(parse_expression());
            }
            next();
            return make(ExprKind::Dict, line, std::move(items));
        }
        unexpected("an expression");
    }

    ExprPtr parse_postfix(ExprPtr node) {
        while (true) {
            if (is_op(".") || is_op("[")) {
                node = parse_subscript(std::move(node));
            } else if (is_op("(")) {
                node = parse_call(std::move(node));
            } else {
                return node;
            }
        }
    }

    ExprPtr parse_filter_expr(ExprPtr node) {
        while (true) {
            if (is_op("|")) {
                node = parse_filter_chain(std::move(node));
            } else if (is_name("is")) {
                node = parse_test(std::move(node));
            } else if (is_op("(")) {
                node = parse_call(std::move(node));
            } else {
                return node;
            }
        }
    }

    ExprPtr parse_subscript(ExprPtr node) {
        const Token& t = next();
        int line = t.line;
        std::vector<ExprPtr> ops;
        ops.push_back(std::move(node));
        if (t.text == ".") {
            if (peek().kind == TokenKind::Name) {
                ExprPtr e = make(ExprKind::Attribute, line, std::move(ops));
                e->name = next().text;
                return e;
            }
            if (peek().kind != TokenKind::Integer) unexpected("an attribute name");
            ExprPtr index = make(ExprKind::Literal, line);
            index->value = Value(next().integer);
            ops.push_back(std::move(index));
            return make(ExprKind::Subscript, line, std::move(ops));
        }
        ExprPtr start;
        if (!is_op(":")) {
            start = parse_expression();
            if (!is_op(":")) {
                expect_op("]");
                ops.push_back(std::move(start));
                return make(ExprKind::Subscript, line, std::move(ops));
            }
        }
        next();
        ops.push_back(std::move(start));
        ops.push_back(is_op(":") || is_op("]") ? nullptr : parse_expression());
        if (skip_op(":")) {
            ops.push_back(is_op("]") ? nullptr : parse_expression());
        } else {
            ops.push_back(nullptr);
        }
        expect_op("]");
        return make(ExprKind::Slice, line, std::move(ops));
    }

    // `(args)` into `e`'s operands after the ones it has, keywords into its keywords.
    void parse_arguments(Expr& e) {
        expect_op("(");
        std::vector<std::pair<std::string, ExprPtr>> keywords;
        bool first = true;
        while (!is_op(")")) {
            if (!first) expect_op(",");
            first = false;
            if (is_op(")")) break;
            if (is_op("*") || is_op("**")) fail_at(peek().line, "argument unpacking (*args, **kwargs) is not supported");
            if (peek().kind == TokenKind::Name && is_op("=", 1)) {
                std::string name = next().text;
                next();
                keywords.emplace_back(name, parse_expression());
            } else {
                if (!keywords.empty()) fail_at(peek().line, "positional argument after a keyword argument");
                ExprPtr arg = parse_expression();
                e.height = std::max(e.height, arg->height + 1);
                e.operands.push_back(std::move(arg));
            }
        }
        next();
        add_keywords(e, std::move(keywords));
    }

    ExprPtr parse_call(ExprPtr callee) {
        int line = peek().line;
        std::vector<ExprPtr> ops;
        ops.push_back(std::move(callee));
        ExprPtr e = make(ExprKind::Call, line, std::move(ops));
        parse_arguments(*e);
        return e;
    }

    std::string dotted_name() {
        std::string name = expect_name();
        while (is_op(".") && peek(1).kind == TokenKind::Name) {
            next();
            name += "." + next().text;
        }
        return name;
    }

    // `| f(args) | g ...` applied to `node` (null: the body of a filter block or block set).
    ExprPtr parse_filter_chain(ExprPtr node, bool leading_bar = true) {
        do {
            if (leading_bar) expect_op("|");
            leading_bar = true;
            int line = peek().line;
            std::vector<ExprPtr> ops;
            ops.push_back(std::move(node));
            ExprPtr f = make(ExprKind::Filter, line, std::move(ops));
            f->name = dotted_name();
            f->known = is_known_filter(f->name);
            if (!f->known && !soft_) unknown_.push_back(f.get());
            if (is_op("(")) parse_arguments(*f);
            node = std::move(f);
        } while (is_op("|"));
        return node;
    }

    ExprPtr parse_test(ExprPtr node) {
        int line = next().line;
        std::vector<ExprPtr> ops;
        ops.push_back(std::move(node));
        ExprPtr t = make(ExprKind::Test, line, std::move(ops));
        t->negated = skip_name("not");
        t->name = dotted_name();
        t->known = is_known_test(t->name);
        if (!t->known && !soft_) unknown_.push_back(t.get());
        TokenKind k = peek().kind;
        if (is_op("(")) {
            parse_arguments(*t);
        } else if ((k == TokenKind::Name || k == TokenKind::String || k == TokenKind::Integer || k == TokenKind::Float ||
                    is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
            if (is_name("is")) fail_at(peek().line, "tests cannot be chained with 'is'");
            ExprPtr arg = parse_postfix(parse_primary());
            t->height = std::max(t->height, arg->height + 1);
            t->operands.push_back(std::move(arg));
        }
        return t;
    }

    std::vector<Token> tokens_;
    std::size_t pos_ = 0;
    int depth_ = 0;
    int loop_depth_ = 0;
    bool soft_ = false;               // inside an `if` of the current frame
    std::vector<const Expr*> unknown_;  // unknown filters and tests outside any `if`
};

}  // namespace

Program parse_program(std::vector<Token> tokens) { return Parser(std::move(tokens)).run(); }

}  // namespace cellm::jinja
