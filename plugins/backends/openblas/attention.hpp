// ATTENTION over the paged KV cache, with (token, KV head) pairs spread across threads (F16 pools; (token, query
// head) pairs for the others). K and V rows are read where the block table says they are, in the pool's own
// type: no copy of a sequence's cache per step.
#pragma once

#include "plan.hpp"
#include "thread_pool.hpp"

#include <vector>

namespace cellm::openblas {

// Per-thread memory of the attention op, reused between steps.
struct AttentionScratch {
    std::vector<std::vector<float>> scores;  // attention weights of a task's queries, one row each
    std::vector<std::vector<float>> query;   // a task's queries rounded to the pool's type
    std::vector<std::vector<float>> values;  // one head's K or V values of an I8 pool, expanded
    std::vector<std::vector<int64_t>> rows;  // where each key position's K and V start in an F16 pool
    // A prefill chunk's K and V rows of I8 and coded pools, expanded once for the step: row r's positions
    // dense_first[r].. start at dense_at[r] (-1: expanded per token instead).
    std::vector<float> dense_k, dense_v;
    std::vector<int64_t> dense_at, dense_first;
};

// Runs node `index` (ATTENTION) of `plan`; throws plugin::Failure on out-of-range runtime inputs.
// `fast`: fast precision's softmax (activations_fast.hpp) instead of the reference's.
void attention(cpu::Plan& plan, int32_t index, ThreadPool& pool, AttentionScratch& scratch, bool fast = false);

}  // namespace cellm::openblas
