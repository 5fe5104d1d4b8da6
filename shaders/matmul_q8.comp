#version 450
#extension GL_GOOGLE_include_directive : require
// out = W x (+ residual) for the weight types whose dot product meets Q8 activation blocks (WEIGHT_TYPE Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0), in exactly the reference's order (blocks.cpp dot_q8_row, ggml's x86 vec_dot): in each
// block of 32, lane l (of 8) takes the integer sum of the products of elements 4 l .. 4 l + 3 and accumulates
// d_w * d_x * sum with a fused multiply-add along the row; the lanes add as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7));
// affine types keep min * block sum in a separate fused running sum, added last. So every output equals the
// reference's bit for bit (with EXACT; common.glsl). x arrives as codes, scales and sums (rounding.glsl).
// Shapes:
//  - TILED 0, up to 8 columns: 8 invocations (the lanes) per row;
//  - TILED 0 with ROUNDING, one column (decode): the same, and each workgroup quantizes x into shared memory
//    itself, which saves the rounding dispatch and the barrier after it;
//  - TILED 1, many columns (prefill): 32x32 output tiles, blocks staged through shared memory.
// With has_residual, the ADD that was the product's only reader is done here: out = W x + residual.
#include "common.glsl"
#include "weights.glsl"

layout(push_constant, scalar) uniform Push {
    Words w;         // [k, m] of WEIGHT_TYPE
    Floats x;        // F32 [k, n]: read only with ROUNDING
    Words codes;     // I8 [k, n], four to a word
    Floats scales;   // F32 [k / 32, n]
    Floats sums;     // F32 [k / 32, n]
    Floats out_;     // F32 [m, n]
    Floats residual; // F32 [m, n] when has_residual
    uint k, m, n, has_residual;
} pc;

const uint LANES = 8u;

int dot4(uint a, uint b) {
    int s = 0;
    for (int i = 0; i < 32; i += 8) s += bitfieldExtract(int(a), i, 8) * bitfieldExtract(int(b), i, 8);
    return s;
}

// The reference's final sum of the eight lanes, then the affine part.
float combine(float l[LANES], float mins) {
    precise float v = sum_of_lanes(l) + mins;
    return v;
}

void store(uint row, uint col, float v) {
    const uint at = col * pc.m + row;
    precise float r = pc.has_residual != 0u ? v + pc.residual.f[at] : v;
    pc.out_.f[at] = r;
}

#if TILED == 0
const uint ROWS = 16u;
layout(local_size_x = 8, local_size_y = 16) in;
#ifdef ROUNDING
const uint MAX_COLUMNS = 1u, MAX_K = 4096u;
shared uint xcodes[MAX_K / 4u];
shared float xscales[MAX_K / 32u], xsums[MAX_K / 32u];
uint codes_at(uint c, uint w) { return xcodes[w]; }
float scale_at(uint c, uint b) { return xscales[b]; }
float sum_at(uint c, uint b) { return xsums[b]; }
#define ROUND_IN(i) pc.x.f[i]
#define ROUND_CODES(at, v) xcodes[at] = (v)
#define ROUND_SCALE(g, v) xscales[g] = (v)
#define ROUND_SUM(g, v) xsums[g] = (v)
#include "rounding.glsl"
#else
const uint MAX_COLUMNS = 8u;
uint codes_at(uint c, uint w) { return pc.codes.w[c * (pc.k / 4u) + w]; }
float scale_at(uint c, uint b) { return pc.scales.f[c * (pc.k / 32u) + b]; }
float sum_at(uint c, uint b) { return pc.sums.f[c * (pc.k / 32u) + b]; }
#endif
shared float lanes_of[ROWS][MAX_COLUMNS][LANES];

void main() {
    const uint lane = gl_LocalInvocationID.x, y = gl_LocalInvocationID.y;
#ifdef ROUNDING
    for (uint b = y * LANES + lane; b < pc.k / 32u; b += LANES * ROWS) round_span(32u * b, b);
    barrier();
#endif
    const uint row = group_index() * ROWS + y;
    const bool live = row < pc.m;
    const uint o = (live ? row : 0u) * row_bytes(pc.k);
    float acc[MAX_COLUMNS], mins[MAX_COLUMNS];
    for (uint c = 0u; c < MAX_COLUMNS; ++c) {
        acc[c] = 0.0;
        mins[c] = 0.0;
    }
    if (live) {
        // Blocks go UNROLL at a time, their weights loaded before any is used so that the loads overlap; the
        // accumulation still runs block by block.
        const uint UNROLL = 4u, kb = pc.k / 32u;
        for (uint b0 = 0u; b0 < kb; b0 += UNROLL) {
            uint wq[UNROLL];
            float dw[UNROLL], mw[UNROLL];
            for (uint u = 0u; u < UNROLL; ++u) {
                const uint at = o + min(b0 + u, kb - 1u) * BLOCK_BYTES;
                wq[u] = lane_codes(pc.w, at, lane);
                dw[u] = block_scale(pc.w, at);
#ifdef AFFINE
                mw[u] = block_min(pc.w, at);
#endif
            }
            for (uint u = 0u; u < UNROLL && b0 + u < kb; ++u)
                for (uint c = 0u; c < pc.n; ++c) {
                    precise float d = dw[u] * scale_at(c, b0 + u);
                    acc[c] = fma_ref(d, float(dot4(wq[u], codes_at(c, 8u * (b0 + u) + lane))), acc[c]);
#ifdef AFFINE
                    mins[c] = fma_ref(mw[u], sum_at(c, b0 + u), mins[c]);
#endif
                }
        }
    }
    for (uint c = 0u; c < MAX_COLUMNS; ++c) lanes_of[y][c][lane] = acc[c];
    barrier();
    if (live && lane < pc.n) store(row, lane, combine(lanes_of[y][lane], mins[lane]));
}
#else
// 256 invocations: 8 lanes x 32 cells, each cell 4 rows x 8 columns of the tile; BLOCKS blocks of k per stage.
const uint TILE_M = 32u, TILE_N = 32u, BLOCKS = 4u, THREADS = 256u;
layout(local_size_x = 8, local_size_y = 32) in;
shared uint wq[TILE_M][BLOCKS][LANES];
shared uint xq[TILE_N][BLOCKS][LANES];
shared float wd[TILE_M][BLOCKS], xd[TILE_N][BLOCKS];
#ifdef AFFINE
shared float wm[TILE_M][BLOCKS], xs[TILE_N][BLOCKS];
#endif
shared float lanes_of[32][8][LANES];  // one row of each cell's outputs at a time

void main() {
    const uint lane = gl_LocalInvocationID.x, cell = gl_LocalInvocationID.y, t = cell * LANES + lane;
    const uint row0 = gl_WorkGroupID.x * TILE_M, col0 = gl_WorkGroupID.y * TILE_N;
    const uint r0 = (cell / 4u) * 4u, c0 = (cell % 4u) * 8u;  // the cell's rows and columns within the tile
    const uint rb = row_bytes(pc.k), kb = pc.k / 32u;
    float acc[4][8];
    float mins[4];  // this lane's affine sums: rows r0 .. r0 + 3 of column c0 + lane
    for (uint i = 0u; i < 4u; ++i) {
        mins[i] = 0.0;
        for (uint j = 0u; j < 8u; ++j) acc[i][j] = 0.0;
    }
    for (uint b0 = 0u; b0 < kb; b0 += BLOCKS) {
        for (uint e = t; e < TILE_M * BLOCKS * LANES; e += THREADS) {
            const uint r = e / (BLOCKS * LANES), bb = e / LANES % BLOCKS, l = e % LANES;
            const bool inside = row0 + r < pc.m && b0 + bb < kb;
            wq[r][bb][l] = inside ? lane_codes(pc.w, (row0 + r) * rb + (b0 + bb) * BLOCK_BYTES, l) : 0u;
        }
        for (uint e = t; e < TILE_N * BLOCKS * LANES; e += THREADS) {
            const uint c = e / (BLOCKS * LANES), bb = e / LANES % BLOCKS, l = e % LANES;
            const bool inside = col0 + c < pc.n && b0 + bb < kb;
            xq[c][bb][l] = inside ? pc.codes.w[(col0 + c) * (pc.k / 4u) + 8u * (b0 + bb) + l] : 0u;
        }
        if (t < TILE_M * BLOCKS) {
            const uint r = t / BLOCKS, bb = t % BLOCKS;
            const bool inside = row0 + r < pc.m && b0 + bb < kb;
            const uint at = (row0 + r) * rb + (b0 + bb) * BLOCK_BYTES;
            wd[r][bb] = inside ? block_scale(pc.w, at) : 0.0;
#ifdef AFFINE
            wm[r][bb] = inside ? block_min(pc.w, at) : 0.0;
#endif
        } else if (t < (TILE_M + TILE_N) * BLOCKS) {
            const uint c = (t - TILE_M * BLOCKS) / BLOCKS, bb = t % BLOCKS;
            const bool inside = col0 + c < pc.n && b0 + bb < kb;
            xd[c][bb] = inside ? pc.scales.f[(col0 + c) * kb + b0 + bb] : 0.0;
#ifdef AFFINE
            xs[c][bb] = inside ? pc.sums.f[(col0 + c) * kb + b0 + bb] : 0.0;
#endif
        }
        barrier();
        for (uint bb = 0u; bb < BLOCKS && b0 + bb < kb; ++bb) {
            uint a[4], x[8];
            for (uint i = 0u; i < 4u; ++i) a[i] = wq[r0 + i][bb][lane];
            for (uint j = 0u; j < 8u; ++j) x[j] = xq[c0 + j][bb][lane];
            for (uint i = 0u; i < 4u; ++i)
                for (uint j = 0u; j < 8u; ++j) {
                    precise float d = wd[r0 + i][bb] * xd[c0 + j][bb];
                    acc[i][j] = fma_ref(d, float(dot4(a[i], x[j])), acc[i][j]);
                }
#ifdef AFFINE
            for (uint i = 0u; i < 4u; ++i) mins[i] = fma_ref(wm[r0 + i][bb], xs[c0 + lane][bb], mins[i]);
#endif
        }
        barrier();
    }
    // Each output's eight lanes meet in shared memory, a row of the cell at a time; lane j finishes column c0 + j.
    for (uint i = 0u; i < 4u; ++i) {
        for (uint j = 0u; j < 8u; ++j) lanes_of[cell][j][lane] = acc[i][j];
        barrier();
        const uint r = row0 + r0 + i, c = col0 + c0 + lane;
        if (r < pc.m && c < pc.n) store(r, c, combine(lanes_of[cell][lane], mins[i]));
        barrier();
    }
}
#endif
