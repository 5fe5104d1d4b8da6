#version 450
#extension GL_GOOGLE_include_directive : require
// VIEW (graph.h): out[i0, i1, i2, i3] = src[offset + i0 + i1 s1 + i2 s2 + i3 s3], one invocation per output
// element, copied as 32-bit words so every bit pattern passes unchanged. SET_ROWS copies its src0 with it too
// (offset 0 and the source's own strides). The window was checked to lie inside the source when the graph was.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(push_constant, scalar) uniform Push {
    Words src;
    Words out_;
    uint ne[4];     // output shape
    uint offset;    // in elements
    uint stride[3]; // of dims 1..3, in elements
} pc;

void main() {
    const uint e = group_index() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (e >= pc.ne[0] * pc.ne[1] * pc.ne[2] * pc.ne[3]) return;
    const uint i0 = e % pc.ne[0], rest = e / pc.ne[0];
    const uint i1 = rest % pc.ne[1], i2 = rest / pc.ne[1] % pc.ne[2], i3 = rest / (pc.ne[1] * pc.ne[2]);
    pc.out_.w[e] = pc.src.w[pc.offset + i0 + i1 * pc.stride[0] + i2 * pc.stride[1] + i3 * pc.stride[2]];
}
