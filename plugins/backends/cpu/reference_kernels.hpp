// The numerical meaning of every graph op (graph.h), one plain loop nest per op.
#pragma once

#include "plan.hpp"

#include <algorithm>
#include <cmath>

namespace cellm::cpu {

// The float dot product of the reference kernels, in the order an 8-wide SIMD loop computes it: element i
// accumulates into lane i % 8 with a fused multiply-add, the lanes add as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)),
// and a tail past the last whole group of 8 follows one by one. Fixing the order lets every CPU kernel table
// reproduce the reference exactly, which matters: this model family turns last-bit differences into visible
// logit changes (docs/correctness.md). `b(i)` gives element i of the second operand as a float.
template <class Element>
float dot_in_lanes(const float* a, Element b, int64_t n) {
    float lanes[8] = {};
    const int64_t whole = n / 8 * 8;
    for (int64_t i = 0; i < whole; ++i) lanes[i % 8] = std::fma(a[i], b(i), lanes[i % 8]);
    float sum = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
    for (int64_t i = whole; i < n; ++i) sum += a[i] * b(i);
    return sum;
}

// An ATTENTION node's parameters and runtime inputs, checked: every token's sequence row, position and the
// block table entries its window reads are in range. Slots are rows of the KV pools.
struct AttentionShape {
    int64_t n_tokens = 0, n_head = 0, group = 1, head_dim = 0, block_size = 1, window = 0, max_blocks = 0;
    float scale = 1.0f, softcap = 0.0f;
    const int32_t* block_table = nullptr;  // [n_seqs][max_blocks]
    const int32_t* seq_of = nullptr;
    const int32_t* pos_of = nullptr;

    int64_t position(int64_t t) const { return pos_of[t]; }
    // First position token t attends to (its sliding window's start).
    int64_t first(int64_t t) const { return window > 0 ? std::max<int64_t>(0, pos_of[t] - window + 1) : 0; }
    // Pool row holding position j of token t's sequence.
    int64_t slot(int64_t t, int64_t j) const {
        return static_cast<int64_t>(block_table[seq_of[t] * max_blocks + j / block_size]) * block_size + j % block_size;
    }
    // slot(t, j) * stride + offset for positions j = first..last into out[0..], walking the block table a block
    // at a time: one division per call instead of one per position (8 sessions' attention spent 7% of its time
    // dividing by the block size).
    void slot_offsets(int64_t t, int64_t first, int64_t last, int64_t stride, int64_t offset, int64_t* out) const {
        const int32_t* table = block_table + seq_of[t] * max_blocks;
        for (int64_t j = first, b = first / block_size, in = first % block_size; j <= last; ++b, in = 0) {
            const int64_t base = static_cast<int64_t>(table[b]) * block_size;
            for (; in < block_size && j <= last; ++in, ++j) *out++ = (base + in) * stride + offset;
        }
    }
    // Offset of query head h's K/V head within a pool row.
    int64_t kv_offset(int64_t h) const { return (h / group) * head_dim; }
};

// Turns the q . k dot products of one token and head (positions first..last, n of them) into ATTENTION's weights,
// in place: scaled, soft-capped when softcap > 0, then softmax (exp(s - max) / sum). Every CPU backend calls it,
// so their weights are bit-equal to the reference's; rounding them for the V pool is the caller's part.
void attention_weights(const AttentionShape& a, float* scores, int64_t n);

// Values [offset, offset + n) of slot `slot` of an I8 pool whose scale pool is `scales` (graph.h), as floats:
// scale * code, each value with its group's scale.
void expand_i8(const Node& pool, const Node& scales, int64_t slot, int64_t offset, int64_t n, float* out);
// The same for a coded (R4 or R3) pool with its F16 scale pool.
void expand_slot(const Node& pool, const Node& scales, int64_t slot, int64_t offset, int64_t n, float* out);

// ROPE, in two halves a backend may cache between: the angles of one position (cos of pair i at cos_sin[i], sin
// at cos_sin[half + i], computed in double and rounded, `factors` dividing them when not null), then the
// rotation of token t's rows of x into the ROPE node with them.
void rope_angles(const Node& rope, int32_t position, const float* factors, float* cos_sin);
void rope_rotate(const Node& rope, const Node& x, int64_t t, const float* cos_sin);

// Checks node `index` (an ATTENTION node whose inputs are bound); throws plugin::Failure naming the bad entry.
AttentionShape check_attention(Plan& plan, int32_t index);

// Runs node `index` of a plan whose earlier nodes have run; throws plugin::Failure on bad runtime data
// (token id, slot or block table entry out of range).
void run_reference(Plan& plan, int32_t index);

// The independent units (rows; tokens for ROPE; patches for PATCHES, output columns for SET_ROWS, (token, head)
// pairs for SELF_ATTENTION) node `index` splits into, or 0 when its kernel must run whole (MATMUL and ATTENTION
// use the plan's scratch; KV_STORE checks every slot before it writes any).
int64_t reference_parts(const Plan& plan, int32_t index);

// Runs units [begin, end) of a node that reference_parts splits; parts of one node may run concurrently.
void run_reference_part(Plan& plan, int32_t index, int64_t begin, int64_t end);

}  // namespace cellm::cpu
