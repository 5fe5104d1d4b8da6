#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
// Precision "fast" (docs/vulkan.md): out = W x (+ residual) for many columns (prefill), float activations. A
// workgroup owns a 64x64 tile of the output; 32 elements of k at a time, the weights are dequantized once into
// shared memory (weights8) and the activations copied beside them, and each invocation accumulates a 4x4 cell in
// float fused multiply-adds. Activations are rounded as llama.cpp's dot products see them (round_fast.glsl),
// except K-quants' Q8_K blocks, which span several steps.
#include "common.glsl"
#include "weights.glsl"

const uint TILE = 64u, STEP = 32u, THREADS = 256u;
layout(local_size_x = 256) in;
layout(push_constant, scalar) uniform Push {
    Words w;          // [k, m] of WEIGHT_TYPE
    Floats x;         // F32 [k, n]
    Floats out_;      // F32 [m, n]
    Floats residual;  // F32 [m, n] when has_residual
    uint k, m, n, has_residual;
} pc;

shared float ws[STEP][TILE + 4u];  // ws[kk][r]: weight of tile row r at k0 + kk
shared float xs[STEP][TILE + 4u];  // xs[kk][c]: activation of tile column c at k0 + kk

// Four neighbouring invocations load one column's 32 elements of a step: one Q8 block.
float group_max(float v, uint width) {
    for (uint off = width / 2u; off > 0u; off >>= 1) v = max(v, subgroupShuffleXor(v, off));
    return v;
}
#define NO_Q8_K 1
#include "round_fast.glsl"

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint row0 = gl_WorkGroupID.x * TILE, col0 = gl_WorkGroupID.y * TILE;
    const uint cr = (tid / 16u) * 4u, cc = (tid % 16u) * 4u;  // this invocation's cell
    const uint rb = row_bytes(pc.k);
    // Each invocation loads one run of eight along k: of tile row (or column) tid / 4, part tid % 4.
    const uint lr = tid / 4u, part = tid % 4u;
    const bool row_in = row0 + lr < pc.m, col_in = col0 + lr < pc.n;
    float acc[4][4];
    for (uint i = 0u; i < 4u; ++i)
        for (uint j = 0u; j < 4u; ++j) acc[i][j] = 0.0;

    for (uint k0 = 0u; k0 < pc.k; k0 += STEP) {
        const bool k_in = k0 + 8u * part < pc.k;
        float v[8];
        if (row_in && k_in) weights8(pc.w, (row0 + lr) * rb, k0 / 8u + part, v);
        else for (uint i = 0u; i < 8u; ++i) v[i] = 0.0;
        for (uint i = 0u; i < 8u; ++i) ws[8u * part + i][lr] = v[i];
        const uint xo = (col0 + lr) * pc.k + k0 + 8u * part;
        for (uint i = 0u; i < 8u; ++i) v[i] = col_in && k_in ? pc.x.f[xo + i] : 0.0;
        round_activations8(v);
        for (uint i = 0u; i < 8u; ++i) xs[8u * part + i][lr] = v[i];
        barrier();
        for (uint kk = 0u; kk < STEP; ++kk) {
            const vec4 a = vec4(ws[kk][cr], ws[kk][cr + 1u], ws[kk][cr + 2u], ws[kk][cr + 3u]);
            const vec4 b = vec4(xs[kk][cc], xs[kk][cc + 1u], xs[kk][cc + 2u], xs[kk][cc + 3u]);
            for (uint i = 0u; i < 4u; ++i)
                for (uint j = 0u; j < 4u; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
        }
        barrier();
    }
    for (uint j = 0u; j < 4u; ++j) {
        const uint c = col0 + cc + j;
        if (c >= pc.n) continue;
        for (uint i = 0u; i < 4u; ++i) {
            const uint r = row0 + cr + i;
            if (r >= pc.m) continue;
            const uint at = c * pc.m + r;
            pc.out_.f[at] = acc[i][j] + (pc.has_residual != 0u ? pc.residual.f[at] : 0.0);
        }
    }
}
