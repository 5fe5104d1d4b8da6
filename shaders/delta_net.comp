#version 450
#extension GL_GOOGLE_include_directive : require
// DELTA_NET (graph.h): the gated delta rule along each sequence row, the row's state updated in place. Column j of
// value head h's state S_h [d_k][d_v] meets only column j of everything (u_j, out_j), so one invocation per (row,
// value head, column) takes the row's tokens in order and follows the reference (reference_kernels.cpp,
// delta_net) exactly: S *= exp(g) element by element while u_j += S[i][j] k_i sums in i order; u_j = beta (v_j -
// u_j); then S[i][j] += k_i u_j while out_j += S[i][j] q_i sums in i order; every product and sum rounded apart.
// The column lives in the state itself (global memory), read and written once per pass. The host checked every
// row's slot and every token's row before the step was submitted, and no two rows share a slot.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(push_constant, scalar) uniform Push {
    Floats q;      // [d_k, n_k, n_tokens]
    Floats k;
    Floats v;      // [d_v, n_v, n_tokens]
    Floats g;      // [n_v, n_tokens]
    Floats beta;   // [n_v, n_tokens]
    Floats state;  // [n_v * d_k * d_v, n_slots]
    Ints seqs;     // [n_tokens]
    Ints slots;    // [n_seqs]
    Floats out_;   // [d_v, n_v, n_tokens]
    uint d_k, n_k, d_v, n_v, n_tokens, n_seqs, state_size;
    uint tiled;    // key head of value head h: h % n_k when 1 (GGUF), h / (n_v / n_k) when 0
} pc;

void main() {
    const uint e = group_index() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (e >= pc.n_seqs * pc.n_v * pc.d_v) return;
    const uint j = e % pc.d_v, h = e / pc.d_v % pc.n_v, r = e / (pc.d_v * pc.n_v);
    const uint kh = pc.tiled != 0u ? h % pc.n_k : h / (pc.n_v / pc.n_k);
    const uint s = uint(pc.slots.i[r]) * pc.state_size + h * pc.d_k * pc.d_v + j;  // S_h[i][j] at s + i d_v
    for (uint t = 0u; t < pc.n_tokens; ++t) {
        if (uint(pc.seqs.i[t]) != r) continue;
        const uint qk = (t * pc.n_k + kh) * pc.d_k, gb = t * pc.n_v + h;
        const float decay = exp_ref(pc.g.f[gb]), b = pc.beta.f[gb];
        precise float u = 0.0;
        for (uint i = 0u; i < pc.d_k; ++i) {
            precise float decayed = pc.state.f[s + i * pc.d_v] * decay;
            pc.state.f[s + i * pc.d_v] = decayed;
            precise float term = decayed * pc.k.f[qk + i];
            u = u + term;
        }
        precise float difference = pc.v.f[gb * pc.d_v + j] - u;
        precise float update = b * difference;
        precise float o = 0.0;
        for (uint i = 0u; i < pc.d_k; ++i) {
            precise float step = pc.k.f[qk + i] * update;
            precise float updated = pc.state.f[s + i * pc.d_v] + step;
            pc.state.f[s + i * pc.d_v] = updated;
            precise float term = updated * pc.q.f[qk + i];
            o = o + term;
        }
        pc.out_.f[gb * pc.d_v + j] = o;
    }
}
