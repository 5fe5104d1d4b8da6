#include "grammar/grammar_cache.h"

namespace cellm::grammar {

GrammarCache::GrammarCache(const Tokenizer& tokenizer, size_t capacity) : tokenizer_(tokenizer), capacity_(capacity) {}

std::shared_ptr<const CompiledGrammar> GrammarCache::get(Kind kind, std::string_view text) {
    if (text.size() > kMaxGrammarBytes) {
        throw GrammarError(std::string(kind == Kind::Gbnf ? "the grammar" : "the JSON schema") + " is " +
                           std::to_string(text.size()) + " bytes; the limit is " + std::to_string(kMaxGrammarBytes));
    }
    std::string key = (kind == Kind::Gbnf ? "g:" : "j:") + std::string(text);
    std::shared_ptr<const TokenVocabulary> vocabulary;
    {
        const std::lock_guard lock(mutex_);
        for (auto it = entries_.begin(); it != entries_.end(); ++it) {
            if (it->first == key) {
                entries_.splice(entries_.begin(), entries_, it);
                return entries_.front().second;
            }
        }
        if (!vocabulary_) vocabulary_ = std::make_shared<const TokenVocabulary>(tokenizer_);
        vocabulary = vocabulary_;
    }
    auto compiled = std::make_shared<const CompiledGrammar>(
        kind == Kind::Gbnf ? Grammar::from_gbnf(text) : Grammar::from_json_schema(text), vocabulary);
    const std::lock_guard lock(mutex_);
    entries_.emplace_front(std::move(key), compiled);
    if (entries_.size() > capacity_) entries_.pop_back();
    return compiled;
}

}  // namespace cellm::grammar
