#version 450
#extension GL_GOOGLE_include_directive : require
// Causal attention through the page table (graph.h, CELLM_OP_ATTENTION), one workgroup per query head and token,
// in the reference's order (reference_kernels.cpp), so that with EXACT the output is the reference's bit for bit:
// q rounded to the K pool's type meets each key in an 8-lane dot product (cpu::dot_in_lanes); the scaled scores'
// maximum is taken; their exponentials are summed in key order; each weight exp / sum is rounded to the V pool's
// type and the values accumulate in key order, one dimension per invocation. The block table, sequence rows and
// positions were checked on the host.
#include "common.glsl"

const uint THREADS = 128u, MAX_HEAD_DIM = 256u, CACHE = 2048u;
layout(local_size_x = 128) in;
layout(push_constant, scalar) uniform Push {
    Floats q;        // [head_dim, n_head, n_tokens]
    Words k_pool;    // [kv_dim, n_slots]
    Words v_pool;
    Ints table;      // [max_blocks, n_seqs]
    Ints seqs;       // [n_tokens]
    Ints positions;  // [n_tokens]
    Words k_scales;  // [k_groups, n_slots]: F32 for I8 pools, F16 for coded ones
    Words v_scales;
    Floats out_;     // [head_dim * n_head, n_tokens]
    uint n_head, group, head_dim, block_size, window, max_blocks, kv_dim;
    uint k_type, v_type, k_groups, v_groups;
    float scale, softcap;
} pc;

// Scores (then exponentials, then weights) and slots of up to CACHE keys stay in shared memory between the
// passes; longer windows of keys are recomputed chunk by chunk, with the same results.
shared float qs[MAX_HEAD_DIM];
shared float scores[CACHE];
shared uint slots[CACHE];
shared float reduce_max[THREADS];
shared float total_of_exps;

float pool_value(Words pool, uint type, Words scales, uint groups, uint slot, uint i) {
    const uint at = slot * pc.kv_dim + i;
    if (type == T_F32) return uintBitsToFloat(pool.w[at]);
    if (type == T_F16) return half_at(pool, 2u * at);
    const uint group = slot * groups + i / (pc.kv_dim / groups);
    if (type == T_R4 || type == T_R3) {
        precise float v = half_at(scales, 2u * group) * coded_level(type, code_at(pool, type, at));
        return v;
    }
    const int code = int(byte_at(pool, at) << 24) >> 24;
    precise float v = uintBitsToFloat(scales.w[group]) * float(code);
    return v;
}

uint slot_of(uint row, uint j) { return uint(pc.table.i[row * pc.max_blocks + j / pc.block_size]) * pc.block_size + j % pc.block_size; }

// The scaled (and soft-capped) score of one key: q . k with element i fused into lane i % 8, the lanes added as
// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), and a tail past the last whole 8 added one by one.
float score(uint slot, uint kv_offset) {
    float l[8] = float[](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    const uint whole = pc.head_dim / 8u * 8u;
    // Eight keys' elements are loaded before any is used, so the loads are in flight together; each pool type
    // has a loop of its own so that no branch sits between them.
#define LANES_OF(VALUE)                                                          \
    for (uint d = 0u; d < whole; d += 8u) {                                       \
        float k[8];                                                               \
        for (uint i = 0u; i < 8u; ++i) k[i] = VALUE(kv_offset + d + i);           \
        for (uint i = 0u; i < 8u; ++i) l[i] = fma_ref(qs[d + i], k[i], l[i]);     \
    }
#define K_F16(i) half_at(pc.k_pool, 2u * (slot * pc.kv_dim + (i)))
#define K_F32(i) uintBitsToFloat(pc.k_pool.w[slot * pc.kv_dim + (i)])
#define K_ANY(i) pool_value(pc.k_pool, pc.k_type, pc.k_scales, pc.k_groups, slot, i)
    if (pc.k_type == T_F16) {
        LANES_OF(K_F16)
    } else if (pc.k_type == T_F32) {
        LANES_OF(K_F32)
    } else {
        LANES_OF(K_ANY)
    }
    precise float s = sum_of_lanes(l);
    for (uint d = whole; d < pc.head_dim; ++d) {
        precise float term = qs[d] * K_ANY(kv_offset + d);
        s = s + term;
    }
    precise float scaled = pc.scale * s;
    if (pc.softcap > 0.0) scaled = pc.softcap * tanh(div_ref(scaled, pc.softcap));
    return scaled;
}

// Fills the cache with the scores of keys [c0, c0 + CACHE) that exist (up to p), one key per invocation.
void fill(uint row, uint c0, uint p, uint kv_offset) {
    for (uint jj = gl_LocalInvocationID.x; jj < CACHE && c0 + jj <= p; jj += THREADS) {
        const uint slot = slot_of(row, c0 + jj);
        slots[jj] = slot;
        scores[jj] = score(slot, kv_offset);
    }
}

// Turns the cached scores of keys [c0, ...) into exponentials exp(score - best).
void exponentiate(uint c0, uint p, float best) {
    for (uint jj = gl_LocalInvocationID.x; jj < CACHE && c0 + jj <= p; jj += THREADS) {
        precise float shifted = scores[jj] - best;
        scores[jj] = exp_ref(shifted);
    }
}

void main() {
    const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
    const uint row = uint(pc.seqs.i[t]), p = uint(pc.positions.i[t]);
    const uint first = pc.window > 0u && p + 1u > pc.window ? p + 1u - pc.window : 0u;
    const bool chunked = p + 1u - first > CACHE;
    const uint kv_offset = (h / pc.group) * pc.head_dim;
    const uint q_at = (t * pc.n_head + h) * pc.head_dim;
    for (uint d = tid; d < pc.head_dim; d += THREADS)
        qs[d] = pc.k_type == T_F16 ? round_f16(pc.q.f[q_at + d]) : pc.q.f[q_at + d];
    barrier();

    // The largest score (order does not matter for a maximum).
    float m = -1.0 / 0.0;
    for (uint c0 = first; c0 <= p; c0 += CACHE) {
        fill(row, c0, p, kv_offset);
        barrier();
        for (uint jj = tid; jj < CACHE && c0 + jj <= p; jj += THREADS) m = max(m, scores[jj]);
        barrier();
    }
    reduce_max[tid] = m;
    barrier();
    float best = -1.0 / 0.0;
    for (uint i = 0u; i < THREADS; ++i) best = max(best, reduce_max[i]);

    // The sum of the exponentials, in key order.
    float total = 0.0;
    for (uint c0 = first; c0 <= p; c0 += CACHE) {
        if (chunked) {
            barrier();
            fill(row, c0, p, kv_offset);
        }
        barrier();
        exponentiate(c0, p, best);
        barrier();
        if (tid == 0u)
            for (uint jj = 0u; jj < CACHE && c0 + jj <= p; ++jj) total = total + scores[jj];
    }
    if (tid == 0u) total_of_exps = total;
    barrier();
    total = total_of_exps;

    // Weights rounded for the V pool, times the values, in key order; invocation tid owns dims tid + THREADS r.
    float acc[MAX_HEAD_DIM / THREADS];
    for (uint r = 0u; r < MAX_HEAD_DIM / THREADS; ++r) acc[r] = 0.0;
    for (uint c0 = first; c0 <= p; c0 += CACHE) {
        if (chunked) {
            barrier();
            fill(row, c0, p, kv_offset);
            barrier();
            exponentiate(c0, p, best);
        }
        barrier();
        for (uint jj = tid; jj < CACHE && c0 + jj <= p; jj += THREADS) {
            const float w = div_ref(scores[jj], total);
            scores[jj] = pc.v_type == T_F16 ? round_f16(w) : w;
        }
        barrier();
        const uint n = min(CACHE, p + 1u - c0);
        // Eight keys' values are loaded before they are added (in key order); a loop per pool type, as above.
#define ACCUMULATE(VALUE)                                                        \
        for (uint r = 0u; r * THREADS + tid < pc.head_dim; ++r) {                 \
            const uint dim = kv_offset + r * THREADS + tid;                       \
            float a = acc[r];                                                     \
            uint jj = 0u;                                                         \
            for (; jj + 8u <= n; jj += 8u) {                                      \
                float v[8];                                                       \
                for (uint i = 0u; i < 8u; ++i) v[i] = VALUE(slots[jj + i], dim);  \
                for (uint i = 0u; i < 8u; ++i) {                                  \
                    precise float term = scores[jj + i] * v[i];                   \
                    a = a + term;                                                 \
                }                                                                 \
            }                                                                     \
            for (; jj < n; ++jj) {                                                \
                precise float term = scores[jj] * VALUE(slots[jj], dim);          \
                a = a + term;                                                     \
            }                                                                     \
            acc[r] = a;                                                           \
        }
#define V_F16(slot, i) half_at(pc.v_pool, 2u * ((slot) * pc.kv_dim + (i)))
#define V_F32(slot, i) uintBitsToFloat(pc.v_pool.w[(slot) * pc.kv_dim + (i)])
#define V_ANY(slot, i) pool_value(pc.v_pool, pc.v_type, pc.v_scales, pc.v_groups, slot, i)
        if (pc.v_type == T_F16) {
            ACCUMULATE(V_F16)
        } else if (pc.v_type == T_F32) {
            ACCUMULATE(V_F32)
        } else {
            ACCUMULATE(V_ANY)
        }
    }
    for (uint r = 0u; r * THREADS + tid < pc.head_dim; ++r) pc.out_.f[q_at + r * THREADS + tid] = acc[r];
}
