// What stands behind a cellm_engine handle: the runtime a manifest wires (plugins, model, backend, engine), one
// scheduler, and the thread that runs its steps. The scheduler is single-threaded, so every call into it holds
// `mutex_`; the scheduler thread holds it for a whole step and lets waiting callers in between steps, so a
// submit or cancel waits at most one step. Events reach sessions on the scheduler thread only.
#pragma once

#include <cellm/cellm.h>

#include "error.h"
#include "grammar/grammar_cache.h"
#include "manifest.h"
#include "tokenize/prompt.h"
#include "runtime.h"
#include "schedule/scheduler.h"
#include "tools/tool_call_parser.h"
#include "vision/image_prompt.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace cellm::sdk {

// A session result's finish reason ("eog", "stop", ...) as the C API names it.
cellm_finish_reason finish_reason_of(const std::string& reason);

// A session's events on their way to its owner: handed to the callback, or queued for polling.
class SessionChannel {
public:
    struct Event {
        cellm_event_kind kind;
        std::string text;
        int32_t generated_tokens = 0;
        cellm_finish_reason finish_reason = CELLM_FINISH_NONE;
        // TOOL_CALL: which call, and its id and function.
        int32_t tool_call_index = -1;
        std::string tool_call_id{}, tool_name{};
    };

    SessionChannel(cellm_session* handle, cellm_event_fn callback, void* user_data);
    void set_callback(cellm_event_fn callback, void* user_data);

    // Scheduler thread: a new event.
    void deliver(Event event);
    // Owner: the next queued event, waiting up to timeout_ms (negative: forever); nullopt on timeout.
    std::optional<Event> next(int32_t timeout_ms);

    // A turn runs from submit until its DONE event is delivered. Events of the previous turn still queued
    // are dropped when the next one begins.
    void begin_turn();
    bool busy() const;
    // Owner: waits until the turn's DONE was delivered; false on timeout.
    bool wait_idle(int32_t timeout_ms);

private:
    cellm_session* handle_;
    cellm_event_fn callback_;
    void* user_data_;
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<Event> queue_;
    bool busy_ = false;
};

class EngineCore {
public:
    // Loads everything and starts the scheduler thread. Throws cellm::Error; ManifestError for a bad manifest.
    EngineCore(Manifest manifest, int32_t max_sessions);
    ~EngineCore();

    // Ends every turn, stops the scheduler thread and frees the model. Idempotent.
    void close();
    bool closed() const { return closed_.load(); }

    const Manifest& manifest() const { return manifest_; }
    const Tokenizer& tokenizer() const { return runtime_->model().tokenizer(); }
    const PromptBuilder& prompt() const { return *prompt_; }
    // Compiled grammars for this model's tokenizer; any thread, without the scheduler's lock.
    grammar::GrammarCache& grammars() const { return *grammars_; }
    const Runtime& runtime() const { return *runtime_; }
    int32_t max_sessions() const { return max_sessions_; }
    const char* model_name() const { return model_name_.c_str(); }
    const char* model_path() const { return model_path_.c_str(); }
    const char* chat_template() const;
    int32_t kv_blocks() const { return kv_blocks_; }

    SchedulerStats stats();
    SessionId create(SessionOptions options, std::shared_ptr<SessionChannel> channel);
    void reconfigure(SessionId id, SessionOptions options);
    SessionId fork(SessionId id, SessionOptions options, std::shared_ptr<SessionChannel> channel);
    // Throws cellm::Error when the prompt can never run; the channel's turn begins when it is accepted.
    void submit(SessionId id, std::vector<int32_t> prompt);
    // A prompt with images (vision/image_prompt.h): `text` as rendered, each image a PNG or JPEG file's bytes.
    // The images are encoded here, under the lock, since the scheduler thread drives the same backend.
    void submit_images(SessionId id, const std::string& text, std::span<const std::span<const uint8_t>> images);
    void cancel(SessionId id);
    void destroy(SessionId id);
    // Reads a session's result under the lock: `read` gets the scheduler's Session.
    template <typename Read>
    auto with_session(SessionId id, Read read) {
        Lock lock(*this);
        check_open();  // a close on another thread may have come after the caller's own check
        return read(scheduler_->session(id));
    }
    // The answer of a session's current or last turn as the owner sees it: the text (with tools, the calls'
    // markup taken out), the calls, and the finish reason (tool_calls for an answer that ended with calls).
    struct Answer {
        std::string text;
        std::vector<ToolCall> tool_calls;
        cellm_finish_reason finish_reason = CELLM_FINISH_NONE;
    };
    Answer answer(SessionId id);
    // cellm_engine_evaluate: `tokens` as a fresh sequence of the engine's own, in steps of at most the token budget,
    // each under the lock; `on_logits` gets each position's row from `first` on, between the steps, without the
    // lock. The caller checked tokens, context length and `first`. Throws BusyError when the pool (or the state
    // pool) has no room now, PromptTooLongError when the whole pool could never hold the sequence.
    void evaluate(std::span<const int32_t> tokens, int32_t first,
                  const std::function<void(int32_t position, const float* logits)>& on_logits);

private:
    // Holds the scheduler: taken by callers on their own thread, and a no-op on the scheduler thread, which
    // already holds it while callbacks run.
    class Lock {
    public:
        explicit Lock(EngineCore& core);
        ~Lock();
        Lock(const Lock&) = delete;
        Lock& operator=(const Lock&) = delete;

    private:
        EngineCore& core_;
        bool owns_ = false;
    };
    void serve();
    // Scheduler thread, lock held: the DONE event of every turn that has ended.
    void deliver_finished();
    // Scheduler thread, lock held: a step failed as a whole; every running turn ends with the error.
    void fail_all(const std::string& why);
    SessionOptions wired(SessionOptions options, SessionId id);
    // Scheduler thread, lock held: generated text on its way to the channel, through the turn's tool-call parser
    // when the session has tools.
    void deliver_text(SessionId id, std::string_view text);
    void begin_tool_turn(SessionId id);
    void deliver_tool_deltas(SessionId id, const std::vector<tools::ToolCallParser::Delta>& deltas);
    cellm_finish_reason finish_reason(SessionId id, const SessionResult& result) const;
    void check_open() const;

    Manifest manifest_;
    int32_t max_sessions_;
    std::string model_name_, model_path_;
    int32_t kv_blocks_ = 0;
    std::unique_ptr<Runtime> runtime_;
    std::unique_ptr<PromptBuilder> prompt_;
    std::unique_ptr<Scheduler> scheduler_;
    std::unique_ptr<ImagePrompter> images_;  // made at the first prompt with images
    std::unique_ptr<grammar::GrammarCache> grammars_;

    std::mutex mutex_;
    std::condition_variable wake_;      // the scheduler thread: new work, a caller waiting, or close
    std::atomic<int> callers_waiting_{0};
    bool work_ = false;                 // something changed since the last step found nothing to do
    std::atomic<bool> closed_{false};
    std::map<SessionId, std::shared_ptr<SessionChannel>> channels_;
    // The running or last turn of each session with tools: its parser, and the calls it announced (id, name).
    struct ToolTurn {
        tools::ToolCallParser parser;
        std::vector<std::pair<std::string, std::string>> announced;
        bool finished = false;
    };
    std::map<SessionId, ToolTurn> tool_turns_;
    std::thread thread_;
};

// Failures the C API reports with their own result code.
class ManifestError : public Error {  // CELLM_E_MANIFEST: the manifest could not be read or validated
public:
    using Error::Error;
};
class BusyError : public Error {  // CELLM_E_BUSY
public:
    using Error::Error;
};
class ClosedError : public Error {  // CELLM_E_CLOSED
public:
    using Error::Error;
};

}  // namespace cellm::sdk
