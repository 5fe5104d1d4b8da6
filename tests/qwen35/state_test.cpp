// The host's per-sequence recurrent state (kv/state_pool.h) and what the engine does with it on the tiny
// transformers-made Qwen3.5 folder: slots zeroed when taken, copied on fork, reused after release, no prefix
// reuse, and truncation that restarts the sequence.
#include "error.h"
#include "kv/state_pool.h"
#include "plugin/host_api.h"
#include "schedule/scheduler.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace cellm::testing {
namespace {

std::filesystem::path tiny_qwen35() { return source_dir() / "tests/data/hf/qwen3_5-tiny"; }

cellm_arch_layer_info layer(int32_t kv_dim, int32_t conv, int32_t recurrence) {
    return {sizeof(cellm_arch_layer_info), kv_dim, kv_dim > 0 ? 1 : 0, {conv, recurrence}, 0};
}

Backend scalar_backend() {
    const Plugin* plugin = registry().find(CELLM_PLUGIN_BACKEND, "scalar");
    if (plugin == nullptr) throw std::runtime_error("the scalar backend was not built");
    return Backend(*plugin, {});
}

// Every float of `slot` across the pool's states, in layer order.
std::vector<float> read_slot(Backend& b, const StatePool& pool, const std::vector<cellm_arch_layer_info>& layers, int32_t slot) {
    std::vector<float> out;
    for (int32_t il = 0; il < static_cast<int32_t>(layers.size()); ++il) {
        for (int32_t which = 0; which < 2; ++which) {
            if (layers[static_cast<size_t>(il)].state_size[which] == 0) continue;
            const cellm_tensor_desc t = pool.tensor(il, which);
            std::vector<float> part(static_cast<size_t>(t.ne[0]));
            check(b.iface().buffer_read(b.handle(), t.buffer, t.offset + static_cast<uint64_t>(slot * t.nb[1]),
                                        part.data(), part.size() * sizeof(float)),
                  "reading a state");
            out.insert(out.end(), part.begin(), part.end());
        }
    }
    return out;
}

void fill_slot(Backend& b, const StatePool& pool, const std::vector<cellm_arch_layer_info>& layers, int32_t slot, float first) {
    for (int32_t il = 0; il < static_cast<int32_t>(layers.size()); ++il) {
        for (int32_t which = 0; which < 2; ++which) {
            if (layers[static_cast<size_t>(il)].state_size[which] == 0) continue;
            const cellm_tensor_desc t = pool.tensor(il, which);
            std::vector<float> part(static_cast<size_t>(t.ne[0]));
            std::iota(part.begin(), part.end(), first);
            first += static_cast<float>(part.size());
            check(b.iface().buffer_write(b.handle(), t.buffer, t.offset + static_cast<uint64_t>(slot * t.nb[1]),
                                         part.data(), part.size() * sizeof(float)),
                  "writing a state");
        }
    }
}

TEST(StatePool, SlotsAreZeroedWhenTakenCopiedOnForkAndReused) {
    Backend backend = scalar_backend();
    const std::vector<cellm_arch_layer_info> layers = {layer(0, 6, 10), layer(32, 0, 0), layer(0, 0, 4)};
    StatePool pool(backend, layers, 3);
    ASSERT_FALSE(pool.empty());
    EXPECT_EQ(pool.bytes_per_slot(), (6 + 10 + 4) * sizeof(float));
    EXPECT_EQ(pool.tensor(0, 1).ne[0], 10);
    EXPECT_EQ(pool.tensor(0, 1).ne[1], 3);
    EXPECT_THROW(pool.tensor(1, 0), Error);  // a full-attention layer keeps none

    const int32_t a = pool.acquire(), b = pool.acquire();
    fill_slot(backend, pool, layers, a, 1.0f);
    pool.copy(a, b);
    EXPECT_EQ(read_slot(backend, pool, layers, b), read_slot(backend, pool, layers, a));
    EXPECT_EQ(read_slot(backend, pool, layers, b)[0], 1.0f);

    const int32_t c = pool.acquire();
    EXPECT_EQ(pool.acquire(), -1);
    EXPECT_EQ(pool.n_free(), 0);
    pool.release(a);
    EXPECT_EQ(pool.acquire(), a);  // the freed slot, and nothing of its last sequence left in it
    EXPECT_EQ(read_slot(backend, pool, layers, a), std::vector<float>(20, 0.0f));
    EXPECT_EQ(read_slot(backend, pool, layers, c), std::vector<float>(20, 0.0f));
    EXPECT_EQ(read_slot(backend, pool, layers, b)[19], 20.0f);  // the copy outlives its source's release
}

TEST(StatePool, ModelsWithoutRecurrentLayersGetNone) {
    Backend backend = scalar_backend();
    StatePool pool(backend, {layer(64, 0, 0), layer(64, 0, 0)}, 4);
    EXPECT_TRUE(pool.empty());
    EXPECT_EQ(pool.bytes_per_slot(), 0u);
}

std::vector<float> step(Engine& e, int32_t seq, const std::vector<int32_t>& tokens) {
    std::vector<float> logits;
    const Engine::Work w{seq, tokens, LogitsWanted::Last};
    e.step({&w, 1}, logits);
    return logits;
}

const std::vector<int32_t> kPrompt = {1, 17, 42, 99, 3, 120, 7, 64, 5, 11, 200, 33, 90, 4, 150, 77, 18, 230};

TEST(Qwen35Engine, AReleasedSlotStartsTheNextSequenceFromZero) {
    EngineOptions options;
    options.context_length = 64;
    options.max_sequences = 1;  // one slot: the second sequence must get the first one's, cleared
    Stack s = make_stack(tiny_qwen35(), "scalar", options);
    const int32_t first = s.engine->create_sequence();
    const std::vector<float> fresh = step(*s.engine, first, kPrompt);
    EXPECT_THROW(s.engine->create_sequence(), Error);  // every slot is taken
    step(*s.engine, first, {5});
    s.engine->release_sequence(first);

    const int32_t second = s.engine->create_sequence();
    EXPECT_EQ(step(*s.engine, second, kPrompt), fresh);
}

TEST(Qwen35Engine, ForkedSequencesContinueAlikeAndApart) {
    EngineOptions options;
    options.context_length = 64;
    options.max_sequences = 3;
    Stack s = make_stack(tiny_qwen35(), "scalar", options);
    const int32_t parent = s.engine->create_sequence();
    step(*s.engine, parent, kPrompt);
    const int32_t child = s.engine->fork_sequence(parent);
    const std::vector<float> from_parent = step(*s.engine, parent, {9});
    EXPECT_EQ(step(*s.engine, child, {9}), from_parent);
    // The child's state is its own: the parent moving on does not change what the child computes next.
    step(*s.engine, parent, {140, 2});
    const int32_t control = s.engine->fork_sequence(child);
    EXPECT_EQ(step(*s.engine, child, {88}), step(*s.engine, control, {88}));
}

TEST(Qwen35Engine, NoPrefixReuseAndTruncationRestarts) {
    EngineOptions options;
    options.context_length = 64;
    options.max_sequences = 2;
    options.prefix_cache = true;
    Stack s = make_stack(tiny_qwen35(), "scalar", options);
    const int32_t a = s.engine->create_sequence();
    const std::vector<float> whole = step(*s.engine, a, kPrompt);
    const int32_t b = s.engine->create_sequence();
    EXPECT_EQ(s.engine->reuse_prefix(b, kPrompt), 0);  // a state after a prefix is not kept
    EXPECT_EQ(s.engine->kv_stats().cached, 0);

    EXPECT_EQ(s.engine->truncate(a, static_cast<int32_t>(kPrompt.size())), static_cast<int32_t>(kPrompt.size()));
    EXPECT_EQ(s.engine->truncate(a, 6), 0);  // the state cannot go back to position 6
    EXPECT_EQ(s.engine->sequence_length(a), 0);
    EXPECT_EQ(step(*s.engine, a, kPrompt), whole);
}

TEST(Qwen35Scheduler, IdleSessionsGiveUpTheirStateSlots) {
    EngineOptions options;
    options.context_length = 64;
    options.max_sequences = 1;  // one state slot for two sessions
    Stack s = make_stack(tiny_qwen35(), "scalar", options);
    SchedulerOptions so;
    so.max_running = 1;
    Scheduler scheduler(*s.engine, s.model->tokenizer(), so);
    const auto greedy = [](const char* name) {
        SessionOptions o;
        o.name = name;
        o.max_tokens = 3;
        o.sampling.temperature = 0;
        o.ignore_end_of_generation = true;
        return o;
    };
    const SessionId a = scheduler.create(greedy("a")), b = scheduler.create(greedy("b"));
    scheduler.submit(a, kPrompt);
    scheduler.run();
    const std::vector<int32_t> alone = scheduler.session(a).result().tokens;
    ASSERT_EQ(alone.size(), 3u);
    // a is idle and holds the only slot; b's turn takes it, and a's next turn computes its context again.
    scheduler.submit(b, kPrompt);
    scheduler.run();
    EXPECT_EQ(scheduler.session(b).result().tokens, alone);
    std::vector<int32_t> next = kPrompt;
    next.insert(next.end(), alone.begin(), alone.end());
    next.push_back(7);
    scheduler.submit(a, next);
    scheduler.run();
    EXPECT_EQ(scheduler.session(a).result().reused_tokens, 0);
    EXPECT_EQ(scheduler.session(a).result().tokens.size(), 3u);
}

}  // namespace
}  // namespace cellm::testing
