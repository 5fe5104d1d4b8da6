#version 450
#extension GL_GOOGLE_include_directive : require
// Causal attention through the page table (graph.h, CELLM_OP_ATTENTION), one workgroup per query head and token.
// As the reference defines it, q is rounded to the K pool's type and each softmax weight to the V pool's type
// before they meet the pools, so the weights are normalised before that rounding: a first pass finds the maximum
// and the sum of exponentials, a second recomputes the scores and accumulates the values, 64 keys at a time.
// The block table, sequence rows and positions were checked on the host.
#include "common.glsl"

const uint THREADS = 128u, MAX_HEAD_DIM = 256u, CACHE = 2048u, GROUPS = 2u, LANES = THREADS / GROUPS;
layout(local_size_x = 128) in;
layout(push_constant, scalar) uniform Push {
    Floats q;        // [head_dim, n_head, n_tokens]
    Words k_pool;    // [kv_dim, n_slots]
    Words v_pool;
    Ints table;      // [max_blocks, n_seqs]
    Ints seqs;       // [n_tokens]
    Ints positions;  // [n_tokens]
    Floats k_scales; // [k_groups, n_slots] (I8 pools)
    Floats v_scales;
    Floats out_;     // [head_dim * n_head, n_tokens]
    uint n_head, group, head_dim, block_size, window, max_blocks, kv_dim;
    uint k_type, v_type, k_groups, v_groups;
    float scale, softcap;
} pc;

// Scores and slots of up to CACHE keys stay in shared memory between the passes; longer windows of keys are
// recomputed (the second pass needs every weight normalised before it is rounded).
shared float qs[MAX_HEAD_DIM];
shared float scores[CACHE];
shared uint slots[CACHE];
shared float reduce_max[THREADS], reduce_sum[THREADS];
shared float partial[GROUPS - 1u][MAX_HEAD_DIM];

float pool_value(Words pool, uint type, Floats scales, uint groups, uint slot, uint i) {
    const uint at = slot * pc.kv_dim + i;
    if (type == T_F32) return uintBitsToFloat(pool.w[at]);
    if (type == T_F16) return half_at(pool, 2u * at);
    const int code = int(byte_at(pool, at) << 24) >> 24;
    return scales.f[slot * groups + i / (pc.kv_dim / groups)] * float(code);
}

uint slot_of(uint row, uint j) { return uint(pc.table.i[row * pc.max_blocks + j / pc.block_size]) * pc.block_size + j % pc.block_size; }

// q . k for one key; each pool type in a loop of its own, so the loads of a key are independent and pipeline.
float score(uint slot, uint kv_offset) {
    const uint base = slot * pc.kv_dim + kv_offset;
    float s = 0.0;
    if (pc.k_type == T_F16) {
        for (uint d = 0u; d < pc.head_dim; d += 2u) {  // kv_dim and head_dim are even: a word holds two halves
            const vec2 k = unpackHalf2x16(pc.k_pool.w[(base + d) >> 1]);
            s += qs[d] * k.x;
            s += qs[d + 1u] * k.y;
        }
    } else if (pc.k_type == T_F32) {
        for (uint d = 0u; d < pc.head_dim; ++d) s += qs[d] * uintBitsToFloat(pc.k_pool.w[base + d]);
    } else {
        for (uint d = 0u; d < pc.head_dim; ++d) s += qs[d] * pool_value(pc.k_pool, T_I8, pc.k_scales, pc.k_groups, slot, kv_offset + d);
    }
    s = pc.scale * s;
    if (pc.softcap > 0.0) s = pc.softcap * tanh(s / pc.softcap);
    return s;
}

// Fills the cache with the keys [c0, c0 + CACHE) that exist (up to p), one key per invocation.
void fill(uint row, uint c0, uint p, uint kv_offset) {
    for (uint jj = gl_LocalInvocationID.x; jj < CACHE && c0 + jj <= p; jj += THREADS) {
        const uint slot = slot_of(row, c0 + jj);
        slots[jj] = slot;
        scores[jj] = score(slot, kv_offset);
    }
}

void main() {
    const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
    const uint row = uint(pc.seqs.i[t]), p = uint(pc.positions.i[t]);
    const uint first = pc.window > 0u && p + 1u > pc.window ? p + 1u - pc.window : 0u;
    const uint kv_offset = (h / pc.group) * pc.head_dim;
    const uint q_at = (t * pc.n_head + h) * pc.head_dim;
    for (uint d = tid; d < pc.head_dim; d += THREADS)
        qs[d] = pc.k_type == T_F16 ? round_f16(pc.q.f[q_at + d]) : pc.q.f[q_at + d];
    barrier();

    // Pass 1: the maximum score and the sum of exponentials, each invocation over its keys, then merged.
    float m = -1.0 / 0.0, l = 0.0;
    for (uint c0 = first; c0 <= p; c0 += CACHE) {
        fill(row, c0, p, kv_offset);
        barrier();
        for (uint jj = tid; jj < CACHE && c0 + jj <= p; jj += THREADS) {
            const float s = scores[jj];
            const float m_new = max(m, s);
            l = l * exp(m - m_new) + exp(s - m_new);
            m = m_new;
        }
        barrier();
    }
    reduce_max[tid] = m;
    reduce_sum[tid] = l;
    barrier();
    float best = -1.0 / 0.0;
    for (uint i = 0u; i < THREADS; ++i) best = max(best, reduce_max[i]);
    float total = 0.0;
    for (uint i = 0u; i < THREADS; ++i)
        if (reduce_sum[i] > 0.0) total += reduce_sum[i] * exp(reduce_max[i] - best);

    // Pass 2: normalised weights, rounded for the V pool, times the values. Invocations split the keys into
    // GROUPS interleaved sets and the dims into LANES; the sets are added at the end.
    const uint g = tid / LANES, lane = tid % LANES;
    float acc[MAX_HEAD_DIM / LANES];
    for (uint r = 0u; r < MAX_HEAD_DIM / LANES; ++r) acc[r] = 0.0;
    for (uint c0 = first; c0 <= p; c0 += CACHE) {
        if (p + 1u - first > CACHE) {  // the cache holds the last window of pass 1, not this one
            barrier();
            fill(row, c0, p, kv_offset);
        }
        barrier();
        for (uint jj = tid; jj < CACHE && c0 + jj <= p; jj += THREADS) {
            float w = exp(scores[jj] - best) / total;
            scores[jj] = pc.v_type == T_F16 ? round_f16(w) : w;
        }
        barrier();
        const uint n = min(CACHE, p + 1u - c0);
#define ACCUMULATE(VALUE)                                                                  \
        for (uint jj = g; jj < n; jj += GROUPS) {                                          \
            const float w = scores[jj];                                                    \
            const uint slot = slots[jj];                                                   \
            for (uint r = 0u; r * LANES + lane < pc.head_dim; ++r) {                       \
                const uint at = slot * pc.kv_dim + kv_offset + r * LANES + lane;           \
                acc[r] += w * (VALUE);                                                     \
            }                                                                              \
        }
        if (pc.v_type == T_F16) {
            ACCUMULATE(half_at(pc.v_pool, 2u * at))
        } else if (pc.v_type == T_F32) {
            ACCUMULATE(uintBitsToFloat(pc.v_pool.w[at]))
        } else {
            ACCUMULATE(pool_value(pc.v_pool, T_I8, pc.v_scales, pc.v_groups, slot, at - slot * pc.kv_dim))
        }
    }
    if (g > 0u)
        for (uint r = 0u; r * LANES + lane < pc.head_dim; ++r) partial[g - 1u][r * LANES + lane] = acc[r];
    barrier();
    if (g == 0u)
        for (uint r = 0u; r * LANES + lane < pc.head_dim; ++r) {
            float v = acc[r];
            for (uint k = 1u; k < GROUPS; ++k) v += partial[k - 1u][r * LANES + lane];
            pc.out_.f[q_at + r * LANES + lane] = v;
        }
}
