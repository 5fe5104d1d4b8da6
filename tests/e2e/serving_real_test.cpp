// The scheduler on the real SmolLM2-135M: greedy tokens of N sessions decoded together (mixed prompt
// lengths, staggered starts and ends, a shared system prompt for the prefix cache) are identical to each
// session decoded alone, for N = 1, 2, 4, 8; and a pool too small for all of them preempts and resumes
// without changing a token.
#include "serving_support.h"
#include "test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

namespace cellm::testing {
namespace {

std::vector<Request> parity_requests(int n) {
    std::ifstream in(source_dir() / "tests/data/parity/smollm2-135m-q4_1.json");
    const nlohmann::json reference = nlohmann::json::parse(in);
    const auto& prompts = reference["prompts"];
    std::vector<Request> out;
    for (int i = 0; i < n; ++i) {
        Request r;
        r.prompt = prompts[static_cast<size_t>(i) % prompts.size()]["prompt_ids"].get<std::vector<int32_t>>();
        // Past the reference prompts, shorter variants: same beginnings, different lengths.
        if (static_cast<size_t>(i) >= prompts.size()) r.prompt.resize(r.prompt.size() - 2);
        r.max_tokens = 8 + (i * 7) % 17;
        r.submit_at_step = (i * 5) % 9;
        out.push_back(std::move(r));
    }
    return out;
}

EngineOptions options(int32_t max_sequences, uint64_t kv_memory = 0, bool prefix_cache = true) {
    EngineOptions o;
    o.context_length = 512;
    o.max_sequences = max_sequences;
    o.kv_memory = kv_memory;
    o.prefix_cache = prefix_cache;
    return o;
}

class ServingRealModel : public ::testing::TestWithParam<int> {};

TEST_P(ServingRealModel, SessionsTogetherMatchEachAlone) {
    const int n = GetParam();
    Stack alone = make_stack(smollm2_path(), "openblas", options(1, 0, false));
    Stack together = make_stack(smollm2_path(), "openblas", options(n));
    const std::vector<Request> requests = parity_requests(n);
    SchedulerOptions scheduler;
    scheduler.token_budget = 64;
    const ServeOutcome served = serve(*together.engine, together.model->tokenizer(), requests, scheduler);
    for (size_t i = 0; i < requests.size(); ++i) {
        EXPECT_EQ(served.tokens[i], serve_alone(*alone.engine, alone.model->tokenizer(), requests[i])) << "session " << i;
    }
    if (n > 1) {
        EXPECT_GT(served.max_batch, 1);
    }
}

INSTANTIATE_TEST_SUITE_P(Sessions, ServingRealModel, ::testing::Values(1, 2, 4, 8));

TEST(ServingRealModel, PreemptionAndPrefixReuseKeepEveryToken) {
    Stack alone = make_stack(smollm2_path(), "openblas", options(1, 0, false));
    const uint64_t block_bytes = alone.engine->kv_cache().bytes_per_token() * 16;
    Stack tight = make_stack(smollm2_path(), "openblas", options(1, block_bytes * 10));  // 160 tokens for 8 sessions
    std::vector<Request> requests = parity_requests(8);
    for (Request& r : requests) r.max_tokens = 24;
    const ServeOutcome served = serve(*tight.engine, tight.model->tokenizer(), requests, SchedulerOptions{});
    EXPECT_GT(served.preemptions, 0);
    EXPECT_GT(tight.engine->kv_stats().prefix_hit_tokens, 0);
    for (size_t i = 0; i < requests.size(); ++i) {
        EXPECT_EQ(served.tokens[i], serve_alone(*alone.engine, alone.model->tokenizer(), requests[i])) << "session " << i;
    }
}

}  // namespace
}  // namespace cellm::testing
