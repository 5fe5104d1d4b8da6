// Isolation between sessions under random interleavings: seeded sequences of submit, cancel, fork, destroy and
// steps on a KV pool small enough to force preemption. Every turn that ends on its own must equal its prompt
// served alone, a cancelled turn must be a prefix of it, no session's text may come from another, and every
// block must be back in the pool once the sessions are gone.
#include "schedule/scheduler.h"
#include "serving_support.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace cellm::testing {
namespace {

constexpr int32_t kMaxTokens = 12;

struct Tracked {
    SessionId id;
    std::vector<int32_t> prompt;  // of the current or last turn
    std::string streamed;         // text the session's callback received this turn
    bool busy = false;
};

class Isolation : public ::testing::TestWithParam<uint32_t> {};

TEST_P(Isolation, RandomInterleavingsKeepSessionsApart) {
    const auto model = synthetic_model(CELLM_TYPE_Q8_0);
    EngineOptions pool;
    pool.context_length = 128;
    pool.block_size = 8;
    pool.kv_memory = 0;
    pool.max_sequences = 1;  // room for one full context (16 blocks): four running sessions get preempted
    Stack stack = make_stack(model, "scalar", pool);
    EngineOptions one = pool;
    one.max_sequences = 1;
    one.prefix_cache = false;
    Stack alone = make_stack(model, "scalar", one);
    const Tokenizer& tokenizer = stack.model->tokenizer();

    SchedulerOptions options;
    options.token_budget = 16;
    options.max_running = 4;
    Scheduler scheduler(*stack.engine, tokenizer, options);

    std::mt19937 random(GetParam());
    const auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(random); };
    // Prompts share prefixes now and then, so the prefix cache and copy-on-write are in play.
    const auto new_prompt = [&](const std::vector<int32_t>& start) {
        std::vector<int32_t> p = start;
        const size_t extra = 2 + pick(30);
        for (size_t i = 0; i < extra; ++i) p.push_back(static_cast<int32_t>(1 + pick(250)));
        return p;
    };
    std::map<std::vector<int32_t>, std::vector<int32_t>> expected;  // prompt -> its tokens served alone
    const auto reference = [&](const std::vector<int32_t>& prompt) -> const std::vector<int32_t>& {
        auto it = expected.find(prompt);
        if (it == expected.end()) {
            it = expected.emplace(prompt, serve_alone(*alone.engine, tokenizer, {prompt, kMaxTokens, 0})).first;
        }
        return it->second;
    };

    std::vector<std::unique_ptr<Tracked>> sessions;
    const auto create = [&] {
        auto t = std::make_unique<Tracked>();
        SessionOptions o;
        o.name = std::to_string(sessions.size());
        o.max_tokens = kMaxTokens;
        o.sampling.temperature = 0;
        o.ignore_end_of_generation = true;
        Tracked* raw = t.get();
        o.on_text = [raw](std::string_view text) { raw->streamed += text; };
        t->id = scheduler.create(std::move(o));
        sessions.push_back(std::move(t));
    };
    const auto submit = [&](Tracked& t, std::vector<int32_t> prompt) {
        t.prompt = std::move(prompt);
        t.streamed.clear();
        t.busy = true;
        scheduler.submit(t.id, t.prompt);
    };
    // A turn that has ended: its tokens against the prompt served alone, its streamed text against its own.
    int checked_turns = 0, cancelled_turns = 0;
    const auto check_ended = [&](Tracked& t) {
        const SessionResult& r = scheduler.session(t.id).result();
        const std::vector<int32_t>& want = reference(t.prompt);
        ::testing::ScopedTrace trace(__FILE__, __LINE__, ::testing::Message() << "session " << t.id << ", finish " << r.finish_reason);
        if (r.finish_reason == "cancelled") {
            ASSERT_LE(r.tokens.size(), want.size());
            EXPECT_TRUE(std::equal(r.tokens.begin(), r.tokens.end(), want.begin())) << "a cancelled turn strayed";
            ++cancelled_turns;
        } else {
            EXPECT_EQ(r.tokens, want);
            ++checked_turns;
        }
        EXPECT_EQ(t.streamed, r.text) << "the callback got text that is not this session's";
        t.busy = false;
    };

    for (int i = 0; i < 3; ++i) create();
    for (int op = 0; op < 400; ++op) {
        Tracked& t = *sessions[pick(sessions.size())];
        switch (pick(10)) {
            case 0:
            case 1:  // a new turn: the conversation so far and more, or a fresh prompt
                if (!t.busy) {
                    std::vector<int32_t> start;
                    if (pick(2) == 0 && !t.prompt.empty()) {
                        start = t.prompt;
                        const auto& r = scheduler.session(t.id).result().tokens;
                        start.insert(start.end(), r.begin(), r.end());
                    }
                    if (start.size() + 40 + kMaxTokens < 128) submit(t, new_prompt(start));
                }
                break;
            case 2:
                if (t.busy) scheduler.cancel(t.id);
                break;
            case 3:  // a fork continues the source's conversation on shared blocks
                if (!t.busy && !t.prompt.empty() && sessions.size() < 8) {
                    auto f = std::make_unique<Tracked>();
                    SessionOptions o = scheduler.session(t.id).options();
                    Tracked* raw = f.get();
                    o.on_text = [raw](std::string_view text) { raw->streamed += text; };
                    f->id = scheduler.fork(t.id, std::move(o));
                    std::vector<int32_t> start = t.prompt;
                    const auto& r = scheduler.session(t.id).result().tokens;
                    start.insert(start.end(), r.begin(), r.end());
                    sessions.push_back(std::move(f));
                    if (start.size() + 40 + kMaxTokens < 128) submit(*sessions.back(), new_prompt(start));
                }
                break;
            case 4:
                if (sessions.size() > 2 && !t.busy) {
                    scheduler.destroy(t.id);
                    sessions.erase(std::find_if(sessions.begin(), sessions.end(),
                                                [&](const auto& s) { return s.get() == &t; }));
                } else if (sessions.size() < 8) {
                    create();
                }
                break;
            default:
                scheduler.step();
        }
        for (auto& s : sessions) {
            if (s->busy && scheduler.session(s->id).state() == SessionState::Idle) check_ended(*s);
        }
        if (::testing::Test::HasFatalFailure()) return;
    }
    scheduler.run();
    for (auto& s : sessions) {
        if (s->busy) check_ended(*s);
    }
    EXPECT_GT(checked_turns, 10) << "too few turns ran to the end to mean anything";
    EXPECT_GT(scheduler.stats().preemptions, 0) << "the pool never ran short";

    for (auto& s : sessions) scheduler.destroy(s->id);
    const KvStats kv = stack.engine->kv_stats();
    EXPECT_EQ(kv.used, 0) << "blocks leaked";
    EXPECT_EQ(kv.free, kv.blocks);
    std::printf("seed %u: %d turns checked, %d cancelled, %lld preemptions\n", GetParam(), checked_turns,
                cancelled_turns, static_cast<long long>(scheduler.stats().preemptions));
}

INSTANTIATE_TEST_SUITE_P(Seeds, Isolation, ::testing::Values(1u, 2u, 3u, 4u));

}  // namespace
}  // namespace cellm::testing
