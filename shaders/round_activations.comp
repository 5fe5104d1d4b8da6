#version 450
#extension GL_GOOGLE_include_directive : require
// The activations of a MATMUL as its weight type's dot product sees them (rounding.glsl), one invocation per
// span of one column, for products with more than one column (the matrix-vector products round their single
// column themselves). Q8 roundings write codes, scales and sums; the others write rounded floats to `codes`.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(push_constant, scalar) uniform Push {
    Floats x;        // F32 [k, n]
    Words codes;     // ROUNDING 1 to 3: I8 [k, n], four to a word; else F32 [k, n]
    Floats scales;   // F32 [k / SPAN, n] (ROUNDING 1 to 3)
    Floats sums;     // F32 [k / 32, n] (ROUNDING 1, 2), [k / 16, n] (ROUNDING 3)
    uint k, n;
} pc;

#define ROUND_IN(i) pc.x.f[i]
#define ROUND_CODES(at, v) pc.codes.w[at] = (v)
#define ROUND_SCALE(g, v) pc.scales.f[g] = (v)
#define ROUND_SUM(g, v) pc.sums.f[g] = (v)
#define ROUND_OUT(i, v) pc.codes.w[i] = floatBitsToUint(v)
#include "rounding.glsl"

void main() {
    const uint g = group_index() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (g >= pc.k / SPAN * pc.n) return;
    round_span(g * SPAN, g);  // columns are contiguous and k is a multiple of SPAN
}
