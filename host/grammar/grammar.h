// A context-free grammar over bytes, and the pushdown recognizer that walks it.
//
// Text grammars (GBNF, gbnf.h; JSON Schema, json_schema.h) are parsed into rules over code points, then lowered
// here to rules over bytes: a character class becomes byte sets, UTF-8 sequence by sequence. Working on bytes is
// what lets a token end in the middle of a character, and lets token masks (token_mask.h) be computed with a
// trie walk over the vocabulary's bytes.
//
// Three nouns with three lifetimes, as in XGrammar: a Grammar (rules; immutable, shared), a CompiledGrammar
// (a Grammar with one tokenizer's token-mask cache; token_mask.h), and a matcher (one generation's parser state;
// matcher.h).
#pragma once

#include "error.h"
#include "grammar/json_schema.h"

#include <bitset>
#include <span>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cellm::grammar {

// A grammar that does not parse, refers to an undefined rule, is left-recursive, uses a JSON Schema keyword the
// engine cannot honour, or is too large. The message names the rule, keyword or position.
class GrammarError : public Error {
public:
    using Error::Error;
};

// Limits that keep a hostile grammar from taking the process's memory or time.
inline constexpr size_t kMaxGrammarBytes = 256 * 1024;  // GBNF or JSON Schema text
inline constexpr size_t kMaxElements = 1 << 20;         // after lowering to bytes
// Trie nodes a compile may visit over all its positions: a few seconds. Typical JSON schemas need under 1% of it
// even on a 262k vocabulary; a grammar of thousands of permissive positions is refused rather than let run.
inline constexpr uint64_t kMaxCompileWork = uint64_t{60} << 20;

// One code point range, both ends included.
struct CharRange {
    uint32_t first, last;
};

// The parsed form of a text grammar, before lowering: each rule is a list of alternatives, each a sequence of
// items. The GBNF parser and the JSON Schema compiler both produce it.
struct RuleItem {
    enum Kind : uint8_t { Chars, Rule };
    Kind kind = Chars;
    std::vector<CharRange> chars;  // Chars: the code points it matches (already complemented for [^...])
    uint32_t rule = 0;             // Rule: index into RuleSet::rules
};
struct RuleSet {
    struct Rule {
        std::string name;
        std::vector<std::vector<RuleItem>> alternatives;  // an empty alternative matches the empty string
        // A link of a counted repetition's chain (x{0,n}: link_k ::= x link_k-1 | ""). Rules are not copied
        // into links: n copies of x's positions would each need a walk of the whole vocabulary.
        bool counted = false;
    };
    std::vector<Rule> rules;
    uint32_t root = 0;
};

// The byte-level grammar the recognizer runs. Each rule's alternatives lie in `elements`, one after another,
// each closed by an End element.
class Grammar {
public:
    // Lowers `rules` to bytes and checks it: every rule defined, none left-recursive, the size within
    // kMaxElements. Throws GrammarError.
    static Grammar lower(const RuleSet& rules);
    // GBNF text (llama.cpp's dialect), generation starting at `root`.
    static Grammar from_gbnf(std::string_view text);
    // A JSON Schema (text), as json_schema.h compiles it.
    static Grammar from_json_schema(std::string_view schema, const JsonSchemaOptions& options = {});

    struct Element {
        enum Kind : uint8_t { Bytes, Rule, End };
        Kind kind;
        uint32_t value;  // Bytes: index into byte_sets(); Rule: the rule; End: the rule it closes
    };

    const std::vector<Element>& elements() const { return elements_; }
    const std::vector<std::bitset<256>>& byte_sets() const { return byte_sets_; }
    // First element of each alternative of rule r.
    const std::vector<uint32_t>& alternatives(uint32_t rule) const { return alternatives_[rule]; }
    size_t n_rules() const { return alternatives_.size(); }
    uint32_t root() const { return root_; }
    const std::string& rule_name(uint32_t rule) const { return names_[rule]; }
    // Where rule r returns to: the element after each reference to it, and for a reference in tail position,
    // where the referring rule returns to (used to tell tokens that fit no context from those that need one).
    const std::vector<uint32_t>& return_sites(uint32_t rule) const { return return_sites_[rule]; }
    // Whether the rule has more return sites than return_sites() lists (then it lists some of them only).
    bool many_return_sites(uint32_t rule) const { return many_sites_[rule]; }
    // The bytes that may come right after a frame of rule r ends (its FOLLOW set, over every caller).
    const std::bitset<256>& follow(uint32_t rule) const { return follow_[rule]; }

private:
    std::vector<Element> elements_;
    std::vector<std::bitset<256>> byte_sets_;
    std::vector<std::vector<uint32_t>> alternatives_;
    std::vector<std::vector<uint32_t>> return_sites_;
    std::vector<std::bitset<256>> follow_;
    std::vector<bool> many_sites_;
    std::vector<std::string> names_;
    uint32_t root_ = 0;
};

// The parser's stacks, shared as a tree: a node is one frame (the element to match next, or to return to) and
// points at the frame below it. Identical stacks are one node, so a set of stacks is a set of node ids.
class StackForest {
public:
    static constexpr uint32_t kBottom = 0;   // below the root rule: reaching it means the grammar may end
    static constexpr uint32_t kUnknown = 1;  // an unknown caller (token-mask precomputation)
    static constexpr uint32_t kGuess = 2;    // a caller guessed from the return sites (likewise)

    explicit StackForest(const Grammar& grammar);  // borrowed: the grammar must outlive the forest

    struct Node {
        uint32_t element;  // the Bytes element to match (top frames) or the element to resume at (callers)
        uint32_t parent;
    };
    const Node& node(uint32_t id) const { return nodes_[id]; }
    uint32_t intern(uint32_t element, uint32_t parent);
    // Whether the node's stack ends in kGuess rather than kBottom or kUnknown.
    bool guessed(uint32_t id) const { return guessed_[id] != 0; }

    // The frames reached from `element` in frame `parent` without consuming a byte: each Bytes element that may
    // come next (as a top node), and where the stack may empty on the way. A frame of a rule called from one
    // place only returns there even when its caller is unknown, so unknown callers stay unknown as long as
    // possible (that is what keeps most tokens context-free in the mask cache).
    struct Settled {
        std::vector<uint32_t> tops;
        bool reaches_bottom = false;        // the whole input may end here
        std::vector<uint32_t> escaped;      // rules whose frame ended into kUnknown (several possible callers)
        bool reaches_guess = false;         // a frame ended into kGuess
    };
    const Settled& settle(uint32_t element, uint32_t parent);
    // Moves the stacks `tops` over one byte: the new tops go to `next` (sorted, unique). Returns whether some
    // stack emptied into kBottom on the way (the input so far is a whole sentence).
    bool advance(std::span<const uint32_t> tops, uint8_t byte, std::vector<uint32_t>& next);
    // The tops of a fresh parse at the root rule; returns whether the empty input is a sentence.
    bool start(std::vector<uint32_t>& tops);

    size_t size() const { return nodes_.size(); }
    const Grammar& grammar() const { return *grammar_; }

private:
    void settle_into(uint32_t element, uint32_t parent, Settled& out, std::vector<uint64_t>& visited);

    const Grammar* grammar_;
    std::vector<Node> nodes_;
    std::vector<uint8_t> guessed_;
    std::unordered_map<uint64_t, uint32_t> ids_;
    std::unordered_map<uint64_t, Settled> settled_;
};

// Runs a grammar over bytes with no tokenizer: the GBNF and JSON Schema tests, the fuzzers. Borrows the grammar,
// which must outlive it.
class Recognizer {
public:
    explicit Recognizer(const Grammar& grammar);
    // Consumes bytes; false (and the state unchanged) when the grammar cannot continue with them.
    bool feed(std::string_view bytes);
    // Whether feed(bytes) would succeed, leaving the state as it is.
    bool can_feed(std::string_view bytes);
    // The bytes so far are a whole sentence of the grammar.
    bool accepting() const { return accepting_; }

private:
    StackForest forest_;
    std::vector<uint32_t> tops_;
    bool accepting_ = false;
};

}  // namespace cellm::grammar
