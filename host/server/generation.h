// One choice's turn on the engine (a request has n of them) and the bookkeeping around it: the session
// (destroyed on every path, so a failed or abandoned request never keeps KV blocks), the latency histograms and
// token counters, and the server-wide count of sessions in flight that shutdown waits on.
//
// Events are polled (the session has no on_event callback): the request's own thread waits on its session
// with a short timeout, so between events it can notice a client that went away and a shutdown that gave up
// waiting, with no queue or wake-up shared with the scheduler thread.
#pragma once

#include "metrics.h"
#include "openai_request.h"

#include "cellm/cellm.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace cellm::server {

// The bytes of one token (cellm_engine_detokenize), as logprobs and /tokenize show it. Throws ApiError (500) when
// the engine refuses.
std::string token_piece(cellm_engine* engine, int32_t token);

// The requests holding a session. Shutdown stops admitting new ones, waits a grace period for the running
// ones, then asks the rest to cancel.
class InFlight {
    struct Leave {
        void operator()(InFlight* in_flight) const { in_flight->leave(); }
    };

public:
    // Held for as long as a request owns a session.
    using Ticket = std::unique_ptr<InFlight, Leave>;

    // Null once shutdown has begun: the request must be refused.
    Ticket enter();
    // Refuses new requests, waits up to `grace` for the running ones to end, then tells the rest to cancel.
    void drain(std::chrono::milliseconds grace);
    bool cancelling() const { return cancelling_.load(); }

private:
    void leave();

    std::mutex mutex_;
    std::condition_variable idle_;
    int active_ = 0;
    bool draining_ = false;
    std::atomic<bool> cancelling_{false};
};

class Generation {
public:
    // How long one poll waits for an event: the delay before a silent disconnect or a shutdown is noticed.
    static constexpr int32_t kPollMs = 100;

    // Creates the session of choice `choice` with the request's settings and submits its prompt, with its images
    // if it has any. Throws ApiError: 400 for a prompt that can never run (code context_length_exceeded), for a
    // grammar or schema the engine refuses (param: the field it came from), for images when the model takes none
    // and for an image the engine cannot decode, 500 for an engine failure.
    // A turn still running at `deadline` (when given) is cancelled there, and ends as if it reached max_tokens.
    Generation(cellm_engine* engine, const CompletionRequest& request, int32_t choice, const std::string& name,
               InFlight::Ticket ticket, Metrics& metrics,
               std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);
    ~Generation();
    Generation(const Generation&) = delete;
    Generation& operator=(const Generation&) = delete;

    // The next event, or nullopt when none came within `timeout_ms`. When shutdown stops waiting, the turn is
    // cancelled here, so it still ends with a DONE event. The event's text is valid until the next call.
    std::optional<cellm_event> next(int32_t timeout_ms = kPollMs);
    // Waits for the end of the turn and returns how it ended.
    cellm_finish_reason wait();
    // The client is gone: the session and its KV blocks are freed now.
    void abandon();

    // Of the turn (after DONE: final). The error string is valid until the next call on this object.
    cellm_session_stats stats();
    std::string text();
    // The turn's function calls (cellm_session_get_tool_calls): OpenAI's tool_calls array as JSON text.
    std::string tool_calls();
    // The log-probability rows so far (cellm_session_get_logprobs): *row_size entries per generated token.
    std::vector<cellm_logprob> logprobs(size_t* row_size);

private:
    void count_tokens();

    InFlight::Ticket ticket_;  // declared first: released after the session is destroyed
    Metrics& metrics_;
    struct Destroy {
        void operator()(cellm_session* session) const { cellm_session_destroy(session); }
    };
    std::unique_ptr<cellm_session, Destroy> session_;
    std::chrono::steady_clock::time_point submitted_, last_text_;
    std::optional<std::chrono::steady_clock::time_point> deadline_;
    int32_t tokens_seen_ = 0;
    bool text_seen_ = false;
    bool cancel_sent_ = false;
    bool tokens_counted_ = false;
};

}  // namespace cellm::server
