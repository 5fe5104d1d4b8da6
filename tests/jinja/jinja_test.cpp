// host/jinja: each feature chat templates use, with the output Python's jinja2 gives under transformers'
// settings, and each bad input ending in a TemplateError that names the line.
#include "jinja/template.h"

#include <gtest/gtest.h>

#include <string>

namespace {

using cellm::jinja::RenderOptions;
using cellm::jinja::Template;
using cellm::jinja::TemplateError;
using json = nlohmann::ordered_json;

std::string render(std::string_view source, const json& context = json::object(), const RenderOptions& options = {}) {
    return Template::parse(source).render(context, options);
}

// The TemplateError's message, parse or render; "" when there was none.
std::string error_of(std::string_view source, const json& context = json::object()) {
    try {
        render(source, context);
    } catch (const TemplateError& e) {
        return e.what();
    }
    return "";
}

const json kChat = json::parse(R"({
  "messages": [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"}
  ],
  "add_generation_prompt": true,
  "bos_token": "<s>"
})");

TEST(JinjaText, PlainTextAndTrailingNewline) {
    EXPECT_EQ(render("hello"), "hello");
    EXPECT_EQ(render("a\n"), "a");  // keep_trailing_newline is off
    EXPECT_EQ(render("a\n\n"), "a\n");
    EXPECT_EQ(render("a\r\nb\rc"), "a\nb\nc");
    EXPECT_EQ(render(""), "");
}

TEST(JinjaText, WhitespaceControl) {
    EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
    EXPECT_EQ(render("a \n {%- if true -%} \n b {%- endif %}"), "ab");
    EXPECT_EQ(render("{% if true %}\nx\n{% endif %}\ny"), "x\ny");          // trim_blocks
    EXPECT_EQ(render("  {% if true %}\n  x\n  {% endif %}\n"), "  x\n");  // lstrip_blocks
    EXPECT_EQ(render("a {{ 'b' }}  {% if true %}c{% endif %}"), "a b  c");  // not at a line start: kept
    EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
    EXPECT_EQ(render("{{ 'a' }}\n{{ 'b' }}"), "a\nb");  // trim_blocks leaves {{ }} alone
}

TEST(JinjaText, CommentsAndRaw) {
    EXPECT_EQ(render("a{# note #}b"), "ab");
    EXPECT_EQ(render("a\n  {# note #}\nb"), "a\nb");
    EXPECT_EQ(render("a {#- note -#} b"), "ab");
    EXPECT_EQ(render("{% raw %}{{ x }}{% if %}{% endraw %}"), "{{ x }}{% if %}");
}

TEST(JinjaExpressions, Literals) {
    EXPECT_EQ(render(R"({{ 'a\'b' }}|{{ "tab\tnl\n" }}|{{ '\u00e9\x41' }})"), "a'b|tab\tnl\n|\xC3\xA9" "A");
    EXPECT_EQ(render("{{ 'ab' 'cd' }}"), "abcd");
    EXPECT_EQ(render("{{ 42 }} {{ 1_000 }} {{ 1.0 }} {{ 0.1 }} {{ 1e20 }} {{ 1.5e-5 }} {{ 2.50 }}"),
              "42 1000 1.0 0.1 1e+20 1.5e-05 2.5");
    EXPECT_EQ(render("{{ true }} {{ False }} {{ none }} {{ None }}"), "True False None None");
    EXPECT_EQ(render(R"({{ [1, 'a', "it's", none, true, 1.0] }})"), R"([1, 'a', "it's", None, True, 1.0])");
    EXPECT_EQ(render("{{ {'a': 1, 'b': [2]} }} {{ (1,) }} {{ (1, 2) }} {{ () }}"), "{'a': 1, 'b': [2]} (1,) (1, 2) ()");
}

TEST(JinjaExpressions, AttributesAndItems) {
    json ctx = {{"d", {{"a", {{"b", 1}}}, {"list", json::array({1, 2, 3})}}}, {"s", "h\xC3\xA9llo"}};
    EXPECT_EQ(render("{{ d.a.b }} {{ d['a']['b'] }} {{ d.missing }}|{{ d.list[-1] }} {{ d.list[5] }}|", ctx), "1 1 |3 |");
    EXPECT_EQ(render("{{ d.list.1 }} {{ s[1] }} {{ s|length }}", ctx), "2 \xC3\xA9 5");
    EXPECT_NE(error_of("{{ d.missing.b }}", ctx).find("has no attribute 'missing'"), std::string::npos);
    EXPECT_NE(error_of("{{ nothing.b }}").find("'nothing' is undefined"), std::string::npos);
}

TEST(JinjaExpressions, Slices) {
    json ctx = {{"xs", json::array({1, 2, 3, 4, 5})}, {"s", "abc\xC3\xA9"}};
    EXPECT_EQ(render("{{ xs[1:3] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[-2:] }} {{ xs[:-3] }} {{ xs[10:] }}", ctx),
              "[2, 3] [5, 4, 3, 2, 1] [1, 3, 5] [4, 5] [1, 2] []");
    EXPECT_EQ(render("{{ s[::-1] }} {{ s[1:] }}", ctx), "\xC3\xA9" "cba bc\xC3\xA9");
    EXPECT_NE(error_of("{{ xs[::0] }}", ctx).find("slice step cannot be zero"), std::string::npos);
}

TEST(JinjaExpressions, Arithmetic) {
    EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }}"),
              "3 -4 2 -2 3.5 2.0 1024 0.5");
    EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -3 + 1 }} {{ 1.5 + 1 }} {{ true + 1 }}"), "7 9 -2 2.5 2");
    EXPECT_EQ(render("{{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1] + [2] }} {{ 'a' + 'b' }}"), "ababab [1, 1] [1, 2] ab");
    EXPECT_EQ(render("{{ 1 ~ 'a' ~ none ~ undefined_thing }}"), "1aNone");
    EXPECT_NE(error_of("{{ 'a' + 1 }}").find("can only concatenate str"), std::string::npos);
    EXPECT_NE(error_of("{{ 1 / 0 }}").find("division by zero"), std::string::npos);
    EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("integer overflow"), std::string::npos);
}

TEST(JinjaExpressions, LogicAndComparisons) {
    EXPECT_EQ(render("{{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 2 < 3 }} {{ 'b' >= 'a' }} {{ [1, 2] == [1, 2] }} {{ (1,) == [1] }}"),
              "True True True True True False");
    EXPECT_EQ(render("{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 1 in nothing }}"),
              "True True True True False");
    EXPECT_EQ(render("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ not [] }} {{ none or [] }}"), "x y True []");
    EXPECT_EQ(render("{{ 'y' if 1 > 0 else 'n' }} {{ 'y' if false }}|{{ 'a' if false else 'b' if true else 'c' }}"), "y |b");
    EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 3 > 2 > 1 }} {{ 1 < 3 < 2 }}"), "True True False");
    EXPECT_NE(error_of("{{ 'a' < 1 }}").find("'<' not supported"), std::string::npos);
    // An `if` tag's condition takes no inline if (jinja2 parses it without one).
    EXPECT_EQ(error_of("{% if 1 if true else 0 %}{% endif %}"), "chat template line 1: expected '%}', got 'if'");
}

TEST(JinjaFilters, Strings) {
    EXPECT_EQ(render("{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'aB'|upper }}{{ 'aB'|lower }}"), "a b|a|ABab");
    EXPECT_EQ(render("{{ 'hello wORLD'|capitalize }}|{{ 'hello wORLD-x (y'|title }}"), "Hello world|Hello World-X (Y");
    EXPECT_EQ(render("{{ 'a-b-c'|replace('-', '+') }} {{ 'aaa'|replace('a', 'b', 2) }}"), "a+b+c bba");
    EXPECT_EQ(render("{{ 'one two  three'|wordcount }} {{ 'abc'|reverse }} {{ 42|string ~ '!' }}"), "3 cba 42!");
    EXPECT_EQ(render("{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent('> ', blank=true) }}"),
              "a\n  b\n\n  c|  a\n  b|a\n> \n> b");
    EXPECT_EQ(render("{{ '<a href=\"x\">&'|escape }} {{ '<b>'|e }} {{ '<i>'|safe }}"), "&lt;a href=&#34;x&#34;&gt;&amp; &lt;b&gt; <i>");
    EXPECT_EQ(render("{{ 'x'|center(5) }}|"), "  x  |");
}

TEST(JinjaFilters, PrintfFormatting) {
    EXPECT_EQ(render("{{ '%s=%d' % ('a', 3) }} {{ '%05.1f|%-4s|%x|%%' % (3.14159, 'ab', 255) }} {{ '%(n)s!' % {'n': 'hi'} }}"),
              "a=3 003.1|ab  |ff|% hi!");
    EXPECT_EQ(render("{{ '%s and %s'|format('x', 1) }} {{ 'hello world foo'|truncate(9) }} {{ 'short'|truncate(9) }}"),
              "x and 1 hello... short");
    EXPECT_NE(error_of("{{ '%s %s' % ('a',) }}").find("not enough arguments"), std::string::npos);
}

TEST(JinjaFilters, CaseMappingBeyondAscii) {
    EXPECT_EQ(render("{{ 'caf\\u00e9 stra\\u00dfe'|upper }} {{ '\\u00c9T\\u00c9 \\u0391\\u0392'|lower }} {{ '\\u00e9cole'|capitalize }}"),
              "CAF\xC3\x89 STRASSE \xC3\xA9t\xC3\xA9 \xCE\xB1\xCE\xB2 \xC3\x89" "cole");
}

TEST(JinjaFilters, MarkupEscapesWhatItIsAddedTo) {
    // functionary-medium-v3.1 relies on this: "..."|safe + str escapes the str.
    EXPECT_EQ(render("{{ '<a>'|safe + '<b>' }}|{{ '<a>' + '<b>'|safe }}|{{ '<a>'|safe ~ '<b>' }}"), "<a>&lt;b&gt;|&lt;a&gt;<b>|<a><b>");
}

TEST(JinjaFilters, ToJson) {
    json ctx = {{"v", json::parse(R"({"b": [1, 2.5, "caf\u00e9 \"q\"\n"], "a": {"x": null, "y": true}, "e": {}})")}};
    EXPECT_EQ(render("{{ v|tojson }}", ctx), "{\"b\": [1, 2.5, \"caf\xC3\xA9 \\\"q\\\"\\n\"], \"a\": {\"x\": null, \"y\": true}, \"e\": {}}");
    EXPECT_EQ(render("{{ v.b|tojson(indent=2) }}", ctx), "[\n  1,\n  2.5,\n  \"caf\xC3\xA9 \\\"q\\\"\\n\"\n]");
    EXPECT_EQ(render("{{ v.a|tojson(separators=(',', ':'), sort_keys=true) }}", ctx), "{\"x\":null,\"y\":true}");
    EXPECT_EQ(render("{{ v.b[2]|tojson(ensure_ascii=true) }} {{ '<&>'|tojson }}", ctx), "\"caf\\u00e9 \\\"q\\\"\\n\" \"<&>\"");
    EXPECT_NE(error_of("{{ nothing|tojson }}").find("not JSON serializable"), std::string::npos);
}

TEST(JinjaFilters, Sequences) {
    json ctx = json::parse(R"({"xs": [3, 1, 2], "ws": ["b", "A", "a", "c"], "d": {"b": 2, "a": 1},
        "people": [{"name": "Bo", "age": 30, "ok": true}, {"name": "al", "age": 25, "ok": false}, {"name": "Cy", "age": 35}]})");
    EXPECT_EQ(render("{{ xs|length }} {{ xs|count }} {{ xs|first }} {{ xs|last }} {{ xs|join(',') }} {{ xs|sum }} {{ xs|max }} {{ xs|min }}", ctx),
              "3 3 3 2 3,1,2 6 3 1");
    EXPECT_EQ(render("{{ xs|sort }} {{ xs|sort(reverse=true) }} {{ ws|sort }} {{ ws|sort(case_sensitive=true) }} {{ ws|unique|list }}", ctx),
              "[1, 2, 3] [3, 2, 1] ['A', 'a', 'b', 'c'] ['A', 'a', 'b', 'c'] ['b', 'A', 'c']");
    EXPECT_EQ(render("{{ people|map(attribute='name')|join('/') }} {{ people|sort(attribute='age')|map(attribute='name')|list }}", ctx),
              "Bo/al/Cy ['al', 'Bo', 'Cy']");
    EXPECT_EQ(render("{{ people|selectattr('ok')|map(attribute='name')|list }} {{ people|rejectattr('ok')|list|length }}", ctx),
              "['Bo'] 2");
    EXPECT_EQ(render("{{ people|selectattr('name', 'equalto', 'Cy')|map(attribute='age')|first }} {{ people|selectattr('ok', 'defined')|list|length }}", ctx),
              "35 2");
    EXPECT_EQ(render("{{ xs|select('odd')|list }} {{ xs|reject('odd')|list }} {{ ws|map('upper')|join }}", ctx), "[3, 1] [2] BAAC");
    EXPECT_EQ(render("{{ d|items|list }} {{ d|dictsort }} {{ d|dictsort(by='value', reverse=true) }} {{ d|list }}", ctx),
              "[('b', 2), ('a', 1)] [('a', 1), ('b', 2)] [('b', 2), ('a', 1)] ['b', 'a']");
    EXPECT_EQ(render("{{ xs|reverse|list }} {{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ 'ab'|list }}", ctx), "[2, 1, 3] [[1, 2], [3, 4], [5]] ['a', 'b']");
    // map and select are generators in jinja2: no len(), no JSON, and truthy.
    EXPECT_NE(error_of("{{ xs|map('string')|tojson }}", ctx).find("not JSON serializable"), std::string::npos);
    EXPECT_NE(error_of("{{ xs|select|length }}", ctx).find("has no len()"), std::string::npos);
    EXPECT_EQ(render("{{ 'yes' if [1]|select('even') }}|{{ none|selectattr('x')|list }}"), "yes|[]");
    // ... and lazy: their work (and its errors) happens when first consumed, once.
    EXPECT_EQ(render("{% set g = xs|map('string') %}{{ g|list }}{{ g|list }}", ctx), "['3', '1', '2'][]");
    EXPECT_EQ(render("{{ xs|map('frobnicate') is iterable }}", ctx), "True");
    EXPECT_NE(error_of("{{ xs|map('frobnicate')|list }}", ctx).find("no filter named 'frobnicate'"), std::string::npos);
}

TEST(JinjaFilters, NumbersAndDefaults) {
    EXPECT_EQ(render("{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 'x'|float }}"),
              "42 4 0 7 3 2.5 0.0");
    EXPECT_EQ(render("{{ -3|abs }} {{ 2.5|round }} {{ 3.14159|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ 7|round }}"), "3 2.0 3.14 3.0 7");
    EXPECT_EQ(render("{{ nothing|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|d('x') }}"), "d  d None");
}

TEST(JinjaTests, TypeAndValueTests) {
    json ctx = json::parse(R"({"s": "x", "n": 1, "f": 1.5, "b": true, "l": [1], "d": {"k": 1}, "z": null})");
    EXPECT_EQ(render("{{ s is string }}{{ n is string }}{{ d is mapping }}{{ l is mapping }}{{ l is iterable }}{{ n is iterable }}", ctx),
              "TrueFalseTrueFalseTrueFalse");
    EXPECT_EQ(render("{{ n is number }}{{ f is number }}{{ n is integer }}{{ f is float }}{{ b is boolean }}{{ b is integer }}", ctx),
              "TrueTrueTrueTrueTrueFalse");
    EXPECT_EQ(render("{{ s is sequence }}{{ l is sequence }}{{ n is sequence }}{{ z is none }}{{ z is not none }}{{ q is defined }}{{ q is undefined }}", ctx),
              "TrueTrueFalseTrueFalseFalseTrue");
    EXPECT_EQ(render("{{ b is true }}{{ b is false }}{{ 1 is true }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}", ctx),
              "TrueFalseFalseTrueTrueTrueFalse");
    EXPECT_EQ(render("{{ s is equalto 'x' }}{{ s is eq('y') }}{{ 2 is gt 1 }}{{ 1 is in [1, 2] }}{{ 'abc' is lower }}", ctx),
              "TrueFalseTrueTrueTrue");
    // jinja2's Undefined iterates as empty and has len() and []: iterable and a sequence.
    EXPECT_EQ(render("{{ q is iterable }}{{ q is sequence }}{{ q|length }}{{ q|list }}"), "TrueTrue0[]");
}

TEST(JinjaStatements, IfElifElse) {
    const char* t = "{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %}";
    EXPECT_EQ(render(t, {{"n", 1}}), "one");
    EXPECT_EQ(render(t, {{"n", 2}}), "two");
    EXPECT_EQ(render(t, {{"n", 3}}), "many");
}

TEST(JinjaStatements, ForLoops) {
    json ctx = {{"xs", json::array({"a", "b", "c"})}, {"d", {{"k", 1}, {"j", 2}}}};
    EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ x }}"
                     "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %}{{ loop.length }};{% endfor %}", ctx),
              "1032aF3;2121b3;3210cL3;");
    EXPECT_EQ(render("{% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }}{{ loop.cycle('o', 'e') }} {% endfor %}", ctx),
              "-bo a-ce b-o ");
    EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }} {% endfor %}", ctx), "k=1 j=2 ");
    EXPECT_EQ(render("{% for k in d %}{{ k }}{% endfor %}", ctx), "kj");
    EXPECT_EQ(render("{% for x in xs if x != 'b' %}{{ x }}{{ loop.length }}{% endfor %}", ctx), "a2c2");
    EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
    EXPECT_EQ(render("{% for x in xs %}{% if x == 'b' %}{% continue %}{% endif %}{% if x == 'c' %}{% break %}{% endif %}{{ x }}{% endfor %}", ctx), "a");
    EXPECT_EQ(render("{% for i in range(3) %}{{ i }}{% endfor %}{% for i in range(1, 7, 2) %}{{ i }}{% endfor %}{% for i in range(3, 0, -1) %}{{ i }}{% endfor %}"),
              "012135321");
    EXPECT_EQ(render("{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }} {% endfor %}{{ loop.index }}|{% endfor %}"),
              "1x1 1y2 1|2x1 2y2 2|");
}

TEST(JinjaStatements, ScopingFollowsJinja2) {
    // A loop body's assignments last one iteration and do not leak; namespace() carries state out.
    EXPECT_EQ(render("{% set x = 1 %}{% for i in [1, 2, 3] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"), "2341");
    EXPECT_EQ(render("{% for i in range(3) %}{% if i == 0 %}{% set y = 'a' %}{% endif %}{{ y }}|{% endfor %}"), "a|||");
    EXPECT_EQ(render("{% set ns = namespace(n=0, seen=false) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}{{ ns.seen }}"),
              "6False");
    EXPECT_EQ(render("{% if true %}{% set z = 5 %}{% endif %}{{ z }}"), "5");
}

TEST(JinjaStatements, Set) {
    EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = (3, 4) %}{{ c }}"), "12(3, 4)");
    EXPECT_EQ(render("{% set block %}  x {{ 1 }} {% endset %}[{{ block }}]"), "[  x 1 ]");
    EXPECT_EQ(render("{% set block | trim | upper %}  x  {% endset %}[{{ block }}]"), "[X]");
    EXPECT_NE(error_of("{% set s = 'x' %}{% set s.attr = 1 %}").find("non-namespace"), std::string::npos);
}

TEST(JinjaStatements, MacrosAndCall) {
    EXPECT_EQ(render("{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}"
                     "{{ greet('Bo') }} {{ greet('Al', greeting='Hi') }} {{ greet(greeting='Yo', name='Cy') }}"),
              "Hello, Bo! Hi, Al! Yo, Cy!");
    EXPECT_EQ(render("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}"), "120");
    EXPECT_EQ(render("{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ m() }}"), "2");
    EXPECT_EQ(render("{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}inside{% endcall %}"), "[inside]");
    EXPECT_EQ(render("{% filter upper %}abc{{ 'd' }}{% endfilter %}"), "ABCD");
    EXPECT_EQ(render("{% generation %}reply{% endgeneration %}"), "reply");
    EXPECT_NE(error_of("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}").find("takes not more than 1"), std::string::npos);
}

TEST(JinjaMethods, StringMethods) {
    EXPECT_EQ(render("{{ '  x  '.strip() }}|{{ 'xxyxx'.lstrip('x') }}|{{ 'xxyxx'.rstrip('x') }}|{{ '\n a \t'.strip() }}"), "x|yxx|xxy|a");
    EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }}"),
              "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b,c'] ['a,b', 'c']");
    EXPECT_EQ(render("{{ 'hello'.startswith('he') }}{{ 'hello'.endswith(('x', 'lo')) }}{{ 'hello'.startswith('x') }}"), "TrueTrueFalse");
    EXPECT_EQ(render("{{ 'ab'.upper() }}{{ 'AB'.lower() }}{{ 'hello world'.title() }}{{ 'hELLO'.capitalize() }}"), "ABabHello WorldHello");
    EXPECT_EQ(render("{{ 'aXbX'.replace('X', '-') }} {{ 'abcb'.find('b') }} {{ 'abc'.find('z') }} {{ 'abcb'.count('b') }} {{ '-'.join(['a', 'b']) }}"),
              "a-b- 1 -1 2 a-b");
    EXPECT_EQ(render("{{ '{} is {}'.format('x', 1) }} {{ '{0}{0}{name}'.format('a', name='b') }} {{ '{{}}'.format() }}"), "x is 1 aab {}");
    EXPECT_EQ(render("{{ '12'.isdigit() }}{{ 'a1'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' '.isspace() }}"), "TrueFalseTrueTrue");
    EXPECT_EQ(render("{{ '  a b c  '.split(none, 1) }} {{ '  a b c  '.rsplit(none, 1) }} {{ '7'.zfill(3) }} {{ 'a=b=c'.partition('=') }}"),
              "['a', 'b c  '] ['  a b', 'c'] 007 ('a', '=', 'b=c')");
}

TEST(JinjaMethods, DictAndListMethods) {
    json ctx = json::parse(R"({"d": {"a": 1, "b": 2}, "l": [1, 2, 2]})");
    EXPECT_EQ(render("{{ d.items()|list }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 0) }}", ctx),
              "[('a', 1), ('b', 2)] ['a', 'b'] [1, 2] 1 None 0");
    EXPECT_EQ(render("{{ l.index(2) }} {{ l.count(2) }}", ctx), "1 2");
    // The attr filter is getattr() alone: a dict's keys are not attributes.
    EXPECT_EQ(render("{{ d|attr('a') }}|{{ (d|attr('items'))()|list }}", ctx), "|[('a', 1), ('b', 2)]");
    // transformers renders in jinja2's ImmutableSandboxedEnvironment: lists and dicts cannot be changed.
    EXPECT_NE(error_of("{% set _ = l.append(3) %}", ctx).find("unsafe"), std::string::npos);
    EXPECT_NE(error_of("{{ d.pop('a') }}", ctx).find("unsafe"), std::string::npos);
}

TEST(JinjaGlobals, RaiseExceptionNamesTheLine) {
    std::string e = error_of("line one\n{% if true %}\n{{ raise_exception('System role not supported') }}\n{% endif %}");
    EXPECT_EQ(e, "chat template line 3: System role not supported");
}

TEST(JinjaGlobals, StrftimeNow) {
    RenderOptions options;
    options.now = 0;  // 1970-01-01 in UTC; in the local zone the date may differ, so only the shape is checked
    std::string out = render("{{ strftime_now('%Y-%m-%d') }}", json::object(), options);
    EXPECT_EQ(out.size(), 10u);
    EXPECT_TRUE(out.rfind("1970-01-01", 0) == 0 || out.rfind("1969-12-31", 0) == 0) << out;
    EXPECT_EQ(render("{{ strftime_now('%Y')|length }}"), "4");
}

TEST(JinjaGlobals, RangeIsBounded) {
    EXPECT_NE(error_of("{% for i in range(1000000) %}{% endfor %}").find("range too big"), std::string::npos);
}

TEST(JinjaChat, ChatMLTemplate) {
    const char* t =
        "{{ bos_token }}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
    EXPECT_EQ(render(t, kChat),
              "<s><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
              "<|im_start|>assistant\n");
}

TEST(JinjaChat, TemplateIsReusable) {
    Template t = Template::parse("{{ messages|length }}{{ messages[0].role }}");
    EXPECT_EQ(t.render(kChat), "3system");
    EXPECT_EQ(t.render({{"messages", json::array({{{"role", "user"}}})}}), "1user");
}

// ---- bad input: a TemplateError naming the line, never a crash

TEST(JinjaErrors, UnclosedTags) {
    EXPECT_EQ(error_of("a\n{% if x %}\nb"), "chat template line 3: unexpected end of template, expected 'endif'");
    EXPECT_EQ(error_of("a\n{{ x"), "chat template line 2: unclosed '{{' (expected '}}')");
    EXPECT_EQ(error_of("{% for x in y %}"), "chat template line 1: unexpected end of template, expected 'endfor'");
    EXPECT_EQ(error_of("\n\n{# never closed"), "chat template line 3: unclosed comment");
    EXPECT_EQ(error_of("{{ 'abc }}"), "chat template line 1: unclosed string literal");
    EXPECT_EQ(error_of("{% raw %}x"), "chat template line 1: unclosed raw block (expected {% endraw %})");
}

TEST(JinjaErrors, BadSyntax) {
    EXPECT_EQ(error_of("{{ 1 + }}"), "chat template line 1: expected an expression, got '}}'");
    EXPECT_EQ(error_of("\n{% endif %}"), "chat template line 2: unexpected 'endif'");
    EXPECT_EQ(error_of("{% frobnicate %}"), "chat template line 1: unknown tag 'frobnicate'");
    EXPECT_EQ(error_of("{% break %}"), "chat template line 1: 'break' outside of a loop");
    EXPECT_EQ(error_of("{{ a b }}"), "chat template line 1: expected '}}', got 'b'");
    EXPECT_EQ(error_of("{{ [1, 2 }}"), "chat template line 1: expected ',', got '}}'");
    EXPECT_EQ(error_of("{{ 'a' ? 1 }}"), "chat template line 1: unexpected character '?'");
    EXPECT_EQ(error_of("{{ x is foo if false }}"), "chat template line 1: expected '}}', got 'false'");
}

TEST(JinjaErrors, UnknownFilterOrTest) {
    EXPECT_EQ(error_of("a\n{{ x|frobnicate }}"), "chat template line 2: unknown filter 'frobnicate'");
    EXPECT_EQ(error_of("{{ x is frobnicated }}"), "chat template line 1: unknown test 'frobnicated'");
    // As in jinja2, under an `if` the check waits until the filter is reached.
    EXPECT_EQ(render("{% if false %}{{ x|frobnicate }}{% endif %}ok"), "ok");
    EXPECT_EQ(error_of("{% if true %}\n{{ x|frobnicate }}{% endif %}"), "chat template line 2: no filter named 'frobnicate'");
}

TEST(JinjaErrors, RuntimeErrorsNameTheLine) {
    EXPECT_EQ(error_of("ok\n\n{{ 1 + none }}"), "chat template line 3: unsupported operand type(s) for +: 'int' and 'NoneType'");
    EXPECT_EQ(error_of("{% for x in 5 %}{% endfor %}"), "chat template line 1: 'int' object is not iterable");
    EXPECT_EQ(error_of("{{ nothing() }}"), "chat template line 1: 'nothing' is undefined");
    EXPECT_EQ(error_of("{% macro m() %}\n{{ 1 // 0 }}{% endmacro %}\n{{ m() }}"), "chat template line 2: integer division or modulo by zero");
}

TEST(JinjaLimits, OutputIsBounded) {
    std::string e = error_of("{% for i in range(100000) %}{% for j in range(100000) %}{{ 'x' * 1000 }}{% endfor %}{% endfor %}");
    EXPECT_NE(e.find("output too large"), std::string::npos) << e;
    EXPECT_NE(error_of("{% set s = 'x' * 70000000 %}").find("string too large"), std::string::npos);
    EXPECT_NE(error_of("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
                  .find("string too large"),
              std::string::npos);
}

TEST(JinjaLimits, WorkIsBounded) {
    std::string e = error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
    EXPECT_NE(e.find("too much work"), std::string::npos) << e;
}

TEST(JinjaLimits, RecursionIsBounded) {
    std::string e = error_of("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}\n{{ m(0) }}");
    EXPECT_NE(e.find("recursion too deep"), std::string::npos) << e;
}

TEST(JinjaLimits, NestingIsBounded) {
    EXPECT_NE(error_of("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}").find("nested too deeply"), std::string::npos);
    EXPECT_NE(error_of("{{ " + std::string(1000, '[') + std::string(1000, ']') + " }}").find("nested too deeply"), std::string::npos);
    std::string chain = "{{ 1";
    for (int i = 0; i < 1000; ++i) chain += " + 1";
    EXPECT_NE(error_of(chain + " }}").find("nested too deeply"), std::string::npos);
    std::string ifs;
    for (int i = 0; i < 1000; ++i) ifs += "{% if true %}";
    EXPECT_NE(error_of(ifs).find("nested too deeply"), std::string::npos);
    std::string filters = "{{ 'x'";
    for (int i = 0; i < 1000; ++i) filters += "|trim";
    EXPECT_NE(error_of(filters + " }}").find("nested too deeply"), std::string::npos);
}

TEST(JinjaLimits, ValueNestingIsBounded) {
    std::string e = error_of("{% set ns = namespace(v=[]) %}{% for i in range(100000) %}{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}");
    EXPECT_NE(e.find("value nested too deeply"), std::string::npos) << e;
    json deep = json::array();
    for (int i = 0; i < 1000; ++i) deep = json::array({deep});
    EXPECT_NE(error_of("{{ messages }}", {{"messages", deep}}).find("context nested too deeply"), std::string::npos);
    EXPECT_NE(error_of("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}").find("nested too deeply to print"), std::string::npos);
}

TEST(JinjaLimits, SelfReferenceEndsCleanly) {
    // A namespace holding itself is a cycle; the render frees it (LeakSanitizer would say otherwise).
    EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me is defined }}"), "True");
}

}  // namespace
