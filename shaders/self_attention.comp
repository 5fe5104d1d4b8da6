#version 450
#extension GL_GOOGLE_include_directive : require
// SELF_ATTENTION (graph.h): every token attends to every token of its group (one image), no cache, no mask. One
// workgroup per query head and token, in the reference's order (reference_kernels.cpp, self_attention, which
// shares ATTENTION's dot product and softmax), so that with EXACT the output is the reference's bit for bit:
// q meets each key of the group in an 8-lane dot product (cpu::dot_in_lanes), one key per invocation; the
// scaled scores' maximum is taken; their exponentials exp(s - max) are summed in key order by one invocation;
// each weight is exp / sum and the values accumulate weight * value in key order, one dimension per invocation.
// attention.comp is the paged twin this follows.
#include "common.glsl"

const uint THREADS = 128u, MAX_HEAD_DIM = 256u, CACHE = 2048u;
layout(local_size_x = 128) in;
layout(push_constant, scalar) uniform Push {
    Floats q;     // [head_dim, n_head, n_tokens]
    Floats k;     // [head_dim, n_head_kv, n_tokens]
    Floats v;
    Floats out_;  // [head_dim * n_head, n_tokens]
    uint n_head, n_head_kv, head_dim, group, n_tokens;
    float scale;
} pc;

// Scores (then exponentials, then weights) of up to CACHE keys stay in shared memory between the passes; larger
// groups are recomputed chunk by chunk, with the same results.
shared float qs[MAX_HEAD_DIM];
shared float scores[CACHE];
shared float reduce_max[THREADS];
shared float total_of_exps;

// Where key (or value) j of the group starting at token `first` begins, for KV head kvh.
uint kv_at(uint first, uint j, uint kvh) { return ((first + j) * pc.n_head_kv + kvh) * pc.head_dim; }

// The scaled score of one key: q . k with element i fused into lane i % 8, the lanes added as
// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), and a tail past the last whole 8 added one by one.
float score(uint at) {
    float l[8] = float[](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    const uint whole = pc.head_dim / 8u * 8u;
    for (uint d = 0u; d < whole; d += 8u) {
        float kd[8];
        for (uint i = 0u; i < 8u; ++i) kd[i] = pc.k.f[at + d + i];
        for (uint i = 0u; i < 8u; ++i) l[i] = fma_ref(qs[d + i], kd[i], l[i]);
    }
    precise float s = sum_of_lanes(l);
    for (uint d = whole; d < pc.head_dim; ++d) {
        precise float term = qs[d] * pc.k.f[at + d];
        s = s + term;
    }
    precise float scaled = pc.scale * s;
    return scaled;
}

// Fills the cache with the scores of keys [c0, c0 + CACHE) of the group, one key per invocation.
void fill(uint first, uint c0, uint kvh) {
    for (uint jj = gl_LocalInvocationID.x; jj < CACHE && c0 + jj < pc.group; jj += THREADS) scores[jj] = score(kv_at(first, c0 + jj, kvh));
}

// Turns the cached scores of keys [c0, ...) into exponentials exp(score - best).
void exponentiate(uint c0, float best) {
    for (uint jj = gl_LocalInvocationID.x; jj < CACHE && c0 + jj < pc.group; jj += THREADS) {
        precise float shifted = scores[jj] - best;
        scores[jj] = exp_ref(shifted);
    }
}

void main() {
    const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y + gl_WorkGroupID.z * gl_NumWorkGroups.y, tid = gl_LocalInvocationID.x;
    if (t >= pc.n_tokens) return;  // past the last token of a grid wrapped into z (the whole workgroup returns)
    const uint first = t / pc.group * pc.group, kvh = h / (pc.n_head / pc.n_head_kv);
    const bool chunked = pc.group > CACHE;
    const uint q_at = (t * pc.n_head + h) * pc.head_dim;
    for (uint d = tid; d < pc.head_dim; d += THREADS) qs[d] = pc.q.f[q_at + d];
    barrier();

    // The largest score (order does not matter for a maximum).
    float m = -1.0 / 0.0;
    for (uint c0 = 0u; c0 < pc.group; c0 += CACHE) {
        fill(first, c0, kvh);
        barrier();
        for (uint jj = tid; jj < CACHE && c0 + jj < pc.group; jj += THREADS) m = max(m, scores[jj]);
        barrier();
    }
    reduce_max[tid] = m;
    barrier();
    float best = -1.0 / 0.0;
    for (uint i = 0u; i < THREADS; ++i) best = max(best, reduce_max[i]);

    // The sum of the exponentials, in key order.
    float total = 0.0;
    for (uint c0 = 0u; c0 < pc.group; c0 += CACHE) {
        if (chunked) {
            barrier();
            fill(first, c0, kvh);
        }
        barrier();
        exponentiate(c0, best);
        barrier();
        if (tid == 0u)
            for (uint jj = 0u; jj < CACHE && c0 + jj < pc.group; ++jj) total = total + scores[jj];
    }
    if (tid == 0u) total_of_exps = total;
    barrier();
    total = total_of_exps;

    // Weights times the values, in key order; invocation tid owns dims tid + THREADS r.
    float acc[MAX_HEAD_DIM / THREADS];
    for (uint r = 0u; r < MAX_HEAD_DIM / THREADS; ++r) acc[r] = 0.0;
    for (uint c0 = 0u; c0 < pc.group; c0 += CACHE) {
        if (chunked) {
            barrier();
            fill(first, c0, kvh);
            barrier();
            exponentiate(c0, best);
        }
        barrier();
        for (uint jj = tid; jj < CACHE && c0 + jj < pc.group; jj += THREADS) scores[jj] = div_ref(scores[jj], total);
        barrier();
        const uint n = min(CACHE, pc.group - c0);
        for (uint r = 0u; r * THREADS + tid < pc.head_dim; ++r) {
            const uint dim = r * THREADS + tid;
            precise float a = acc[r];
            for (uint jj = 0u; jj < n; ++jj) {
                precise float term = scores[jj] * pc.v.f[kv_at(first, c0 + jj, kvh) + dim];
                a = a + term;
            }
            acc[r] = a;
        }
    }
    for (uint r = 0u; r * THREADS + tid < pc.head_dim; ++r) pc.out_.f[q_at + r * THREADS + tid] = acc[r];
}
