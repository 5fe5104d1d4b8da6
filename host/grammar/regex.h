// ECMAScript regular expressions (as JSON Schema's `pattern` uses them) -> GBNF, over the JSON text of a string.
#pragma once

#include <string>
#include <string_view>

namespace cellm::grammar {

// A GBNF expression (usable as a rule body; it refers to no rule) matching the contents of a JSON string, without
// its quotes, whose decoded value the pattern matches. Like JSON Schema, the pattern is not anchored unless it
// says so with ^ / $. Characters are code points. A character JSON must escape (`"`, `\`, controls) is matched in
// its escaped spellings; others in their plain spelling only. Throws GrammarError naming what it cannot express:
// backreferences, lookaround, word boundaries, anchors inside groups, Unicode property escapes.
std::string regex_to_gbnf(std::string_view pattern);

// Whether the pattern matches somewhere in `text` (UTF-8, decoded), as JSON Schema's `pattern` checks a value.
// Throws GrammarError for what regex_to_gbnf refuses.
bool regex_search(std::string_view pattern, std::string_view text);

}  // namespace cellm::grammar
