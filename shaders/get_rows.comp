#version 450
#extension GL_GOOGLE_include_directive : require
// out[:, i] = dequant(table[:, ids[i]]). The ids were checked on the host before the step was submitted.
#include "common.glsl"
#include "weights.glsl"

layout(local_size_x = 256) in;
layout(push_constant, scalar) uniform Push {
    Words table;  // [k, rows] of WEIGHT_TYPE
    Ints ids;     // I32 [n]
    Floats out_;  // F32 [k, n]
    uint k, n;
} pc;

void main() {
    const uint e = (group_index() * gl_WorkGroupSize.x + gl_LocalInvocationID.x);
    if (e >= pc.k * pc.n) return;
    const uint i = e / pc.k, j = e % pc.k;
    pc.out_.f[e] = weight_at(pc.table, uint(pc.ids.i[i]) * row_bytes(pc.k), j);
}
