#version 450
#extension GL_GOOGLE_include_directive : require
// Precision "fast": merges the key chunks of attention_fast.comp, one invocation per output element: each chunk's
// exponentials are rescaled to the largest maximum, and the outputs are summed and divided by the sum of all.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(push_constant, scalar) uniform Push {
    Floats partials;  // [head_dim + 2, n_head * n_tokens, chunks]: maximum, sum of exponentials, unnormalised output
    Floats out_;      // [head_dim * n_head, n_tokens]
    uint head_dim, n_head, n_tokens, chunks;
} pc;

void main() {
    const uint e = group_index() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    const uint rows = pc.n_head * pc.n_tokens;
    if (e >= rows * pc.head_dim) return;
    const uint r = e / pc.head_dim, d = e % pc.head_dim;  // row r = t * n_head + h
    const uint stride = rows * (pc.head_dim + 2u);
    float best = -1.0 / 0.0;
    for (uint s = 0u; s < pc.chunks; ++s) best = max(best, pc.partials.f[s * stride + r * (pc.head_dim + 2u)]);
    float total = 0.0, value = 0.0;
    for (uint s = 0u; s < pc.chunks; ++s) {
        const uint base = s * stride + r * (pc.head_dim + 2u);
        const float m = pc.partials.f[base];
        if (m == -1.0 / 0.0) continue;  // a chunk with no keys
        const float f = exp(m - best);
        total = fma(pc.partials.f[base + 1u], f, total);
        value = fma(pc.partials.f[base + 2u + d], f, value);
    }
    pc.out_.f[e] = value / total;
}
