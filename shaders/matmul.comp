#version 450
#extension GL_GOOGLE_include_directive : require
// out = W x (+ residual) for the float weight types (WEIGHT_TYPE F32, F16, BF16), x rounded as that type's dot
// product sees it (round_activations.comp). The reference sums these products in double, so any float order is
// as close to it as another; the quantized types, whose products are integer-defined, are matmul_q8.comp's and
// matmul_q8k.comp's. Three shapes:
//  - TILED 0, up to 8 columns: a row per 32 lanes, each lane a strided part of the row, then a tree sum;
//  - TILED 0 with ROUNDING, one column (decode): the same, but each workgroup rounds x into shared memory
//    itself, which saves the rounding dispatch and the barrier after it;
//  - TILED 1, many columns (prefill): 64x32 tiles of the output through shared memory, 4x4 per invocation.
// With has_residual, the ADD that was the product's only reader is done here: out = W x + residual.
#include "common.glsl"
#include "weights.glsl"

layout(push_constant, scalar) uniform Push {
    Words w;         // [k, m] of WEIGHT_TYPE
    Floats x;        // F32 [k, n], rounded
    Floats out_;     // F32 [m, n]
    Floats residual; // F32 [m, n] when has_residual
    uint k, m, n, has_residual;
} pc;

float finish(float v, uint at) { return pc.has_residual != 0u ? v + pc.residual.f[at] : v; }

#if TILED == 0
const uint LANES = 32u, ROWS = 4u;
#ifdef ROUNDING
const uint MAX_COLUMNS = 1u, MAX_K = 4096u;
shared float xs[MAX_K];
float x_at(uint c, uint i) { return xs[i]; }
#define ROUND_IN(i) xs[i]
#define ROUND_OUT(i, v) xs[i] = (v)
#include "rounding.glsl"
#else
const uint MAX_COLUMNS = 8u;
float x_at(uint c, uint i) { return pc.x.f[c * pc.k + i]; }
#endif
layout(local_size_x = 32, local_size_y = 4) in;
shared float partial[ROWS][MAX_COLUMNS][LANES];

void main() {
    const uint lane = gl_LocalInvocationID.x, y = gl_LocalInvocationID.y;
#ifdef ROUNDING
    // x into shared memory with coalesced reads, then rounded there, a span per invocation.
    for (uint i = y * LANES + lane; i < pc.k; i += LANES * ROWS) xs[i] = pc.x.f[i];
    barrier();
    for (uint g = y * LANES + lane; g < pc.k / SPAN; g += LANES * ROWS) round_span(g * SPAN, g);
    barrier();
#endif
    const uint row = group_index() * ROWS + y;
    const bool live = row < pc.m;
    const uint o = (live ? row : 0u) * row_bytes(pc.k);
    float acc[MAX_COLUMNS];
    for (uint c = 0u; c < MAX_COLUMNS; ++c) acc[c] = 0.0;
    if (live) {
        for (uint i = lane; i < pc.k; i += LANES) {
            const float wv = weight_at(pc.w, o, i);
            for (uint c = 0u; c < pc.n; ++c) acc[c] += wv * x_at(c, i);
        }
    }
    for (uint c = 0u; c < MAX_COLUMNS; ++c) partial[y][c][lane] = acc[c];
    barrier();
    for (uint width = LANES / 2u; width > 0u; width /= 2u) {
        if (lane < width)
            for (uint c = 0u; c < pc.n; ++c) partial[y][c][lane] += partial[y][c][lane + width];
        barrier();
    }
    if (live && lane < pc.n) pc.out_.f[lane * pc.m + row] = finish(partial[y][lane][0], lane * pc.m + row);
}
#else
// 64 rows x 32 columns per workgroup keeps enough workgroups in flight for a 512-token prompt on a large GPU.
const uint TILE_M = 64u, TILE_N = 32u, STEP = 32u, THREADS = 128u;
layout(local_size_x = 8, local_size_y = 16) in;
shared float ws[STEP][TILE_M + 1u];
shared float xs[STEP][TILE_N + 1u];

void main() {
    const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, t = ty * 8u + tx;
    const uint row0 = gl_WorkGroupID.x * TILE_M, col0 = gl_WorkGroupID.y * TILE_N;
    const uint rb = row_bytes(pc.k);
    float acc[4][4];
    for (uint i = 0u; i < 4u; ++i)
        for (uint j = 0u; j < 4u; ++j) acc[i][j] = 0.0;
    for (uint k0 = 0u; k0 < pc.k; k0 += STEP) {
        for (uint e = t; e < TILE_M * STEP; e += THREADS) {
            const uint r = e / STEP, kk = e % STEP;
            ws[kk][r] = row0 + r < pc.m && k0 + kk < pc.k ? weight_at(pc.w, (row0 + r) * rb, k0 + kk) : 0.0;
        }
        for (uint e = t; e < TILE_N * STEP; e += THREADS) {
            const uint c = e / STEP, kk = e % STEP;
            xs[kk][c] = col0 + c < pc.n && k0 + kk < pc.k ? pc.x.f[(col0 + c) * pc.k + k0 + kk] : 0.0;
        }
        barrier();
        for (uint kk = 0u; kk < STEP; ++kk) {
            float a[4], b[4];
            for (uint i = 0u; i < 4u; ++i) a[i] = ws[kk][ty + 16u * i];
            for (uint j = 0u; j < 4u; ++j) b[j] = xs[kk][tx + 8u * j];
            for (uint i = 0u; i < 4u; ++i)
                for (uint j = 0u; j < 4u; ++j) acc[i][j] += a[i] * b[j];
        }
        barrier();
    }
    for (uint i = 0u; i < 4u; ++i)
        for (uint j = 0u; j < 4u; ++j) {
            const uint r = row0 + ty + 16u * i, c = col0 + tx + 8u * j;
            if (r < pc.m && c < pc.n) pc.out_.f[c * pc.m + r] = finish(acc[i][j], c * pc.m + r);
        }
}
#endif
