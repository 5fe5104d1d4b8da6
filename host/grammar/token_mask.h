// Which tokens a grammar lets come next, precomputed per grammar position for one tokenizer.
//
// A parser state is a set of stacks; a token is allowed when some stack can consume all its bytes. Most tokens
// are decided by the top frame alone (XGrammar's adaptive token-mask cache): walking the vocabulary's byte trie
// from each position of the grammar, with the frames below unknown, sorts every token into accepted (consumed
// inside the frame), rejected (in no context it could return to), or uncertain (it runs past the frame's end,
// so the real stack decides). At run time a mask is the union of the cached accepted sets, plus the uncertain
// tokens checked one by one against the real stacks (matcher.h).
#pragma once

#include "grammar/grammar.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace cellm {
class Tokenizer;
}

namespace cellm::grammar {

// A tokenizer's tokens as bytes, in a trie. Special tokens (control, user-defined, unknown) and tokens with no
// bytes are left out: a grammar never produces them; end-of-generation is allowed apart, where the grammar may
// end. Immutable; shared by every grammar compiled for the tokenizer.
class TokenVocabulary {
public:
    explicit TokenVocabulary(const Tokenizer& tokenizer);
    // Vocabulary from token byte strings alone (tests, fuzzers); `end_of_generation` are excluded from the trie.
    TokenVocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> end_of_generation);

    int32_t n_vocab() const { return static_cast<int32_t>(bytes_.size()); }
    size_t mask_words() const { return (bytes_.size() + 63) / 64; }
    const std::string& bytes(int32_t token) const { return bytes_[static_cast<size_t>(token)]; }
    const std::vector<int32_t>& end_of_generation() const { return end_of_generation_; }
    // The tokens a grammar may produce, as a mask.
    const std::vector<uint64_t>& grammar_tokens() const { return grammar_tokens_; }

    // Trie nodes in preorder; node 0 is the root (the empty prefix). A node's subtree is [i, subtree_end), and
    // its tokens (sorted by bytes) are sorted_[first, nodes_[subtree_end].first).
    struct TrieNode {
        uint8_t byte;
        uint32_t depth;
        uint32_t subtree_end;
        uint32_t first;     // first token (index into sorted()) in the subtree
        uint32_t n_ending;  // how many of those, from `first`, end exactly here
    };
    const std::vector<TrieNode>& trie() const { return trie_; }
    const std::vector<int32_t>& sorted() const { return sorted_; }

private:
    void build();

    std::vector<std::string> bytes_;
    std::vector<int32_t> end_of_generation_;
    std::vector<uint64_t> grammar_tokens_;
    std::vector<TrieNode> trie_;
    std::vector<int32_t> sorted_;
};

// A grammar with its token-mask cache for one vocabulary. Immutable once built; shared by every session that
// uses the same grammar text (the engine caches them).
class CompiledGrammar {
public:
    CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary);

    const Grammar& grammar() const { return grammar_; }
    const TokenVocabulary& vocabulary() const { return *vocabulary_; }

    // The cached sets of one Bytes element (the top of a stack): the accepted tokens as a list when few, as a
    // bitset when many (a JSON string's characters accept most of a vocabulary); `uncertain` tokens are in
    // neither and need the real stack.
    struct PositionMask {
        std::vector<int32_t> accepted;
        std::vector<uint64_t> accepted_bits;  // empty, or mask_words() words
        std::vector<int32_t> uncertain;
    };
    const PositionMask& position_mask(uint32_t element) const { return masks_[mask_of_[element]]; }

    // The run-time half, shared by every matcher of this grammar: the stacks they reached (one forest, so the
    // same stack is the same node in every session) and, per top node, which of its position's uncertain tokens
    // the real stack accepts. A stack is resolved once; later masks at it are unions of lists.
    struct Runtime {
        std::mutex mutex;
        StackForest forest;
        std::unordered_map<uint32_t, std::vector<int32_t>> resolved;  // top node -> accepted uncertain tokens
        explicit Runtime(const Grammar& g) : forest(g) {}
    };
    Runtime& runtime() const { return *runtime_; }

    // Totals over the cache (benchmarks, logs).
    size_t n_positions() const { return masks_.size(); }
    size_t n_uncertain() const;
    size_t bytes() const;

private:
    // Where a frame whose caller is unknown may go on: the continuations at each place its rule may return to.
    struct Guess {
        std::vector<uint32_t> tops;
        bool deep = false;         // some of those callers end at once too: an even deeper frame decides
        bool by_follow = false;    // too many to walk: only the rule's FOLLOW set is checked
    };
    using Guesses = std::unordered_map<uint32_t, Guess>;  // by rule
    void compute(uint32_t element, PositionMask& out, StackForest& forest, Guesses& guesses);

    Grammar grammar_;
    std::shared_ptr<const TokenVocabulary> vocabulary_;
    std::vector<uint32_t> rule_of_;  // element -> the rule whose alternative holds it
    std::vector<uint32_t> mask_of_;  // Bytes element -> index into masks_
    std::vector<PositionMask> masks_;
    std::unique_ptr<Runtime> runtime_;
    uint64_t work_ = 0;  // trie steps of the compile so far (kMaxCompileWork)
};

}  // namespace cellm::grammar
