// One conversation at a time, for callers that want a blocking generate(): the scheduler with a single
// session. Each call is one turn; the KV blocks of earlier turns stay, so a conversation that grows turn by
// turn only computes what is new.
#pragma once

#include "engine/engine.h"
#include "schedule/scheduler.h"
#include "tokenize/tokenizer.h"

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace cellm {

struct GenerationRequest {
    std::vector<int32_t> prompt;  // the whole conversation so far, as tokens
    SamplingParams sampling;
    int32_t max_tokens = 256;
    std::vector<std::string> stop;
    int32_t prefill_chunk = 256;  // prompt tokens per step
};

using GenerationResult = SessionResult;

class Generator {
public:
    Generator(Engine& engine, const Tokenizer& tokenizer);
    ~Generator();
    Generator(const Generator&) = delete;
    Generator& operator=(const Generator&) = delete;

    // Runs one turn; `on_text` receives printable text as it is produced.
    GenerationResult generate(const GenerationRequest& request, const std::function<void(std::string_view)>& on_text);

    // Tokens whose keys and values are in the cache, in order.
    std::vector<int32_t> cached() const;

private:
    Engine& engine_;
    const Tokenizer& tokenizer_;
    std::unique_ptr<Scheduler> scheduler_;
    int32_t prefill_chunk_ = 0;
    SessionId session_ = -1;
};

}  // namespace cellm
