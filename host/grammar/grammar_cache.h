// Compiled grammars by text, for one tokenizer: a server answering the same response_format again, or an app
// reusing its schema, compiles it once. Thread-safe; compiling happens on the caller's thread, outside the lock,
// so a slow grammar never holds up another caller (or the scheduler, which never compiles).
#pragma once

#include "grammar/token_mask.h"

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace cellm::grammar {

class GrammarCache {
public:
    enum class Kind { Gbnf, JsonSchema };
    // Borrows the tokenizer, which must outlive the cache; its vocabulary trie is built at the first compile.
    explicit GrammarCache(const Tokenizer& tokenizer, size_t capacity = 16);

    // The compiled grammar for `text`, from the cache or compiled now. Throws GrammarError.
    std::shared_ptr<const CompiledGrammar> get(Kind kind, std::string_view text);

private:
    const Tokenizer& tokenizer_;
    size_t capacity_;
    std::mutex mutex_;
    std::shared_ptr<const TokenVocabulary> vocabulary_;
    // Most recently used first.
    std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> entries_;
};

}  // namespace cellm::grammar
