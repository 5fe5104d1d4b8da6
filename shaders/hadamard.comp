#version 450
#extension GL_GOOGLE_include_directive : require
// HADAMARD (graph.h): each run of d values rotated by c * H (signs * x), or back by signs * (c * H x), with the
// butterflies in the reference's order, in place in the output. One invocation per run: a run's butterflies
// depend on each other, and a step has few runs (a token's heads), each of at most a few hundred values.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(push_constant, scalar) uniform Push {
    Floats x;
    Floats signs;  // [d]
    Floats out_;
    uint d, runs, inverse;
    float c;
} pc;

void main() {
    const uint r = group_index() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (r >= pc.runs) return;
    const uint base = r * pc.d;
    for (uint i = 0u; i < pc.d; ++i) {
        precise float v = pc.inverse == 0u ? pc.x.f[base + i] * pc.signs.f[i] : pc.x.f[base + i];
        pc.out_.f[base + i] = v;
    }
    for (uint h = 1u; h < pc.d; h *= 2u) {
        for (uint j0 = 0u; j0 < pc.d; j0 += 2u * h) {
            for (uint j = j0; j < j0 + h; ++j) {
                const float a = pc.out_.f[base + j], b = pc.out_.f[base + j + h];
                precise float sum = a + b, difference = a - b;
                pc.out_.f[base + j] = sum;
                pc.out_.f[base + j + h] = difference;
            }
        }
    }
    for (uint i = 0u; i < pc.d; ++i) {
        precise float v = pc.out_.f[base + i] * pc.c;
        if (pc.inverse != 0u) v = v * pc.signs.f[i];
        pc.out_.f[base + i] = v;
    }
}
