// llama.cpp's GBNF grammar format, so that grammar files written for llama.cpp work unchanged:
//   root   ::= answer ("," answer)*      # comments run to the end of the line
//   answer ::= "yes" | "no" | [0-9]{1,3} | [^\n]+ | .
// Rule names are letters, digits, '-' and '_'. A rule ends at the end of its line unless a parenthesis is open
// or the next line goes on with '|'. Strings and classes take \n \r \t \\ \" \' \[ \] \- \/ \xHH \uHHHH and
// \UHHHHHHHH escapes. Postfix * + ? {m} {m,} {m,n} repeat the item before them.
#pragma once

#include "grammar/grammar.h"

#include <string>
#include <string_view>

namespace cellm::grammar {

// Parses GBNF text into rules; `root` is the start rule. Throws GrammarError with the line and column of the
// first error, an undefined or twice-defined rule, or a text over `max_bytes` (users' grammars: kMaxGrammarBytes;
// the JSON Schema compiler's output may be larger than the schema it came from).
RuleSet parse_gbnf(std::string_view text, size_t max_bytes = kMaxGrammarBytes);

// A GBNF string literal, quotes included, matching exactly `text` (UTF-8 passes through; quotes, backslashes and
// control bytes are escaped). For the grammars written as text: JSON Schema's, tool calls'.
std::string gbnf_literal(std::string_view text);

}  // namespace cellm::grammar
