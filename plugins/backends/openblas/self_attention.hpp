// SELF_ATTENTION (a vision encoder's bidirectional attention within each image) as two SGEMMs per group and head:
// the scores of every query against every key, then the weighted values. The reference's loop of dot products is
// some fifty times slower at SigLIP's 1024 patches a tile. Like the F32 products, it follows the reference within
// float rounding, not bit for bit: the weights are the reference's (attention_weights), the sums are OpenBLAS's.
#pragma once

#include "plan.hpp"
#include "thread_pool.hpp"

#include <vector>

namespace cellm::openblas {

struct SelfAttentionScratch {
    std::vector<std::vector<float>> scores;  // per thread: one group's [group, group] scores of one head
};

// Runs node `index` (SELF_ATTENTION) of `plan`, its (group, head) pairs spread across the pool.
void self_attention(cpu::Plan& plan, int32_t index, ThreadPool& pool, SelfAttentionScratch& scratch);

}  // namespace cellm::openblas
