#version 450
#extension GL_GOOGLE_include_directive : require
// Rotary embedding with angles the host computed for this step's positions (cos and sin per token and pair, in
// double as the reference does): one invocation per pair of one head of one token; dims past n_rot pass through.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(push_constant, scalar) uniform Push {
    Floats x;        // [head_dim, n_heads, n_tokens]
    Floats angles;   // [2 * half, n_tokens]: cos then sin
    Floats out_;
    uint head_dim, n_heads, n_tokens, half_rot, adjacent;
} pc;

void main() {
    const uint pairs = pc.head_dim / 2u;
    const uint g = (group_index() * gl_WorkGroupSize.x + gl_LocalInvocationID.x);
    if (g >= pairs * pc.n_heads * pc.n_tokens) return;
    const uint p = g % pairs, h = g / pairs % pc.n_heads, t = g / (pairs * pc.n_heads);
    const uint base = (t * pc.n_heads + h) * pc.head_dim;
    if (p >= pc.half_rot) {
        const uint i = 2u * pc.half_rot + 2u * (p - pc.half_rot);
        pc.out_.f[base + i] = pc.x.f[base + i];
        pc.out_.f[base + i + 1u] = pc.x.f[base + i + 1u];
        return;
    }
    const uint ia = base + (pc.adjacent != 0u ? 2u * p : p), ib = base + (pc.adjacent != 0u ? 2u * p + 1u : p + pc.half_rot);
    const float cs = pc.angles.f[t * 2u * pc.half_rot + p], sn = pc.angles.f[t * 2u * pc.half_rot + pc.half_rot + p];
    const float a = pc.x.f[ia], b = pc.x.f[ib];
    precise float ra = a * cs - b * sn;
    precise float rb = a * sn + b * cs;
    pc.out_.f[ia] = ra;
    pc.out_.f[ib] = rb;
}
