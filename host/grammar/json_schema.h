// JSON Schema -> GBNF: the schema compiler behind Grammar::from_json_schema (response_format json_schema, tool
// call arguments).
//
// What the grammar matches, and where it is narrower than the schema (all documented in json_schema.cpp):
// - compact JSON, plus the whitespace llama.cpp allows between tokens;
// - an object's declared properties in the schema's order (as llama.cpp and OpenAI's strict mode do), any extra
//   properties after them where the schema allows them (see JsonSchemaOptions for an object that does not say);
// - numbers with bounds in plain decimal notation (no exponent); integers without a fraction or exponent;
// - strings and property names in their usual JSON spelling: a character under a `pattern` or `format` may be
//   escaped only where JSON requires it (a plain "\u0061" is not taken for "a").
// - oneOf branches kept apart by type or by a required name, which is stricter than the schema when a branch
//   constrains more than that.
// Every keyword that constrains and is not honoured exactly is refused with GrammarError.
#pragma once

#include <string>
#include <string_view>

namespace cellm::grammar {

struct JsonSchemaOptions {
    // JSON Schema's own reading (true: what validation needs, and what the shared jsonschemabench instances
    // follow) or generation's (false, the default), which is narrower in two places, as OpenAI's structured
    // outputs, XGrammar's default strict mode and llama.cpp generate:
    // - an object that declares `properties` and does not say `additionalProperties` takes only those (an object
    //   that declares none stays open). Every answer still validates, and the grammar holds no "any other name"
    //   positions, whose token masks cost seconds of compile on a 262k vocabulary (docs/grammar.md);
    // - a number or integer without bounds has at most 16 digits before the point, 16 after it and 16 in the
    //   exponent (llama.cpp's limits): a small model otherwise runs on with zeros to max_tokens.
    bool validation = false;
    // Prepended to the name of every rule compiled from this schema, `root` included (prefix + "root"), so that
    // grammars of several schemas can share one GBNF text (tool calls: one per function). The shared primitive
    // rules (value, object, array, string, char, number, integer, integral-part, fraction-part, boolean, null,
    // space, format-*) keep their names and, for the same options, their text: keep one copy of each such line.
    // Letters, digits, '-' and '_'; empty by default. A view (so that the options stay a literal type): the text
    // must outlive the json_schema_to_gbnf call.
    std::string_view rule_prefix = {};
};

// JSON Schema text -> GBNF text whose `root` matches the JSON texts valid under the schema. Throws GrammarError
// naming the first keyword it cannot honour with its JSON pointer (`unsupported JSON Schema keyword "not" at
// /properties/a`), or what makes the schema malformed or unsatisfiable (minimum > maximum, an empty enum, an
// unresolvable $ref).
std::string json_schema_to_gbnf(std::string_view schema_json, const JsonSchemaOptions& options = {});

}  // namespace cellm::grammar
