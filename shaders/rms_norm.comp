#version 450
#extension GL_GOOGLE_include_directive : require
// One workgroup per row: out = x * (1 / sqrt(mean(x^2) + eps)), times the broadcast weight row when there is one.
// As the reference does, the squares are summed in double (with EXACT; a tree of doubles rounds to the same
// float as the reference's running sum but for a tie within 2^-29) and the scale is a correctly rounded float.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(push_constant, scalar) uniform Push {
    Floats x;
    Floats w;       // broadcast weight, or unused when has_weight is 0
    Floats out_;
    uint ne[4];
    uint wne[4];
    uint has_weight;
    float eps;
} pc;

#if EXACT
#define SUM double
#else
#define SUM float
#endif
shared SUM partial[256];

void main() {
    const uint row = group_index(), t = gl_LocalInvocationID.x, n = pc.ne[0];
    const uint base = row * n;
    SUM s = SUM(0.0);
    for (uint i = t; i < n; i += 256u) s += SUM(pc.x.f[base + i]) * SUM(pc.x.f[base + i]);
    partial[t] = s;
    barrier();
    for (uint width = 128u; width > 0u; width /= 2u) {
        if (t < width) partial[t] += partial[t + width];
        barrier();
    }
    precise float mean = float(partial[0] / SUM(n));
    precise float shifted = mean + pc.eps;
    const float scale = div_ref(1.0, sqrt_ref(shifted));
    uint wrow = 0u;
    if (pc.has_weight != 0u) {
        const uint i1 = row % pc.ne[1], i2 = row / pc.ne[1] % pc.ne[2], i3 = row / (pc.ne[1] * pc.ne[2]);
        wrow = ((pc.wne[1] == 1u ? 0u : i1) + pc.wne[1] * ((pc.wne[2] == 1u ? 0u : i2) + pc.wne[2] * (pc.wne[3] == 1u ? 0u : i3))) * pc.wne[0];
    }
    for (uint i = t; i < n; i += 256u) {
        precise float v = pc.x.f[base + i] * scale;
        if (pc.has_weight != 0u) v = v * pc.w.f[wrow + (pc.wne[0] == 1u ? 0u : i)];
        pc.out_.f[base + i] = v;
    }
}
