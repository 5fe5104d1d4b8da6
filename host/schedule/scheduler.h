// The scheduler serves many sessions on one engine with continuous batching. Each step gathers the next
// token of every decoding session and chunks of waiting prompts (chunked prefill) into one batch under a
// token budget, runs it as one engine step, and hands each session its logits. When the KV pool runs short
// it preempts the session it can best spare (lowest priority, then least recently served): that session
// gives its blocks back and computes its context again when it is admitted next, usually partly from the
// prefix cache.
//
// This is the host's session API: create, submit, step or run, cancel, destroy. It is single-threaded:
// call it from one thread; streaming callbacks run on that thread, inside step().
#pragma once

#include "engine/engine.h"
#include "error.h"
#include "schedule/session.h"
#include "tokenize/tokenizer.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

namespace cellm {

// A prompt longer than the context, or than the whole KV pool: it can never run, however long it waits.
class PromptTooLongError : public Error {
public:
    using Error::Error;
};

// Limits that stand in for a small device's thermal and battery budget ([policy] in the manifest).
struct Policy {
    int32_t max_batch = 0;              // sessions per step at most; 0: no cap
    double max_tokens_per_second = 0;   // generated tokens per second over all sessions at most; 0: no cap
};

struct SchedulerOptions {
    int32_t token_budget = 256;  // tokens per step (decode tokens plus prompt chunks)
    int32_t max_running = 8;     // sessions holding KV blocks at once
    Policy policy;
};

struct SchedulerStats {
    int64_t steps = 0;
    int64_t batched_tokens = 0;  // tokens computed, over all steps
    int64_t preemptions = 0;
    int32_t sessions = 0, running = 0, waiting = 0;
    KvStats kv;
};

class Scheduler {
public:
    Scheduler(Engine& engine, const Tokenizer& tokenizer, SchedulerOptions options);
    ~Scheduler();
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    SessionId create(SessionOptions options);
    // Replaces an idle session's settings (sampling, limits, callback) for its next turn.
    void reconfigure(SessionId id, SessionOptions options);
    // Starts a turn: `prompt` is the whole conversation so far as tokens (a later turn repeats the earlier
    // ones; the prefix cache finds them). Throws cellm::Error when the session is busy or the prompt can
    // never run (empty, longer than the context, larger than the whole KV pool).
    // `embeddings`, when given, replace the embeddings of some prompt tokens (an image's tokens); the model must
    // take them (Model::vision()), and the positions they cover are never matched against cached tokens.
    void submit(SessionId id, std::vector<int32_t> prompt, std::shared_ptr<const PromptEmbeddings> embeddings = nullptr);
    // One scheduling step. Returns false when no session has work left.
    bool step();
    // Steps until every submitted turn has ended.
    void run();
    // Ends the session's turn now ("cancelled") and frees its blocks; safe inside a streaming callback.
    void cancel(SessionId id);
    // Ends the session's turn now with finish reason "error" and `why` (a step that cannot run at all).
    void fail(SessionId id, const std::string& why);
    // Forgets the session (cancelling its turn first).
    void destroy(SessionId id);
    // A new idle session with `options` that holds the KV blocks of idle session `id` (shared copy-on-write),
    // so a turn that starts with the same conversation reuses them.
    SessionId fork(SessionId id, SessionOptions options);

    const Session& session(SessionId id) const;
    // Tokens whose keys and values the session's blocks hold (kept between turns until the pool needs them).
    std::span<const int32_t> cached_tokens(SessionId id) const;
    SchedulerStats stats() const;
    const SchedulerOptions& options() const { return options_; }

private:
    struct Planned {
        Session* session;
        int32_t n_tokens;
        bool wants_logits;
    };
    Session& find(SessionId id);
    void admit(Session& s);
    void preempt(Session& s);
    void release(Session& s);
    void end_turn(Session& s, const std::string& reason, const std::string& error = {});
    // Ends the turn of a session the whole pool cannot hold, with an error naming the sizes.
    void end_never_fits(Session& s);
    // Picks the running session (other than those in `keep`) to give way when blocks run short.
    Session* choose_victim(const std::vector<Planned>& keep, const Session& for_whom);
    void plan(std::vector<Planned>& out);
    void throttle(int64_t generated);

    Engine& engine_;
    const Tokenizer& tokenizer_;
    SchedulerOptions options_;
    std::map<SessionId, std::unique_ptr<Session>> sessions_;
    SessionId next_id_ = 0;
    int64_t next_arrival_ = 0;
    int64_t step_index_ = 0;
    bool in_step_ = false;
    int64_t batched_tokens_ = 0, preemptions_ = 0;
    std::vector<Engine::Work> work_;
    std::vector<std::vector<Engine::EmbeddedRow>> embedded_;  // per work item, for the step's duration
    std::vector<float> logits_;
    // Token-rate policy: generated tokens since the cap's clock started.
    std::chrono::steady_clock::time_point rate_start_{};
    int64_t rate_tokens_ = 0;
};

}  // namespace cellm
