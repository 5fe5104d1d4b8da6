#version 450
#extension GL_GOOGLE_include_directive : require
// LAYER_NORM (graph.h), one workgroup per row: out = (x - mean) / sqrt(var + eps), then times the broadcast weight
// and plus the broadcast bias when there are ones.
// With EXACT, in the reference's order and rounding (reference_kernels.cpp, layer_norm), so the output is the
// reference's bit for bit: one invocation sums the row in double in index order, divides by n in double, sums the
// squared differences from that double mean in the same order, and takes m = float(mean) and the scale
// 1 / sqrt(float(var) + eps) as correctly rounded floats; every invocation then computes (x - m) * scale, the
// weight's product and the bias's sum as separate float roundings. Without EXACT (devices without shaderFloat64,
// and precision "fast") the sums are a tree of floats over the workgroup: mean first, then the squares about it.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(push_constant, scalar) uniform Push {
    Floats x;
    Floats w;   // broadcast weight, unused unless flags & 1
    Floats b;   // broadcast bias, unused unless flags & 2
    Floats out_;
    uint ne[4];
    uint wne[4];
    uint bne[4];
    uint flags;
    float eps;
} pc;

shared float row_mean, row_scale;
#if !EXACT
shared float partial[256];

// The workgroup's sum of its invocations' values (every invocation gets it).
float workgroup_sum(float v) {
    const uint t = gl_LocalInvocationID.x;
    partial[t] = v;
    barrier();
    for (uint width = 128u; width > 0u; width /= 2u) {
        if (t < width) partial[t] += partial[t + width];
        barrier();
    }
    const float total = partial[0];
    barrier();
    return total;
}
#endif

// Element i0 of the row of a broadcast operand of shape bne that meets output row `row`.
uint broadcast_at(uint bne[4], uint row, uint i0) {
    const uint i1 = row % pc.ne[1], i2 = row / pc.ne[1] % pc.ne[2], i3 = row / (pc.ne[1] * pc.ne[2]);
    const uint r = (bne[1] == 1u ? 0u : i1) + bne[1] * ((bne[2] == 1u ? 0u : i2) + bne[2] * (bne[3] == 1u ? 0u : i3));
    return r * bne[0] + (bne[0] == 1u ? 0u : i0);
}

void main() {
    const uint row = group_index(), t = gl_LocalInvocationID.x, n = pc.ne[0];
    const uint base = row * n;
#if EXACT
    if (t == 0u) {
        precise double sum = 0.0LF;
        for (uint i = 0u; i < n; ++i) sum = sum + double(pc.x.f[base + i]);
        precise double mean = sum / double(n);
        precise double squares = 0.0LF;
        for (uint i = 0u; i < n; ++i) {
            precise double d = double(pc.x.f[base + i]) - mean;
            precise double square = d * d;
            squares = squares + square;
        }
        precise double var = squares / double(n);
        precise float shifted = float(var) + pc.eps;
        row_mean = float(mean);
        row_scale = div_ref(1.0, sqrt_ref(shifted));
    }
#else
    float s = 0.0;
    for (uint i = t; i < n; i += 256u) s += pc.x.f[base + i];
    const float mean = workgroup_sum(s) / float(n);
    float squares = 0.0;
    for (uint i = t; i < n; i += 256u) {
        const float d = pc.x.f[base + i] - mean;
        squares += d * d;
    }
    const float var = workgroup_sum(squares) / float(n);
    if (t == 0u) {
        row_mean = mean;
        row_scale = 1.0 / sqrt(var + pc.eps);
    }
#endif
    barrier();
    const float m = row_mean, scale = row_scale;
    for (uint i = t; i < n; i += 256u) {
        precise float centred = pc.x.f[base + i] - m;
        precise float v = centred * scale;
        if ((pc.flags & 1u) != 0u) v = v * pc.w.f[broadcast_at(pc.wne, row, i)];
        if ((pc.flags & 2u) != 0u) v = v + pc.b.f[broadcast_at(pc.bne, row, i)];
        pc.out_.f[base + i] = v;
    }
}
