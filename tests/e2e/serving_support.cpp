#include "serving_support.h"

#include <algorithm>
#include <set>

namespace cellm::testing {

namespace {
SessionOptions greedy(int32_t max_tokens) {
    SessionOptions o;
    o.sampling.temperature = 0;
    o.max_tokens = max_tokens;
    o.ignore_end_of_generation = true;
    return o;
}
}  // namespace

ServeOutcome serve(Engine& engine, const Tokenizer& tokenizer, const std::vector<Request>& requests,
                   SchedulerOptions options) {
    Scheduler scheduler(engine, tokenizer, options);
    std::vector<SessionId> ids;
    for (const Request& r : requests) ids.push_back(scheduler.create(greedy(r.max_tokens)));
    ServeOutcome out;
    std::set<size_t> submitted;
    for (int32_t step = 0;; ++step) {
        for (size_t i = 0; i < requests.size(); ++i) {
            if (requests[i].submit_at_step <= step && submitted.insert(i).second) scheduler.submit(ids[i], requests[i].prompt);
        }
        // How many sessions this step serves: those whose computed context moves, seen from their sequences.
        std::vector<size_t> before(ids.size());
        for (size_t i = 0; i < ids.size(); ++i) before[i] = scheduler.cached_tokens(ids[i]).size();
        const bool more = scheduler.step();
        int32_t served = 0;
        for (size_t i = 0; i < ids.size(); ++i) served += scheduler.cached_tokens(ids[i]).size() > before[i] ? 1 : 0;
        out.max_batch = std::max(out.max_batch, served);
        if (!more && submitted.size() == requests.size()) break;
    }
    for (size_t i = 0; i < ids.size(); ++i) {
        const SessionResult& r = scheduler.session(ids[i]).result();
        out.tokens.push_back(r.tokens);
        out.reused.push_back(r.reused_tokens);
    }
    out.preemptions = scheduler.stats().preemptions;
    return out;
}

std::vector<int32_t> serve_alone(Engine& engine, const Tokenizer& tokenizer, const Request& request) {
    Scheduler scheduler(engine, tokenizer, {});
    const SessionId id = scheduler.create(greedy(request.max_tokens));
    scheduler.submit(id, request.prompt);
    scheduler.run();
    return scheduler.session(id).result().tokens;
}

}  // namespace cellm::testing
