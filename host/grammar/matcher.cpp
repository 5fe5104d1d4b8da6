#include "grammar/matcher.h"

#include <algorithm>

namespace cellm::grammar {

namespace {

void set_bit(std::span<uint64_t> bits, int32_t t) { bits[static_cast<size_t>(t) / 64] |= uint64_t{1} << (t % 64); }

// Moves `tops` over `bytes`; false when some byte finds no stack able to take it. `bottom` tells whether the
// input may end after the last byte.
bool walk(StackForest& forest, std::vector<uint32_t>& tops, std::string_view bytes, bool& bottom) {
    std::vector<uint32_t> next;
    bottom = false;
    for (char c : bytes) {
        if (tops.empty()) return false;
        bottom = forest.advance(tops, static_cast<uint8_t>(c), next);
        tops.swap(next);
    }
    return !tops.empty() || bottom;
}

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar) : grammar_(std::move(grammar)) {
    auto& runtime = grammar_->runtime();
    const std::lock_guard lock(runtime.mutex);
    can_end_ = runtime.forest.start(tops_);
}

void GrammarMatcher::fill_mask(std::span<uint64_t> allowed) {
    const TokenVocabulary& vocabulary = grammar_->vocabulary();
    auto& runtime = grammar_->runtime();
    const std::lock_guard lock(runtime.mutex);
    std::fill(allowed.begin(), allowed.end(), 0);
    for (uint32_t top : tops_) {
        const auto& mask = grammar_->position_mask(runtime.forest.node(top).element);
        for (int32_t t : mask.accepted) set_bit(allowed, t);
        for (size_t w = 0; w < mask.accepted_bits.size(); ++w) allowed[w] |= mask.accepted_bits[w];
        if (mask.uncertain.empty()) continue;
        auto [it, added] = runtime.resolved.try_emplace(top);
        if (added) {
            for (int32_t t : mask.uncertain) {
                std::vector<uint32_t> stack{top};
                bool bottom = false;
                if (walk(runtime.forest, stack, vocabulary.bytes(t), bottom)) it->second.push_back(t);
            }
        }
        for (int32_t t : it->second) set_bit(allowed, t);
    }
    if (can_end_) {
        for (int32_t t : vocabulary.end_of_generation()) set_bit(allowed, t);
    }
}

bool GrammarMatcher::accept_token(int32_t token) {
    const TokenVocabulary& vocabulary = grammar_->vocabulary();
    if (token < 0 || token >= vocabulary.n_vocab()) return false;
    const auto& eog = vocabulary.end_of_generation();
    if (std::find(eog.begin(), eog.end(), token) != eog.end()) {
        if (!can_end_) return false;
        tops_.clear();
        return true;
    }
    const std::string& bytes = vocabulary.bytes(token);
    if (bytes.empty()) return false;
    return accept_text(bytes);
}

bool GrammarMatcher::accept_text(std::string_view bytes) {
    auto& runtime = grammar_->runtime();
    const std::lock_guard lock(runtime.mutex);
    std::vector<uint32_t> tops = tops_;
    bool bottom = false;
    if (!walk(runtime.forest, tops, bytes, bottom)) return false;
    tops_.swap(tops);
    can_end_ = bottom;
    return true;
}

}  // namespace cellm::grammar
