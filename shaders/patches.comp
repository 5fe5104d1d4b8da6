#version 450
#extension GL_GOOGLE_include_directive : require
// PATCHES (graph.h): images [width, height, channels, n] cut into p x p patches, one invocation per output element.
// Column j is patch (py, px) of image j / per_image, row by row of its grid; its element (c, ky, kx) at
// (c * p + ky) * p + kx is pixel (py * p + ky, px * p + kx) of channel c. Copied as 32-bit words.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(push_constant, scalar) uniform Push {
    Words images;
    Words out_;
    uint width, height, channels, p, n_patches;  // n_patches: columns of the output, every image's
} pc;

void main() {
    const uint e = group_index() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    const uint column = pc.channels * pc.p * pc.p;
    if (e >= column * pc.n_patches) return;
    const uint j = e / column, r = e % column;
    const uint c = r / (pc.p * pc.p), ky = r / pc.p % pc.p, kx = r % pc.p;
    const uint across = pc.width / pc.p, per_image = (pc.height / pc.p) * across;
    const uint n = j / per_image, py = j % per_image / across, px = j % across;
    pc.out_.w[e] = pc.images.w[((n * pc.channels + c) * pc.height + py * pc.p + ky) * pc.width + px * pc.p + kx];
}
