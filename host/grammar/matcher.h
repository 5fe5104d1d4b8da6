// One generation's grammar state: which tokens may come next (a mask over the vocabulary) and the parse after
// each accepted token. Owned by a session; one thread at a time. Cheap to create and to copy: the stacks live
// in the CompiledGrammar's shared forest, the matcher holds only its set of top nodes.
#pragma once

#include "grammar/token_mask.h"

#include <memory>
#include <span>
#include <string_view>

namespace cellm::grammar {

class GrammarMatcher {
public:
    explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

    // Writes the allowed tokens as a bitset (bit t % 64 of word t / 64; vocabulary().mask_words() words):
    // tokens whose bytes the grammar can consume next, and end-of-generation where the text may end.
    void fill_mask(std::span<uint64_t> allowed);
    // Moves over a token. False, with the state unchanged, when the grammar does not allow it. An
    // end-of-generation token is accepted where the text may end.
    bool accept_token(int32_t token);
    // Moves over text that was generated before the grammar applied (a lazy grammar's trigger and what came
    // with it). False, with the state unchanged, when the grammar does not allow it.
    bool accept_text(std::string_view bytes);
    // The text so far is a whole sentence of the grammar.
    bool can_end() const { return can_end_; }
    size_t mask_words() const { return grammar_->vocabulary().mask_words(); }
    // Nothing but the end may follow.
    bool finished() const { return tops_.empty(); }

private:
    std::shared_ptr<const CompiledGrammar> grammar_;
    std::vector<uint32_t> tops_;
    bool can_end_ = false;
};

}  // namespace cellm::grammar
