#version 450
#extension GL_GOOGLE_include_directive : require
// SET_ROWS (graph.h), after view.comp has copied src0 into the output: column rows[i] of the output takes column i
// of the new rows, one invocation per new element. The host checked every index before the step was submitted
// (in [0, m), no two alike), so no invocation writes outside the output or races another.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(push_constant, scalar) uniform Push {
    Words rows;   // F32 [n, k]
    Ints at;      // I32 [k]
    Words out_;   // F32 [n, m]
    uint n, k;
} pc;

void main() {
    const uint e = group_index() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (e >= pc.n * pc.k) return;
    const uint i = e / pc.n, j = e % pc.n;
    pc.out_.w[uint(pc.at.i[i]) * pc.n + j] = pc.rows.w[e];
}
