#include "schedule/scheduler.h"

#include "error.h"

#include <algorithm>
#include <limits>
#include <thread>

namespace cellm {

namespace {
using Clock = std::chrono::steady_clock;
}

Scheduler::Scheduler(Engine& engine, const Tokenizer& tokenizer, SchedulerOptions options)
    : engine_(engine), tokenizer_(tokenizer), options_(options) {
    if (options_.token_budget < 1) throw Error("the scheduler's token budget must be at least 1");
    if (options_.max_running < 1) throw Error("the scheduler must run at least one session at a time");
    if (options_.policy.max_batch < 0) throw Error("the policy's max_batch must be at least 0");
    if (!(options_.policy.max_tokens_per_second >= 0)) throw Error("the policy's token rate must be at least 0");
}

Scheduler::~Scheduler() {
    for (auto& [id, s] : sessions_) release(*s);
}

SessionId Scheduler::create(SessionOptions options) {
    if (options.max_tokens < 1) throw Error("session '" + options.name + "': max_tokens must be at least 1");
    const SessionId id = next_id_++;
    sessions_.emplace(id, std::make_unique<Session>(id, std::move(options), tokenizer_));
    return id;
}

void Scheduler::reconfigure(SessionId id, SessionOptions options) {
    Session& s = find(id);
    if (s.state_ != SessionState::Idle) throw Error("session '" + s.options().name + "' is busy and cannot change settings");
    if (options.max_tokens < 1) throw Error("session '" + options.name + "': max_tokens must be at least 1");
    s.options_ = std::move(options);
}

std::span<const int32_t> Scheduler::cached_tokens(SessionId id) const {
    const Session& s = session(id);
    if (s.sequence_ < 0) return {};
    return engine_.sequence_tokens(s.sequence_);
}

Session& Scheduler::find(SessionId id) {
    const auto it = sessions_.find(id);
    if (it == sessions_.end()) throw Error("session " + std::to_string(id) + " does not exist");
    return *it->second;
}

const Session& Scheduler::session(SessionId id) const { return const_cast<Scheduler*>(this)->find(id); }

void Scheduler::submit(SessionId id, std::vector<int32_t> prompt, std::shared_ptr<const PromptEmbeddings> embeddings) {
    Session& s = find(id);
    const std::string who = "session '" + s.options().name + "'";
    if (s.state_ != SessionState::Idle) throw Error(who + " is still busy with its previous prompt");
    const auto n = static_cast<int32_t>(prompt.size());
    if (n >= engine_.context_length()) {
        throw PromptTooLongError(who + ": the prompt has " + std::to_string(n) + " tokens; the context length is " +
                    std::to_string(engine_.context_length()));
    }
    const KvStats kv = engine_.kv_stats();
    const int32_t block_size = engine_.kv_cache().block_size();
    const int32_t blocks = (n + 1 + block_size - 1) / block_size;  // the prompt and the first generated token
    if (blocks > kv.blocks) {
        throw PromptTooLongError(who + ": the prompt needs " + std::to_string(blocks) + " KV blocks but the whole pool has " +
                    std::to_string(kv.blocks) + " (raise [context].kv_memory_mib or memory_budget_mib)");
    }
    if (embeddings != nullptr && !embeddings->positions.empty()) {
        if (!engine_.model().vision()) throw Error(who + ": the model takes no images");
        const std::vector<int32_t>& at = embeddings->positions;
        for (size_t i = 0; i < at.size(); ++i) {
            if (at[i] < 0 || at[i] >= n || (i > 0 && at[i] <= at[i - 1])) {
                throw Error(who + ": embedding position " + std::to_string(at[i]) + " is not a prompt position, in order");
            }
        }
        if (embeddings->values.size() != at.size() * static_cast<size_t>(engine_.model().info().n_embd)) {
            throw Error(who + ": " + std::to_string(embeddings->values.size()) + " embedding values for " +
                        std::to_string(at.size()) + " positions of width " + std::to_string(engine_.model().info().n_embd));
        }
    } else {
        embeddings = nullptr;
    }
    s.start_turn(std::move(prompt));
    s.embeddings_ = std::move(embeddings);
    if (s.sequence_ >= 0) {
        // The blocks of the previous turn stay: keep what the new prompt repeats (all but its last token), up to
        // the first position either side took from an embedding rather than its token.
        const std::span<const int32_t> held =
            engine_.sequence_tokens(s.sequence_).first(static_cast<size_t>(engine_.token_determined_length(s.sequence_)));
        const std::vector<int32_t>& now = s.context();
        const size_t limit = s.embeddings_ != nullptr ? static_cast<size_t>(s.embeddings_->positions.front()) : now.size();
        size_t keep = 0;
        while (keep < held.size() && keep + 1 < now.size() && keep < limit && held[keep] == now[keep]) ++keep;
        s.computed_ = engine_.truncate(s.sequence_, static_cast<int32_t>(keep));
        s.result_.reused_tokens = s.computed_;
    }
    s.state_ = SessionState::Waiting;
    s.arrival_ = next_arrival_++;
}

void Scheduler::release(Session& s) {
    if (s.sequence_ >= 0) engine_.release_sequence(s.sequence_);
    s.sequence_ = -1;
    s.computed_ = 0;
}

void Scheduler::end_turn(Session& s, const std::string& reason, const std::string& error) {
    release(s);
    s.finish(reason, error);
}

void Scheduler::end_never_fits(Session& s) {
    end_turn(s, "error", "the KV pool (" + std::to_string(engine_.kv_stats().blocks) +
                             " blocks) is too small for this session's context of " +
                             std::to_string(s.context().size()) + " tokens");
}

void Scheduler::cancel(SessionId id) {
    Session& s = find(id);
    if (s.state_ == SessionState::Idle) return;
    if (in_step_) {
        s.cancel_requested_ = true;  // the step still uses this session's sequence: end the turn after it
        return;
    }
    end_turn(s, "cancelled");
}

void Scheduler::fail(SessionId id, const std::string& why) {
    Session& s = find(id);
    if (in_step_) throw Error("a session's turn cannot be failed inside a step");
    if (s.state_ != SessionState::Idle) end_turn(s, "error", why);
}

SessionId Scheduler::fork(SessionId id, SessionOptions options) {
    Session& source = find(id);
    if (source.state_ != SessionState::Idle) throw Error("session '" + source.options().name + "' is busy and cannot be forked");
    const SessionId copy = create(std::move(options));
    if (source.sequence_ >= 0) sessions_.at(copy)->sequence_ = engine_.fork_sequence(source.sequence_);
    return copy;
}

void Scheduler::destroy(SessionId id) {
    Session& s = find(id);
    if (in_step_) throw Error("a session cannot be destroyed inside a step; cancel it instead");
    release(s);
    sessions_.erase(id);
}

void Scheduler::admit(Session& s) {
    if (s.sequence_ < 0) {
        s.sequence_ = engine_.create_sequence();
        // Cached blocks are matched by tokens, so only up to the first token an embedding replaces.
        std::span<const int32_t> prompt = s.context();
        if (s.embeddings_ != nullptr) prompt = prompt.first(static_cast<size_t>(s.embeddings_->positions.front()) + 1);
        s.computed_ = engine_.reuse_prefix(s.sequence_, prompt);
        if (s.result_.preemptions == 0 && s.result_.tokens.empty()) s.result_.reused_tokens = s.computed_;
    }
    s.state_ = SessionState::Running;
}

void Scheduler::preempt(Session& s) {
    release(s);
    // An idle session only loses the blocks kept for its next turn; a busy one computes its context again.
    if (s.state_ == SessionState::Idle) return;
    s.state_ = SessionState::Waiting;
    ++s.result_.preemptions;
    ++preemptions_;
}

Session* Scheduler::choose_victim(const std::vector<Planned>& keep, const Session& for_whom) {
    // Blocks kept for an idle session's next turn go first, then those of waiting sessions, then running
    // ones: lowest priority, then least recently served.
    const auto rank = [](const Session& s) { return s.state_ == SessionState::Idle ? 0 : s.state_ == SessionState::Waiting ? 1 : 2; };
    Session* victim = nullptr;
    for (auto& [id, p] : sessions_) {
        Session& s = *p;
        if (&s == &for_whom || s.sequence_ < 0) continue;
        if (s.state_ != SessionState::Idle && s.priority() > for_whom.priority()) continue;
        if (std::any_of(keep.begin(), keep.end(), [&](const Planned& k) { return k.session == &s; })) continue;
        if (victim == nullptr || rank(s) < rank(*victim) ||
            (rank(s) == rank(*victim) &&
             (s.priority() < victim->priority() ||
              (s.priority() == victim->priority() && s.last_served_ < victim->last_served_)))) {
            victim = &s;
        }
    }
    return victim;
}

void Scheduler::plan(std::vector<Planned>& out) {
    int32_t budget = options_.token_budget;
    const int32_t max_batch = options_.policy.max_batch > 0 ? options_.policy.max_batch : std::numeric_limits<int32_t>::max();
    int32_t planned_blocks = 0;
    const auto available = [&] { return engine_.kv_stats().free - planned_blocks; };
    const auto running_count = [&] {
        return std::count_if(sessions_.begin(), sessions_.end(),
                             [](const auto& e) { return e.second->state_ == SessionState::Running; });
    };
    const auto remaining = [](const Session& s) { return static_cast<int32_t>(s.context().size()) - s.computed_; };

    // Makes room for `n` more tokens of `s`, preempting others when it must. Returns the blocks it takes,
    // or -1 when there is no room.
    const auto make_room = [&](Session& s, int32_t n) {
        const int32_t need = engine_.blocks_needed(s.sequence_, n);
        while (need > available()) {
            Session* victim = choose_victim(out, s);
            if (victim == nullptr) return -1;
            preempt(*victim);
        }
        return need;
    };

    // Every session with work, in the order it is served: higher priority first; within a priority, the
    // next token of decoding sessions before prompt chunks (so a long prompt never stalls them); then the
    // least recently served, so that a short budget goes round the sessions in turn; then arrival.
    std::vector<Session*> order;
    for (auto& [id, s] : sessions_) {
        if (s->state_ != SessionState::Idle) order.push_back(s.get());
    }
    const auto decoding = [&](const Session* s) { return remaining(*s) == 1; };
    std::sort(order.begin(), order.end(), [&](const Session* a, const Session* b) {
        if (a->priority() != b->priority()) return a->priority() > b->priority();
        if (decoding(a) != decoding(b)) return decoding(a);
        if (a->last_served_ != b->last_served_) return a->last_served_ < b->last_served_;
        return a->arrival_ < b->arrival_;
    });

    Session* blocked = nullptr;  // the first waiting session that found no room: later ones wait behind it
    for (Session* s : order) {
        if (static_cast<int32_t>(out.size()) >= max_batch || budget == 0) break;
        if (s->state_ == SessionState::Idle) continue;  // its turn ended while making room for an earlier one
        if (s->state_ == SessionState::Waiting) {
            if (blocked != nullptr || running_count() >= options_.max_running) continue;
            // A model with recurrent layers has a state slot per sequence it may hold; sessions idle between
            // turns keep theirs until someone needs it.
            while (!engine_.can_create_sequence()) {
                Session* victim = choose_victim(out, *s);
                if (victim == nullptr) break;
                preempt(*victim);
            }
            if (!engine_.can_create_sequence()) {
                blocked = s;
                continue;
            }
            admit(*s);
            const int32_t need = make_room(*s, std::min(remaining(*s), budget));
            if (need < 0) {
                // Not now. The blocks the prefix cache lent it go back (the steps planned so far count on the
                // free ones), and it keeps its place in the queue.
                release(*s);
                s->state_ = SessionState::Waiting;
                blocked = s;
                continue;
            }
        }
        if (s->state_ != SessionState::Running) continue;  // preempted to make room for an earlier one
        const int32_t n = std::min(remaining(*s), budget);
        const int32_t need = make_room(*s, n);
        if (need < 0) {
            const bool alone = std::none_of(sessions_.begin(), sessions_.end(), [&](const auto& e) {
                return e.second.get() != s && e.second->sequence_ >= 0;
            });
            if (alone) {
                end_never_fits(*s);
            } else {
                preempt(*s);  // it waits until the others have given blocks back
            }
            continue;
        }
        planned_blocks += need;
        budget -= n;
        out.push_back({s, n, s->computed_ + n == static_cast<int32_t>(s->context().size())});
    }

    // Nothing runs that could give blocks back, and the next session still does not fit: it never will.
    if (out.empty() && blocked != nullptr && running_count() == 0) end_never_fits(*blocked);
}

bool Scheduler::step() {
    if (in_step_) throw Error("Scheduler::step called from inside a step");
    std::vector<Planned> planned;
    plan(planned);
    if (planned.empty()) {
        return std::any_of(sessions_.begin(), sessions_.end(),
                           [](const auto& e) { return e.second->state_ != SessionState::Idle; });
    }

    work_.clear();
    embedded_.resize(planned.size());
    const auto n_embd = static_cast<size_t>(engine_.model().info().n_embd);
    for (size_t i = 0; i < planned.size(); ++i) {
        const Planned& p = planned[i];
        const int32_t from = p.session->computed_;
        const auto first = p.session->context().begin() + from;
        std::vector<Engine::EmbeddedRow>& rows = embedded_[i];
        rows.clear();
        if (const PromptEmbeddings* e = p.session->embeddings_.get()) {
            const auto begin = std::lower_bound(e->positions.begin(), e->positions.end(), from);
            for (auto it = begin; it != e->positions.end() && *it < from + p.n_tokens; ++it) {
                const auto row = static_cast<size_t>(it - e->positions.begin());
                rows.push_back({*it - from, e->values.data() + row * n_embd});
            }
        }
        work_.push_back({p.session->sequence_, std::span<const int32_t>(&*first, static_cast<size_t>(p.n_tokens)),
                         p.wants_logits ? LogitsWanted::Last : LogitsWanted::None, rows});
    }
    engine_.step(work_, logits_);
    ++step_index_;

    in_step_ = true;
    int64_t generated = 0;
    size_t row = 0;
    const auto n_vocab = static_cast<size_t>(engine_.n_vocab());
    try {
        for (const Planned& p : planned) {
            Session& s = *p.session;
            s.computed_ += p.n_tokens;
            s.last_served_ = step_index_;
            batched_tokens_ += p.n_tokens;
            if (!p.wants_logits) continue;
            const std::span<const float> logits(logits_.data() + row * n_vocab, n_vocab);
            ++row;
            if (s.cancel_requested_) continue;
            ++generated;
            s.accept_logits(logits, engine_.context_length());  // a turn that ends keeps its blocks for the next
        }
    } catch (...) {
        in_step_ = false;
        throw;
    }
    in_step_ = false;
    for (auto& [id, s] : sessions_) {
        if (s->cancel_requested_ && s->state_ != SessionState::Idle) end_turn(*s, "cancelled");
        s->cancel_requested_ = false;
    }
    throttle(generated);
    return true;
}

void Scheduler::throttle(int64_t generated) {
    const double cap = options_.policy.max_tokens_per_second;
    if (cap <= 0 || generated == 0) return;
    const auto now = Clock::now();
    if (rate_tokens_ == 0) rate_start_ = now;
    rate_tokens_ += generated;
    // Sleep until the tokens produced so far fit under the cap.
    const auto due = rate_start_ + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(static_cast<double>(rate_tokens_) / cap));
    if (due > now) std::this_thread::sleep_until(due);
}

void Scheduler::run() {
    while (step()) {
    }
}

SchedulerStats Scheduler::stats() const {
    SchedulerStats st;
    st.steps = step_index_;
    st.batched_tokens = batched_tokens_;
    st.preemptions = preemptions_;
    st.sessions = static_cast<int32_t>(sessions_.size());
    for (const auto& [id, s] : sessions_) {
        if (s->state_ == SessionState::Running) ++st.running;
        if (s->state_ == SessionState::Waiting) ++st.waiting;
    }
    st.kv = engine_.kv_stats();
    return st;
}

}  // namespace cellm
