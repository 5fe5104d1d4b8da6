#version 450
#extension GL_GOOGLE_include_directive : require
// SSM_CONV (graph.h): the depthwise causal convolution of each sequence row, its last kernel - 1 inputs carried in
// the row's state slot. One invocation per (row, channel) takes the row's tokens in order, as the reference does
// (reference_kernels.cpp, ssm_conv): its window starts with the slot's saved inputs, each token shifts its input
// in, the output is sum_j w[j] * window[j] in float, taps in order, product and sum rounded apart; the window's
// last kernel - 1 inputs go back to the slot. The host checked every row's slot and every token's row before the
// step was submitted, and no two rows share a slot, so no invocation writes another's state.
#include "common.glsl"

const uint MAX_KERNEL = 16u;
layout(local_size_x = 64) in;
layout(push_constant, scalar) uniform Push {
    Floats x;      // [channels, n_tokens]
    Floats w;      // [kernel, channels]
    Floats state;  // [(kernel - 1) * channels, n_slots]
    Ints seqs;     // [n_tokens]
    Ints slots;    // [n_seqs]
    Floats out_;   // [channels, n_tokens]
    uint channels, n_tokens, kernel, n_seqs, state_size;
} pc;

void main() {
    const uint e = group_index() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (e >= pc.n_seqs * pc.channels) return;
    const uint r = e / pc.channels, c = e % pc.channels;
    const uint saved = uint(pc.slots.i[r]) * pc.state_size;
    float window[MAX_KERNEL];
    for (uint j = 0u; j + 1u < pc.kernel; ++j) window[j] = pc.state.f[saved + j * pc.channels + c];
    for (uint t = 0u; t < pc.n_tokens; ++t) {
        if (uint(pc.seqs.i[t]) != r) continue;
        window[pc.kernel - 1u] = pc.x.f[t * pc.channels + c];
        precise float sum = 0.0;
        for (uint j = 0u; j < pc.kernel; ++j) {
            precise float term = pc.w.f[c * pc.kernel + j] * window[j];
            sum = sum + term;
        }
        pc.out_.f[t * pc.channels + c] = sum;
        for (uint j = 0u; j + 1u < pc.kernel; ++j) window[j] = window[j + 1u];
    }
    for (uint j = 0u; j + 1u < pc.kernel; ++j) pc.state.f[saved + j * pc.channels + c] = window[j];
}
