// The scheduler on the synthetic model: sessions served together give, token for token, what each gives
// alone (with mixed prompt lengths, staggered starts and ends, prefix reuse and preemption); the block
// bookkeeping never leaks; limits, priorities and cancellation behave as documented.
#include "error.h"
#include "schedule/scheduler.h"
#include "serving_support.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

namespace cellm::testing {
namespace {

EngineOptions engine_options(int32_t max_sequences, uint64_t kv_memory = 0, bool prefix_cache = true) {
    EngineOptions o;
    o.context_length = 256;
    o.block_size = 8;
    o.max_sequences = max_sequences;
    o.kv_memory = kv_memory;
    o.prefix_cache = prefix_cache;
    return o;
}

SessionOptions greedy_session(const std::string& name, int32_t max_tokens) {
    SessionOptions o;
    o.name = name;
    o.max_tokens = max_tokens;
    o.sampling.temperature = 0;
    o.ignore_end_of_generation = true;
    return o;
}

SchedulerOptions with_budget(int32_t token_budget) {
    SchedulerOptions o;
    o.token_budget = token_budget;
    return o;
}

// Mixed lengths, with the first `shared` tokens common to all (a system prompt).
std::vector<Request> mixed_requests(int n, size_t shared = 0) {
    std::vector<Request> out;
    for (int i = 0; i < n; ++i) {
        Request r;
        r.prompt.assign(shared, 7);
        for (size_t j = 0; j < shared; ++j) {
            r.prompt[j] = static_cast<int32_t>((j * 13 + 3) % 250);
        }
        const size_t own = 3 + static_cast<size_t>(i * 11 % 37);
        for (size_t j = 0; j < own; ++j) r.prompt.push_back(static_cast<int32_t>((j * 29 + static_cast<size_t>(i) * 71 + 11) % 250));
        r.max_tokens = 4 + (i * 5) % 13;
        r.submit_at_step = (i * 3) % 7;
        out.push_back(std::move(r));
    }
    return out;
}

class SchedulerMatchesAlone : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(SchedulerMatchesAlone, GreedyTokensOfSessionsServedTogether) {
    const auto [backend, n] = GetParam();
    const auto model = synthetic_model(CELLM_TYPE_Q8_0);
    Stack alone = make_stack(model, backend, engine_options(1, 0, false));
    Stack together = make_stack(model, backend, engine_options(n));
    const std::vector<Request> requests = mixed_requests(n);
    SchedulerOptions options;
    options.token_budget = 24;  // short: prompts go in chunks beside the decoding sessions
    const ServeOutcome served = serve(*together.engine, together.model->tokenizer(), requests, options);
    for (size_t i = 0; i < requests.size(); ++i) {
        SCOPED_TRACE("session " + std::to_string(i));
        EXPECT_EQ(served.tokens[i], serve_alone(*alone.engine, alone.model->tokenizer(), requests[i]));
        EXPECT_EQ(served.tokens[i].size(), static_cast<size_t>(requests[i].max_tokens));
    }
    if (n > 1) {
        EXPECT_GT(served.max_batch, 1) << "the sessions never shared a step";
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, SchedulerMatchesAlone,
                         ::testing::Combine(::testing::Values("scalar", "openblas"), ::testing::Values(1, 2, 4, 8)),
                         [](const auto& test) {
                             return std::get<0>(test.param) + "_" + std::to_string(std::get<1>(test.param));
                         });

TEST(Scheduler, PrefixCacheReuseGivesTheSameTokens) {
    const auto model = synthetic_model(CELLM_TYPE_Q4_1);
    Stack plain = make_stack(model, "scalar", engine_options(1, 0, false));
    Stack cached = make_stack(model, "scalar", engine_options(4));
    std::vector<Request> requests = mixed_requests(4, 40);
    for (size_t i = 0; i < requests.size(); ++i) requests[i].submit_at_step = static_cast<int32_t>(i) * 6;
    SchedulerOptions options;
    const ServeOutcome served = serve(*cached.engine, cached.model->tokenizer(), requests, options);
    for (size_t i = 0; i < requests.size(); ++i) {
        EXPECT_EQ(served.tokens[i], serve_alone(*plain.engine, plain.model->tokenizer(), requests[i])) << "session " << i;
    }
    // Later sessions found the 40 shared tokens' full blocks (5 of 8 tokens) in the cache.
    EXPECT_EQ(served.reused[0], 0);
    for (size_t i = 1; i < requests.size(); ++i) EXPECT_EQ(served.reused[i], 40) << "session " << i;
    EXPECT_EQ(cached.engine->kv_stats().prefix_hit_tokens, 120);
}

TEST(Scheduler, PreemptionThenResumeGivesTheSameTokens) {
    const auto model = synthetic_model(CELLM_TYPE_Q8_0);
    Stack plain = make_stack(model, "scalar", engine_options(1, 0, false));
    // Room for 12 blocks of 8 tokens: four sessions of up to ~60 tokens cannot all stay.
    const Stack probe = make_stack(model, "scalar", engine_options(1));
    const uint64_t block_bytes = probe.engine->kv_cache().bytes_per_token() * 8;
    for (bool prefix_cache : {false, true}) {
        SCOPED_TRACE(prefix_cache ? "with prefix cache" : "without prefix cache");
        Stack tight = make_stack(model, "scalar", engine_options(1, block_bytes * 12, prefix_cache));
        std::vector<Request> requests = mixed_requests(4);
        for (Request& r : requests) {
            r.max_tokens = 24;
            r.submit_at_step = 0;
        }
        requests[3].prompt.resize(30, 5);
        SchedulerOptions options;
        options.token_budget = 16;
        const ServeOutcome served = serve(*tight.engine, tight.model->tokenizer(), requests, options);
        EXPECT_GT(served.preemptions, 0) << "the pool was never short";
        for (size_t i = 0; i < requests.size(); ++i) {
            EXPECT_EQ(served.tokens[i], serve_alone(*plain.engine, plain.model->tokenizer(), requests[i])) << "session " << i;
        }
        EXPECT_EQ(tight.engine->kv_stats().free, tight.engine->kv_stats().blocks) << "the scheduler is gone: every block is back";
    }
}

TEST(Scheduler, APromptLargerThanThePoolIsRefusedWithAClearError) {
    const auto model = synthetic_model(CELLM_TYPE_Q8_0);
    const Stack probe = make_stack(model, "scalar", engine_options(1));
    Stack s = make_stack(model, "scalar", engine_options(1, probe.engine->kv_cache().bytes_per_token() * 8 * 2));
    Scheduler scheduler(*s.engine, s.model->tokenizer(), SchedulerOptions{});
    const SessionId id = scheduler.create(greedy_session("big", 8));
    try {
        scheduler.submit(id, std::vector<int32_t>(40, 3));
        FAIL() << "a prompt of 40 tokens cannot fit in 2 blocks of 8";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("KV blocks"), std::string::npos) << e.what();
    }
    // A session that outgrows the pool while decoding alone ends with an error instead of hanging.
    scheduler.submit(id, std::vector<int32_t>(10, 3));
    scheduler.run();
    EXPECT_EQ(scheduler.session(id).result().finish_reason, "error");
    // 16 slots hold the 10 prompt tokens and 6 generated ones; the 7th is sampled but has nowhere to go.
    EXPECT_EQ(scheduler.session(id).result().tokens.size(), 7u);
}

TEST(Scheduler, RejectsEmptyPromptsBusySessionsAndUnknownIds) {
    Stack s = make_stack(synthetic_model(CELLM_TYPE_Q8_0), "scalar", engine_options(2));
    Scheduler scheduler(*s.engine, s.model->tokenizer(), SchedulerOptions{});
    const SessionId id = scheduler.create(greedy_session("a", 8));
    EXPECT_THROW(scheduler.submit(id, {}), Error);
    EXPECT_THROW(scheduler.submit(id, {1, 100000}), Error);
    EXPECT_THROW(scheduler.submit(id, std::vector<int32_t>(256, 1)), Error);  // as long as the context
    scheduler.submit(id, {1, 2, 3});
    EXPECT_THROW(scheduler.submit(id, {1, 2, 3}), Error);
    EXPECT_THROW(scheduler.submit(99, {1}), Error);
    EXPECT_THROW(scheduler.cancel(99), Error);
    EXPECT_THROW(Scheduler(*s.engine, s.model->tokenizer(), with_budget(0)), Error);
    EXPECT_THROW(scheduler.create(greedy_session("b", 0)), Error);
}

TEST(Scheduler, CancelFromAStreamingCallbackEndsOnlyThatSession) {
    Stack s = make_stack(synthetic_model(CELLM_TYPE_Q8_0), "scalar", engine_options(2));
    Scheduler scheduler(*s.engine, s.model->tokenizer(), SchedulerOptions{});
    const SessionOptions greedy = greedy_session("keeps", 12);
    const SessionId keeps = scheduler.create(greedy);
    SessionId cancelled = -1;
    int pieces = 0;
    SessionOptions stopping = greedy;
    stopping.name = "cancelled";
    stopping.on_text = [&](std::string_view) {
        if (++pieces == 3) scheduler.cancel(cancelled);
    };
    cancelled = scheduler.create(stopping);
    scheduler.submit(keeps, {5, 6, 7, 8});
    scheduler.submit(cancelled, {9, 10, 11});
    scheduler.run();
    EXPECT_EQ(scheduler.session(cancelled).result().finish_reason, "cancelled");
    EXPECT_LT(scheduler.session(cancelled).result().tokens.size(), 12u);
    EXPECT_EQ(scheduler.session(keeps).result().finish_reason, "length");
    EXPECT_EQ(scheduler.session(keeps).result().tokens.size(), 12u);
    EXPECT_EQ(s.engine->kv_stats().used, static_cast<int32_t>((4 + 12 + 7) / 8));  // only `keeps` holds blocks
}

TEST(Scheduler, InteractiveSessionsGoFirstWhenTheBudgetIsShort) {
    Stack s = make_stack(synthetic_model(CELLM_TYPE_Q8_0), "scalar", engine_options(2));
    // One token per step: only one session advances at a time.
    Scheduler scheduler(*s.engine, s.model->tokenizer(), with_budget(1));
    SessionOptions o = greedy_session("background", 6);
    o.priority = priority::background;
    const SessionId background = scheduler.create(o);
    o.name = "interactive";
    o.priority = priority::interactive;
    const SessionId interactive = scheduler.create(o);
    scheduler.submit(background, {1, 2, 3});
    scheduler.submit(interactive, {4, 5, 6});
    while (scheduler.session(interactive).state() != SessionState::Idle) {
        ASSERT_TRUE(scheduler.step());
        EXPECT_TRUE(scheduler.session(background).result().tokens.empty()) << "background ran before interactive was done";
    }
    scheduler.run();
    EXPECT_EQ(scheduler.session(background).result().tokens.size(), 6u);
}

TEST(Scheduler, EqualSessionsTakeTurnsWhenTheBudgetIsShort) {
    Stack s = make_stack(synthetic_model(CELLM_TYPE_Q8_0), "scalar", engine_options(3));
    Scheduler scheduler(*s.engine, s.model->tokenizer(), with_budget(1));
    const SessionOptions o = greedy_session("equal", 8);
    std::vector<SessionId> ids;
    for (int i = 0; i < 3; ++i) {
        ids.push_back(scheduler.create(o));
        scheduler.submit(ids.back(), {static_cast<int32_t>(i + 1)});
    }
    // Round robin: after every 3 steps each session has advanced once.
    for (int round = 1; round <= 6; ++round) {
        for (int k = 0; k < 3; ++k) ASSERT_TRUE(scheduler.step());
        for (SessionId id : ids) EXPECT_EQ(scheduler.session(id).result().tokens.size(), static_cast<size_t>(round));
    }
}

TEST(Scheduler, PolicyCapsTheSessionsPerStep) {
    Stack s = make_stack(synthetic_model(CELLM_TYPE_Q8_0), "scalar", engine_options(4));
    SchedulerOptions options;
    options.policy.max_batch = 2;
    std::vector<Request> requests = mixed_requests(4);
    for (Request& r : requests) r.submit_at_step = 0;
    const ServeOutcome served = serve(*s.engine, s.model->tokenizer(), requests, options);
    EXPECT_EQ(served.max_batch, 2);
    SchedulerOptions bad;
    bad.policy.max_tokens_per_second = -1;
    EXPECT_THROW(Scheduler(*s.engine, s.model->tokenizer(), bad), Error);
}

TEST(Scheduler, ALaterTurnKeepsTheBlocksOfTheEarlierOne) {
    Stack s = make_stack(synthetic_model(CELLM_TYPE_Q8_0), "scalar", engine_options(1));
    Scheduler scheduler(*s.engine, s.model->tokenizer(), SchedulerOptions{});
    const SessionId id = scheduler.create(greedy_session("turns", 5));
    scheduler.submit(id, {3, 1, 4, 1, 5, 9, 2});
    scheduler.run();
    std::vector<int32_t> next(scheduler.cached_tokens(id).begin(), scheduler.cached_tokens(id).end());
    const size_t held = next.size();
    EXPECT_EQ(held, 7u + 4u);  // the prompt and every generated token but the last
    next.insert(next.end(), {2, 6, 5});
    scheduler.submit(id, next);
    scheduler.run();
    EXPECT_EQ(static_cast<size_t>(scheduler.session(id).result().reused_tokens), held);
}

// Thousands of random create / extend / fork / truncate / free operations on the engine's blocks: every
// block is always either free or held, reference counts match the page tables, and nothing leaks.
TEST(BlockBookkeeping, ForkedSequencesDivergeWithoutTouchingEachOther) {
    Stack s = make_stack(synthetic_model(CELLM_TYPE_Q8_0), "scalar", engine_options(4));
    Engine& engine = *s.engine;
    const std::vector<int32_t> common = {4, 8, 15, 16, 23, 42, 7, 9, 11, 13, 17, 19};  // a block and a half
    const std::vector<int32_t> left = {30, 31, 32}, right = {40, 41};
    std::vector<float> logits, a_logits, b_logits, expected;
    const int32_t a = engine.create_sequence();
    const Engine::Work first{a, common, LogitsWanted::None};
    engine.step({&first, 1}, logits);
    const int32_t b = engine.fork_sequence(a);
    EXPECT_EQ(engine.kv_stats().used, 2);  // shared, not copied
    const Engine::Work both[] = {{a, left, LogitsWanted::Last}, {b, right, LogitsWanted::Last}};
    engine.step(both, logits);
    EXPECT_EQ(engine.kv_stats().copied_blocks, 1);
    const size_t v = static_cast<size_t>(engine.n_vocab());
    a_logits.assign(logits.begin(), logits.begin() + static_cast<ptrdiff_t>(v));
    b_logits.assign(logits.begin() + static_cast<ptrdiff_t>(v), logits.end());
    for (const auto& [tail, got] : {std::pair{left, a_logits}, std::pair{right, b_logits}}) {
        std::vector<int32_t> whole = common;
        whole.insert(whole.end(), tail.begin(), tail.end());
        const int32_t fresh = engine.create_sequence();
        const Engine::Work w{fresh, whole, LogitsWanted::Last};
        engine.step({&w, 1}, expected);
        EXPECT_EQ(got, expected);
        engine.release_sequence(fresh);
    }
}

TEST(BlockBookkeeping, RandomOperationsNeverLeakBlocks) {
    const auto model = synthetic_model(CELLM_TYPE_Q8_0);
    const uint64_t block_bytes = make_stack(model, "scalar", engine_options(1)).engine->kv_cache().bytes_per_token() * 8;
    Stack s = make_stack(model, "scalar", engine_options(1, block_bytes * 24));
    Engine& engine = *s.engine;
    std::mt19937 rng(20261121);
    std::vector<int32_t> live;
    std::vector<float> logits;
    int copies = 0;
    for (int op = 0; op < 3000; ++op) {
        const auto what = rng() % 10;
        if (what < 2 || live.empty()) {
            const int32_t seq = engine.create_sequence();
            // Half the new sequences start from a common prefix, so the cache has something to find.
            std::vector<int32_t> prompt(8 + rng() % 20);
            for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = rng() % 2 == 0 ? static_cast<int32_t>(i % 50) : static_cast<int32_t>(rng() % 250);
            engine.reuse_prefix(seq, prompt);
            live.push_back(seq);
        } else if (what < 6) {
            const int32_t seq = live[rng() % live.size()];
            std::vector<int32_t> tokens(1 + rng() % 9);
            for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 50);
            if (engine.sequence_length(seq) + static_cast<int32_t>(tokens.size()) > engine.context_length()) continue;
            const Engine::Work w{seq, tokens, LogitsWanted::None};
            try {
                engine.step({&w, 1}, logits);
            } catch (const Error&) {
                // The pool ran out: the step must have left everything as it was (checked below).
            }
        } else if (what < 7) {
            live.push_back(engine.fork_sequence(live[rng() % live.size()]));
        } else if (what < 8) {
            const int32_t seq = live[rng() % live.size()];
            engine.truncate(seq, static_cast<int32_t>(rng() % static_cast<uint32_t>(engine.sequence_length(seq) + 1)));
        } else {
            const size_t i = rng() % live.size();
            engine.release_sequence(live[i]);
            live.erase(live.begin() + static_cast<ptrdiff_t>(i));
        }
        // Invariant: each block's reference count is the number of page tables listing it, the free ones
        // are exactly those nobody lists, and every sequence's table covers its tokens.
        std::map<int32_t, int32_t> holders;
        for (int32_t seq : live) {
            ASSERT_EQ(static_cast<int32_t>(engine.sequence_tokens(seq).size()), engine.sequence_length(seq));
            ASSERT_EQ(static_cast<int32_t>(engine.sequence_blocks(seq).size()), (engine.sequence_length(seq) + 7) / 8);
            for (int32_t b : engine.sequence_blocks(seq)) ++holders[b];
        }
        const BlockPool& pool = engine.kv_cache().pool();
        for (int32_t b = 0; b < pool.n_blocks(); ++b) {
            const auto it = holders.find(b);
            ASSERT_EQ(pool.references(b), it == holders.end() ? 0 : it->second) << "block " << b << " after op " << op;
        }
        const KvStats st = engine.kv_stats();
        ASSERT_EQ(st.free, st.blocks - static_cast<int32_t>(holders.size())) << "after op " << op;
        copies = static_cast<int>(st.copied_blocks);
    }
    EXPECT_GT(copies, 0) << "no fork was ever written into: copy-on-write went untested";
    for (int32_t seq : live) engine.release_sequence(seq);
    EXPECT_EQ(engine.kv_stats().free, engine.kv_stats().blocks);
}

}  // namespace
}  // namespace cellm::testing
