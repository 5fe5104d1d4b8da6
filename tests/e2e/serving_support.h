// Serving several requests on the scheduler, and the same request alone, for tests that compare the two.
#pragma once

#include "schedule/scheduler.h"

#include <vector>

namespace cellm::testing {

struct Request {
    std::vector<int32_t> prompt;
    int32_t max_tokens = 8;
    int32_t submit_at_step = 0;  // submitted once this many steps have run
};

struct ServeOutcome {
    std::vector<std::vector<int32_t>> tokens;  // greedy tokens per request
    std::vector<int32_t> reused;               // prompt tokens each took from the cache
    int64_t preemptions = 0;
    int32_t max_batch = 0;                     // most sessions that shared one step
};

// Greedy decoding of every request on one scheduler, each for exactly max_tokens tokens.
ServeOutcome serve(Engine& engine, const Tokenizer& tokenizer, const std::vector<Request>& requests,
                   SchedulerOptions options);
// The same request with nothing else on a fresh scheduler.
std::vector<int32_t> serve_alone(Engine& engine, const Tokenizer& tokenizer, const Request& request);

}  // namespace cellm::testing
