#include "engine_core.h"

#include "error.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

namespace cellm::sdk {

namespace {

// A model run without a manifest takes the sampling its authors recommend, when the file says (llama.cpp's
// general.sampling.* keys); a value out of range is skipped with a warning, as the key is only advice.
void take_model_sampling(const ModelFile& file, SamplingParams& p) {
    const auto take = [&](const char* key, auto value, auto& field, auto valid) {
        if (!value) return;
        if (!valid(static_cast<double>(*value))) {
            spdlog::warn("{}: {} = {} is out of range; keeping {}", file.path().string(), key, *value, field);
            return;
        }
        field = static_cast<std::remove_reference_t<decltype(field)>>(*value);
    };
    const auto probability = [](double v) { return v >= 0 && v <= 1; };
    const auto count = [](double v) { return v >= 0 && v <= std::numeric_limits<int32_t>::max(); };
    take("general.sampling.temp", file.get_float("general.sampling.temp"), p.temperature,
         [](double v) { return std::isfinite(v) && v >= 0; });
    take("general.sampling.top_k", file.get_int("general.sampling.top_k"), p.top_k, count);
    take("general.sampling.top_p", file.get_float("general.sampling.top_p"), p.top_p, probability);
    take("general.sampling.min_p", file.get_float("general.sampling.min_p"), p.min_p, probability);
    take("general.sampling.penalty_last_n", file.get_int("general.sampling.penalty_last_n"), p.repeat_last_n, count);
    take("general.sampling.penalty_repeat", file.get_float("general.sampling.penalty_repeat"), p.repeat_penalty,
         [](double v) { return std::isfinite(v) && v > 0; });
}

}  // namespace

cellm_finish_reason finish_reason_of(const std::string& reason) {
    if (reason == "eog") return CELLM_FINISH_EOG;
    if (reason == "stop") return CELLM_FINISH_STOP;
    if (reason == "length") return CELLM_FINISH_LENGTH;
    if (reason == "context") return CELLM_FINISH_CONTEXT;
    if (reason == "cancelled") return CELLM_FINISH_CANCELLED;
    return CELLM_FINISH_ERROR;
}

// ---- SessionChannel ----------------------------------------------------------------------------------------

SessionChannel::SessionChannel(cellm_session* handle, cellm_event_fn callback, void* user_data)
    : handle_(handle), callback_(callback), user_data_(user_data) {}

void SessionChannel::set_callback(cellm_event_fn callback, void* user_data) {
    std::lock_guard lock(mutex_);
    callback_ = callback;
    user_data_ = user_data;
}

void SessionChannel::deliver(Event event) {
    std::unique_lock lock(mutex_);
    // Idle before anyone hears of the end, so the owner may submit the next turn from the callback on.
    if (event.kind == CELLM_EVENT_DONE) busy_ = false;
    if (callback_ != nullptr) {
        const cellm_event_fn callback = callback_;
        void* user_data = user_data_;
        lock.unlock();  // the callback may read this session (get_stats, get_text)
        const bool call = event.kind == CELLM_EVENT_TOOL_CALL;
        const cellm_event e{sizeof(cellm_event),
                            event.kind,
                            event.text.c_str(),
                            event.text.size(),
                            event.generated_tokens,
                            event.finish_reason,
                            event.tool_call_index,
                            call ? event.tool_call_id.c_str() : nullptr,
                            call ? event.tool_name.c_str() : nullptr};
        callback(handle_, &e, user_data);
    } else {
        queue_.push_back(std::move(event));
        lock.unlock();
    }
    changed_.notify_all();
}

std::optional<SessionChannel::Event> SessionChannel::next(int32_t timeout_ms) {
    std::unique_lock lock(mutex_);
    const auto ready = [&] { return !queue_.empty(); };
    if (timeout_ms < 0) {
        changed_.wait(lock, ready);
    } else if (!changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready)) {
        return std::nullopt;
    }
    Event e = std::move(queue_.front());
    queue_.pop_front();
    return e;
}

void SessionChannel::begin_turn() {
    std::lock_guard lock(mutex_);
    queue_.clear();  // what the owner left unread of the previous turn
    busy_ = true;
}

bool SessionChannel::busy() const {
    std::lock_guard lock(mutex_);
    return busy_;
}

bool SessionChannel::wait_idle(int32_t timeout_ms) {
    std::unique_lock lock(mutex_);
    const auto idle = [&] { return !busy_; };
    if (timeout_ms < 0) {
        changed_.wait(lock, idle);
        return true;
    }
    return changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms), idle);
}

// ---- EngineCore --------------------------------------------------------------------------------------------

EngineCore::Lock::Lock(EngineCore& core) : core_(core) {
    if (std::this_thread::get_id() == core_.thread_.get_id()) return;  // a callback, inside the step's lock
    ++core_.callers_waiting_;
    core_.wake_.notify_all();  // the scheduler thread lets callers in between two steps
    core_.mutex_.lock();
    --core_.callers_waiting_;
    owns_ = true;
}

EngineCore::Lock::~Lock() {
    if (!owns_) return;
    core_.mutex_.unlock();
    core_.wake_.notify_all();
}

EngineCore::EngineCore(Manifest manifest, int32_t max_sessions)
    : manifest_(std::move(manifest)), max_sessions_(max_sessions) {
    runtime_ = std::make_unique<Runtime>(manifest_, max_sessions_);
    if (manifest_.sampling_from_model) take_model_sampling(runtime_->model().file(), manifest_.generation.sampling);
    prompt_ = std::make_unique<PromptBuilder>(tokenizer(), manifest_.chat);
    grammars_ = std::make_unique<grammar::GrammarCache>(tokenizer());
    SchedulerOptions options;
    options.token_budget = manifest_.scheduler.token_budget;
    options.max_running = max_sessions_;
    options.policy = {manifest_.policy.max_batch, manifest_.policy.max_tokens_per_second};
    scheduler_ = std::make_unique<Scheduler>(runtime_->engine(), tokenizer(), options);
    model_path_ = manifest_.model.path.string();
    kv_blocks_ = runtime_->engine().kv_stats().blocks;
    const auto name = runtime_->model().file().get_string("general.name");
    model_name_ = name && !name->empty() ? *name : manifest_.model.path.stem().string();
    thread_ = std::thread([this] { serve(); });
}

EngineCore::~EngineCore() { close(); }

const char* EngineCore::chat_template() const { return chat_template_name(prompt_->kind()); }

void EngineCore::serve() {
    std::unique_lock lock(mutex_);
    while (true) {
        wake_.wait(lock, [&] { return closed_ || (callers_waiting_ == 0 && work_); });
        if (closed_) break;
        bool more = false;
        try {
            more = scheduler_->step();
        } catch (const std::exception& e) {
            spdlog::error("a step failed: {}", e.what());
            fail_all(e.what());
        }
        deliver_finished();
        if (!more) work_ = false;
    }
    // Closing: every running turn ends, and its owner hears so.
    for (const auto& [id, channel] : channels_) {
        if (channel->busy()) scheduler_->cancel(id);
    }
    deliver_finished();
}

void EngineCore::deliver_finished() {
    for (const auto& [id, channel] : channels_) {
        if (!channel->busy()) continue;
        const Session& s = scheduler_->session(id);
        if (s.state() != SessionState::Idle) continue;
        if (auto turn = tool_turns_.find(id); turn != tool_turns_.end() && !turn->second.finished) {
            turn->second.finished = true;
            deliver_tool_deltas(id, turn->second.parser.finish());
        }
        channel->deliver({CELLM_EVENT_DONE, {}, static_cast<int32_t>(s.result().tokens.size()),
                          finish_reason(id, s.result())});
    }
}

void EngineCore::fail_all(const std::string& why) {
    for (const auto& [id, channel] : channels_) scheduler_->fail(id, why);
}

void EngineCore::close() {
    if (closed_.exchange(true)) return;
    {
        // Taken as a caller so that the scheduler thread, which may be stepping, lets go between two steps and
        // sees closed_ under the lock (no lost wake-up); it then ends every turn and stops.
        Lock lock(*this);
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
    std::lock_guard lock(mutex_);
    channels_.clear();
    images_.reset();  // its graphs run on the backend the runtime owns
    scheduler_.reset();
    prompt_.reset();
    runtime_.reset();
}

void EngineCore::check_open() const {
    if (closed_) throw ClosedError("the engine was closed");
}

SchedulerStats EngineCore::stats() {
    Lock lock(*this);
    check_open();
    return scheduler_->stats();
}

SessionOptions EngineCore::wired(SessionOptions options, SessionId id) {
    // Text streams to the channel with the turn's token count; the session's id is known only once created.
    options.on_text = [this, id](std::string_view text) { deliver_text(id, text); };
    return options;
}

void EngineCore::deliver_text(SessionId id, std::string_view text) {
    if (auto turn = tool_turns_.find(id); turn != tool_turns_.end()) {
        deliver_tool_deltas(id, turn->second.parser.feed(text));
        return;
    }
    const auto generated = static_cast<int32_t>(scheduler_->session(id).result().tokens.size());
    channels_.at(id)->deliver({CELLM_EVENT_TEXT, std::string(text), generated, CELLM_FINISH_NONE});
}

void EngineCore::deliver_tool_deltas(SessionId id, const std::vector<tools::ToolCallParser::Delta>& deltas) {
    const auto& channel = channels_.at(id);
    const auto generated = static_cast<int32_t>(scheduler_->session(id).result().tokens.size());
    ToolTurn& turn = tool_turns_.at(id);
    for (const tools::ToolCallParser::Delta& d : deltas) {
        if (d.kind == tools::ToolCallParser::Delta::Content) {
            if (!d.text.empty()) channel->deliver({CELLM_EVENT_TEXT, d.text, generated, CELLM_FINISH_NONE});
            continue;
        }
        if (d.kind == tools::ToolCallParser::Delta::Arguments && d.text.empty()) continue;  // "" announces a call
        SessionChannel::Event e{CELLM_EVENT_TOOL_CALL, {}, generated, CELLM_FINISH_NONE, d.index, {}, {}};
        if (d.kind == tools::ToolCallParser::Delta::CallStart) {
            turn.announced.resize(std::max(turn.announced.size(), static_cast<size_t>(d.index) + 1));
            turn.announced[static_cast<size_t>(d.index)] = {d.id, d.text};
        } else {
            e.text = d.text;
        }
        const auto& announced = turn.announced.at(static_cast<size_t>(d.index));
        e.tool_call_id = announced.first;
        e.tool_name = announced.second;
        channel->deliver(std::move(e));
    }
}

cellm_finish_reason EngineCore::finish_reason(SessionId id, const SessionResult& result) const {
    const cellm_finish_reason reason = finish_reason_of(result.finish_reason);
    const auto turn = tool_turns_.find(id);
    const bool called = turn != tool_turns_.end() && turn->second.finished && !turn->second.parser.calls().empty();
    return called && (reason == CELLM_FINISH_EOG || reason == CELLM_FINISH_STOP) ? CELLM_FINISH_TOOL_CALLS : reason;
}

EngineCore::Answer EngineCore::answer(SessionId id) {
    Lock lock(*this);
    check_open();
    const SessionResult& result = scheduler_->session(id).result();
    Answer out;
    out.finish_reason = result.finish_reason.empty() ? CELLM_FINISH_NONE : finish_reason(id, result);
    if (const auto turn = tool_turns_.find(id); turn != tool_turns_.end()) {
        out.text = turn->second.parser.content();
        out.tool_calls = turn->second.parser.calls();
    } else {
        out.text = result.text;
    }
    return out;
}

SessionId EngineCore::create(SessionOptions options, std::shared_ptr<SessionChannel> channel) {
    Lock lock(*this);
    check_open();
    const SessionId id = scheduler_->create(options);
    scheduler_->reconfigure(id, wired(std::move(options), id));
    channels_.emplace(id, std::move(channel));
    return id;
}

void EngineCore::reconfigure(SessionId id, SessionOptions options) {
    Lock lock(*this);
    check_open();
    if (channels_.at(id)->busy()) throw BusyError("the session is still generating");
    scheduler_->reconfigure(id, wired(std::move(options), id));
}

SessionId EngineCore::fork(SessionId id, SessionOptions options, std::shared_ptr<SessionChannel> channel) {
    Lock lock(*this);
    check_open();
    if (channels_.at(id)->busy()) throw BusyError("a session can only be forked between turns");
    const SessionId copy = scheduler_->fork(id, options);
    scheduler_->reconfigure(copy, wired(std::move(options), copy));
    channels_.emplace(copy, std::move(channel));
    return copy;
}

void EngineCore::submit(SessionId id, std::vector<int32_t> prompt) {
    Lock lock(*this);
    check_open();
    const auto& channel = channels_.at(id);
    if (channel->busy()) throw BusyError("the session is still generating its previous turn");
    scheduler_->submit(id, std::move(prompt));
    begin_tool_turn(id);
    channel->begin_turn();
    work_ = true;
}

void EngineCore::submit_images(SessionId id, const std::string& text, std::span<const std::span<const uint8_t>> images) {
    Lock lock(*this);
    check_open();
    const auto& channel = channels_.at(id);
    if (channel->busy()) throw BusyError("the session is still generating its previous turn");
    if (!runtime_->model().vision()) throw Error("the model takes no images");
    if (images_ == nullptr) {
        images_ = std::make_unique<ImagePrompter>(runtime_->model(), runtime_->backend(), runtime_->engine().weights());
    }
    ImagePrompter::Prompt p = images_->build(text, images, prompt_->wants_bos(text));
    scheduler_->submit(id, std::move(p.tokens), std::move(p.embeddings));
    begin_tool_turn(id);
    channel->begin_turn();
    work_ = true;
}

void EngineCore::evaluate(std::span<const int32_t> tokens, int32_t first,
                          const std::function<void(int32_t position, const float* logits)>& on_logits) {
    if (std::this_thread::get_id() == thread_.get_id()) {
        throw Error("cellm_engine_evaluate cannot run in an event callback");
    }
    const auto n = static_cast<int32_t>(tokens.size());
    const int32_t step_tokens = manifest_.scheduler.token_budget;
    // Valid while the engine is open, which every use below checks under the lock first.
    Engine* engine = nullptr;
    // Room for the whole sequence at the start, or a clear no; blocks are then taken step by step, as a prompt's are.
    const auto check_room = [&](int32_t sequence, int32_t more) {
        const int32_t need = engine->blocks_needed(sequence, more);
        const KvStats kv = engine->kv_stats();
        if (more == n && need > kv.blocks) {
            throw PromptTooLongError(std::to_string(n) + " tokens need " + std::to_string(need) +
                                     " KV blocks; the whole pool has " + std::to_string(kv.blocks));
        }
        if (need > kv.free) {
            throw BusyError("the KV pool has " + std::to_string(kv.free) + " free blocks and the next " +
                            std::to_string(more) + " tokens need " + std::to_string(need) +
                            ": sessions hold the rest");
        }
    };
    int32_t sequence = -1;
    {
        Lock lock(*this);
        check_open();
        engine = &runtime_->engine();
        if (!engine->can_create_sequence()) throw BusyError("every recurrent-state slot is held by a session");
        sequence = engine->create_sequence();
        try {
            check_room(sequence, n);
        } catch (...) {
            engine->release_sequence(sequence);
            throw;
        }
    }
    const auto n_vocab = static_cast<size_t>(engine->n_vocab());
    // The sequence goes back under the lock, and only while the engine is open: close() frees it with the rest.
    const auto release = [&] {
        Lock lock(*this);
        if (closed_) return;
        engine->release_sequence(sequence);
        work_ = true;  // a waiting session may fit in the blocks given back
    };
    std::vector<float> logits;
    try {
        for (int32_t at = 0; at < n;) {
            // Steps end at `first` too, so that no step before it computes logits.
            const int32_t end = std::min(at < first ? first : n, at + step_tokens);
            const bool wanted = at >= first;
            {
                Lock lock(*this);
                check_open();
                check_room(sequence, end - at);
                const auto step = tokens.subspan(static_cast<size_t>(at), static_cast<size_t>(end - at));
                const Engine::Work work{sequence, step, wanted ? LogitsWanted::All : LogitsWanted::None};
                engine->step({&work, 1}, logits);
            }
            if (wanted) {
                for (int32_t i = 0; i < end - at; ++i) {
                    on_logits(at + i, logits.data() + static_cast<size_t>(i) * n_vocab);
                }
            }
            at = end;
        }
    } catch (...) {
        release();
        throw;
    }
    release();
}

void EngineCore::begin_tool_turn(SessionId id) {
    tool_turns_.erase(id);
    const auto& tools = scheduler_->session(id).options().tools;
    if (tools == nullptr) return;
    // Ids unique across turns and sessions, as OpenAI's are: the history refers back to them.
    static std::atomic<uint64_t> turns{0};
    char prefix[32];
    std::snprintf(prefix, sizeof prefix, "call_%08llx%04x_", static_cast<unsigned long long>(std::random_device{}()),
                  static_cast<unsigned>(turns++ & 0xffff));
    tool_turns_.emplace(id, ToolTurn{tools::ToolCallParser(tools->format, prefix, tools->tools), {}, false});
}

void EngineCore::cancel(SessionId id) {
    Lock lock(*this);
    check_open();
    scheduler_->cancel(id);
    work_ = true;  // the scheduler thread delivers the DONE event
}

void EngineCore::destroy(SessionId id) {
    if (std::this_thread::get_id() == thread_.get_id()) throw Error("a session cannot be destroyed inside an event callback");
    Lock lock(*this);
    if (closed_) return;  // close() already freed every session
    scheduler_->destroy(id);
    channels_.erase(id);
    tool_turns_.erase(id);
    work_ = true;  // a waiting session may fit in the blocks it gave back
}

}  // namespace cellm::sdk
