#include "grammar/token_mask.h"

#include "tokenize/tokenizer.h"

#include <algorithm>
#include <numeric>

namespace cellm::grammar {

namespace {
constexpr size_t kMaxGuessTops = 32;
}  // namespace

TokenVocabulary::TokenVocabulary(const Tokenizer& tokenizer) {
    bytes_.resize(static_cast<size_t>(tokenizer.n_vocab()));
    for (int32_t t = 0; t < tokenizer.n_vocab(); ++t) {
        if (tokenizer.is_end_of_generation(t)) {
            end_of_generation_.push_back(t);
        } else if (!tokenizer.is_special(t)) {
            bytes_[static_cast<size_t>(t)] = tokenizer.token_bytes(t);
        }
    }
    build();
}

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> end_of_generation)
    : bytes_(std::move(token_bytes)), end_of_generation_(std::move(end_of_generation)) {
    for (int32_t t : end_of_generation_) bytes_.at(static_cast<size_t>(t)).clear();
    build();
}

void TokenVocabulary::build() {
    grammar_tokens_.assign(mask_words(), 0);
    for (size_t t = 0; t < bytes_.size(); ++t) {
        if (bytes_[t].empty()) continue;
        sorted_.push_back(static_cast<int32_t>(t));
        grammar_tokens_[t / 64] |= uint64_t{1} << (t % 64);
    }
    std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
        const auto& x = bytes_[static_cast<size_t>(a)];
        const auto& y = bytes_[static_cast<size_t>(b)];
        return x != y ? x < y : a < b;
    });
    // Preorder: a prefix sorts before its extensions, so each node's subtree is a run of sorted tokens, and the
    // tokens ending at a node come first in it.
    trie_.push_back({0, 0, 0, 0, 0});
    std::vector<uint32_t> path{0};  // node per depth of the previous token
    const std::string* previous = nullptr;
    for (uint32_t i = 0; i < sorted_.size(); ++i) {
        const std::string& b = bytes_[static_cast<size_t>(sorted_[i])];
        size_t common = 0;
        if (previous != nullptr) {
            while (common < b.size() && common < previous->size() && b[common] == (*previous)[common]) ++common;
        }
        while (path.size() > common + 1) {
            trie_[path.back()].subtree_end = static_cast<uint32_t>(trie_.size());
            path.pop_back();
        }
        for (size_t d = common; d < b.size(); ++d) {
            path.push_back(static_cast<uint32_t>(trie_.size()));
            trie_.push_back({static_cast<uint8_t>(b[d]), static_cast<uint32_t>(d + 1), 0, i, 0});
        }
        ++trie_[path.back()].n_ending;
        previous = &b;
    }
    while (!path.empty()) {
        trie_[path.back()].subtree_end = static_cast<uint32_t>(trie_.size());
        path.pop_back();
    }
    // Sentinel: lets trie_[subtree_end].first close the last subtree's run.
    trie_.push_back({0, 0, static_cast<uint32_t>(trie_.size() + 1), static_cast<uint32_t>(sorted_.size()), 0});
}

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary)
    : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)) {
    const auto& elements = grammar_.elements();
    rule_of_.resize(elements.size());
    for (size_t e = elements.size(); e-- > 0;) {
        rule_of_[e] = elements[e].kind == Grammar::Element::End ? elements[e].value : rule_of_[e + 1];
    }
    mask_of_.assign(elements.size(), UINT32_MAX);
    StackForest forest(grammar_);
    Guesses guesses;
    for (uint32_t e = 0; e < elements.size(); ++e) {
        if (elements[e].kind != Grammar::Element::Bytes) continue;
        mask_of_[e] = static_cast<uint32_t>(masks_.size());
        masks_.emplace_back();
        compute(e, masks_.back(), forest, guesses);
    }
    runtime_ = std::make_unique<Runtime>(grammar_);
}

void CompiledGrammar::compute(uint32_t element, PositionMask& out, StackForest& forest, Guesses& guesses) {
    const auto& elements = grammar_.elements();
    const auto& sets = grammar_.byte_sets();
    const auto& trie = vocabulary_->trie();
    const auto& sorted = vocabulary_->sorted();

    auto guess = [&](uint32_t rule) -> const Guess& {
        auto [it, added] = guesses.try_emplace(rule);
        if (added && grammar_.many_return_sites(rule)) {
            it->second.by_follow = true;
        } else if (added) {
            for (uint32_t site : grammar_.return_sites(rule)) {
                if (site == StackForest::kBottom) continue;  // after the root nothing follows
                const auto& s = forest.settle(site, StackForest::kGuess);
                it->second.tops.insert(it->second.tops.end(), s.tops.begin(), s.tops.end());
                it->second.deep = it->second.deep || s.reaches_guess;
            }
            Guess& g = it->second;
            std::sort(g.tops.begin(), g.tops.end());
            g.tops.erase(std::unique(g.tops.begin(), g.tops.end()), g.tops.end());
            // A rule called from many places (`space` in a JSON grammar): walking every guess would cost more
            // than it saves. Only the first byte after it is checked against what any caller could take next.
            if (g.tops.size() > kMaxGuessTops) {
                g.tops.clear();
                g.deep = false;
                g.by_follow = true;
            }
        }
        return it->second;
    };

    std::vector<int32_t> accepted;
    // Tokens sorted[from, to) go into `into`; rejected ones (null) are simply not listed.
    auto take = [&](uint32_t from, uint32_t to, std::vector<int32_t>* into) {
        if (into != nullptr) into->insert(into->end(), sorted.begin() + from, sorted.begin() + to);
    };

    struct Level {
        std::vector<uint32_t> tops;
        bool deep = false;         // a guessed caller ended at an earlier byte: a deeper one might go on
        std::bitset<256> follow;   // next bytes some caller of a frame that ended here might take
    };
    std::vector<Level> levels(1);
    std::vector<uint32_t> guessed;
    levels[0].tops = {forest.intern(element, StackForest::kUnknown)};
    const uint32_t end = static_cast<uint32_t>(trie.size() - 1);  // the sentinel
    for (uint32_t i = 1; i < end;) {
        if (++work_ > kMaxCompileWork) {
            throw GrammarError("the grammar is too costly to compile for this vocabulary (over " +
                               std::to_string(kMaxCompileWork) + " trie steps); simplify it");
        }
        const auto& node = trie[i];
        if (levels.size() <= node.depth) levels.resize(node.depth + 1);
        const Level& parent = levels[node.depth - 1];
        Level& here = levels[node.depth];
        here.tops.clear();
        bool ended = false, guess_ended = false, guess_deep = false;
        const bool follows = parent.follow.test(node.byte);
        here.follow.reset();
        guessed.clear();
        for (uint32_t t : parent.tops) {
            const auto& n = forest.node(t);
            if (!sets[elements[n.element].value].test(node.byte)) continue;
            const auto& s = forest.settle(n.element + 1, n.parent);
            here.tops.insert(here.tops.end(), s.tops.begin(), s.tops.end());
            ended = ended || s.reaches_bottom || !s.escaped.empty();
            guess_ended = guess_ended || s.reaches_guess;
            for (uint32_t rule : s.escaped) {
                const Guess& g = guess(rule);
                guessed.insert(guessed.end(), g.tops.begin(), g.tops.end());
                guess_deep = guess_deep || g.deep;
                if (g.by_follow) here.follow |= grammar_.follow(rule);
            }
        }
        std::sort(here.tops.begin(), here.tops.end());
        here.tops.erase(std::unique(here.tops.begin(), here.tops.end()), here.tops.end());
        const bool certain = ended || std::any_of(here.tops.begin(), here.tops.end(),
                                                  [&](uint32_t t) { return !forest.guessed(t); });
        const bool maybe = !here.tops.empty() || guess_ended || parent.deep || follows;
        take(node.first, node.first + node.n_ending, certain ? &accepted : maybe ? &out.uncertain : nullptr);

        // The state the longer tokens continue from.
        here.deep = parent.deep || guess_ended || guess_deep || follows;
        here.tops.insert(here.tops.end(), guessed.begin(), guessed.end());
        if (here.tops.empty() && (here.deep || here.follow.none())) {
            take(node.first + node.n_ending, trie[node.subtree_end].first, here.deep ? &out.uncertain : nullptr);
            i = node.subtree_end;
        } else {
            std::sort(here.tops.begin(), here.tops.end());
            here.tops.erase(std::unique(here.tops.begin(), here.tops.end()), here.tops.end());
            ++i;
        }
    }

    // A bitset costs mask_words() words to keep and to OR in; a list, one word per token.
    if (accepted.size() > vocabulary_->mask_words()) {
        out.accepted_bits.assign(vocabulary_->mask_words(), 0);
        for (int32_t t : accepted) out.accepted_bits[static_cast<size_t>(t) / 64] |= uint64_t{1} << (t % 64);
    } else {
        std::sort(accepted.begin(), accepted.end());
        out.accepted = std::move(accepted);
    }
    std::sort(out.uncertain.begin(), out.uncertain.end());
}

size_t CompiledGrammar::n_uncertain() const {
    return std::accumulate(masks_.begin(), masks_.end(), size_t{0},
                           [](size_t n, const PositionMask& m) { return n + m.uncertain.size(); });
}

size_t CompiledGrammar::bytes() const {
    return std::accumulate(masks_.begin(), masks_.end(), size_t{0}, [](size_t n, const PositionMask& m) {
        return n + (m.accepted.size() + m.uncertain.size()) * sizeof(int32_t) + m.accepted_bits.size() * sizeof(uint64_t);
    });
}

}  // namespace cellm::grammar
