#version 450
#extension GL_GOOGLE_include_directive : require
// out = W x (+ residual) for the K-quants (WEIGHT_TYPE Q4_K, Q5_K, Q6_K) against Q8_K activation blocks
// (rounding.glsl), exactly as the reference defines it (blocks.cpp, dot_q8k_row): within a block of 256 an
// integer sum, in any order since it is exact, of each sub-block's scale times its code products (and, Q4_K and
// Q5_K, of its min times the activation sums); then floats, block by block in row order, through chain(). So with
// EXACT (common.glsl) every output equals the reference's bit for bit. Shapes:
//  - TILED 0, up to 8 columns: 8 invocations (lanes) per row; the row's blocks go eight at a time, lane l taking
//    the integer sums of block 8 g + l whole, then lane c chaining column c's eight blocks in order;
//  - TILED 0 with ROUNDING, one column (decode): the same, and each workgroup quantizes x into shared memory
//    itself, which saves the rounding dispatch and the barrier after it;
//  - TILED 1, many columns (prefill): 32x32 output tiles, a block of 256 staged through shared memory at a time,
//    each invocation chaining 4 rows of one column.
// With has_residual, the ADD that was the product's only reader is done here: out = W x + residual.
#include "common.glsl"
#include "weights.glsl"

layout(push_constant, scalar) uniform Push {
    Words w;         // [k, m] of WEIGHT_TYPE
    Floats x;        // F32 [k, n]: read only with ROUNDING
    Words codes;     // I8 [k, n], four to a word
    Floats scales;   // F32 [k / 256, n]
    Floats sums;     // F32 [k / 16, n]: sums of 16 codes
    Floats out_;     // F32 [m, n]
    Floats residual; // F32 [m, n] when has_residual
    uint k, m, n, has_residual;
} pc;

int dot4(uint a, uint b) {
    int s = 0;
    for (int i = 0; i < 32; i += 8) s += bitfieldExtract(int(a), i, 8) * bitfieldExtract(int(b), i, 8);
    return s;
}

// The reference's float step along a row past one block, whose weight scale and min are dw and mw, activation
// scale dx, and integer sums scaled and min_sum: Q4_K and Q5_K add the block's own fma(dw dx, scaled,
// -(mw dx) min_sum) to the row's sum, Q6_K accumulates fma(dw dx, scaled, acc).
float chain(float acc, float dw, float mw, float dx, int scaled, int min_sum) {
    precise float d = dw * dx;
#ifdef K_AFFINE
    precise float mins = (mw * dx) * float(min_sum);
    precise float v = acc + fma_ref(d, float(scaled), -mins);
    return v;
#else
    return fma_ref(d, float(scaled), acc);
#endif
}

void store(uint row, uint col, float v) {
    const uint at = col * pc.m + row;
    precise float r = pc.has_residual != 0u ? v + pc.residual.f[at] : v;
    pc.out_.f[at] = r;
}

// Each shape gives block_sums its cell (CELL_ROWS rows x CELL_COLS columns) through w_word(row, i, w) and
// w_scale_min(row, i, s, scale, min) for the weights (row: where the shape finds them) and x_word(c, b, w) and
// x_sum(c, b, r) for column c's activations of block b.
#if TILED == 0
const uint LANES = 8u, ROWS = 16u, CELL_ROWS = 1u;
layout(local_size_x = 8, local_size_y = 16) in;
#ifdef ROUNDING
const uint CELL_COLS = 1u, MAX_K = 4096u;
shared uint xcodes[MAX_K / 4u];
shared float xscales[MAX_K / 256u], xsums[MAX_K / 16u];
uint x_word(uint c, uint b, uint w) { return xcodes[64u * b + w]; }
int x_sum(uint c, uint b, uint r) { return int(xsums[16u * b + r]); }
float x_scale(uint c, uint b) { return xscales[b]; }
#define ROUND_IN(i) pc.x.f[i]
#define ROUND_CODES(at, v) xcodes[at] = (v)
#define ROUND_SCALE(g, v) xscales[g] = (v)
#define ROUND_SUM(g, v) xsums[g] = (v)
#include "rounding.glsl"
#else
const uint CELL_COLS = 8u;
uint x_word(uint c, uint b, uint w) { return pc.codes.w[c * (pc.k / 4u) + 64u * b + w]; }
int x_sum(uint c, uint b, uint r) { return int(pc.sums.f[c * (pc.k / 16u) + 16u * b + r]); }
float x_scale(uint c, uint b) { return pc.scales.f[c * (pc.k / 256u) + b]; }
#endif
// row: the byte where the block starts.
uint w_word(uint row, uint i, uint w) { return k_codes(pc.w, row, w); }
void w_scale_min(uint row, uint i, uint s, out int scale, out int min) { sub_scale_min(pc.w, row, s, scale, min); }
uint cell_cols() { return pc.n; }
#else
const uint TILE_M = 32u, TILE_N = 32u, THREADS = 256u, CELL_ROWS = 4u, CELL_COLS = 1u;
layout(local_size_x = 256) in;
shared uint wq[TILE_M][64], xq[TILE_N][64];
shared int wscale[TILE_M][SUBS], wmin[TILE_M][SUBS], xsum[TILE_N][16];
shared float wd[TILE_M], wm[TILE_M], xd[TILE_N];
// row: the cell's first row in the tile; c: its column in the tile; the stage holds one block, b.
uint w_word(uint row, uint i, uint w) { return wq[row + i][w]; }
void w_scale_min(uint row, uint i, uint s, out int scale, out int min) {
    scale = wscale[row + i][s];
    min = wmin[row + i][s];
}
uint x_word(uint c, uint b, uint w) { return xq[c][w]; }
int x_sum(uint c, uint b, uint r) { return xsum[c][r]; }
uint cell_cols() { return 1u; }
#endif

// The integer sums of block b for the cell: scaled[i][j] = sum over sub-blocks of scale * (codes . x codes) and
// min_sum[i][j] = sum of min * (the sub-block's x sum). Q6_K's codes carry an offset of 32, taken off here as 32
// times the sub-block's x sum.
void block_sums(uint row, uint col, uint b, out int scaled[CELL_ROWS][CELL_COLS], out int min_sum[CELL_ROWS][CELL_COLS]) {
    for (uint i = 0u; i < CELL_ROWS; ++i)
        for (uint j = 0u; j < CELL_COLS; ++j) {
            scaled[i][j] = 0;
            min_sum[i][j] = 0;
        }
    for (uint s = 0u; s < SUBS; ++s) {
        int products[CELL_ROWS][CELL_COLS];
        for (uint i = 0u; i < CELL_ROWS; ++i)
            for (uint j = 0u; j < CELL_COLS; ++j) products[i][j] = 0;
        for (uint w = s * (SUB / 4u); w < (s + 1u) * (SUB / 4u); ++w) {
            uint a[CELL_ROWS];
            for (uint i = 0u; i < CELL_ROWS; ++i) a[i] = w_word(row, i, w);
            for (uint j = 0u; j < cell_cols(); ++j) {
                const uint xw = x_word(col + j, b, w);
                for (uint i = 0u; i < CELL_ROWS; ++i) products[i][j] += dot4(a[i], xw);
            }
        }
        for (uint i = 0u; i < CELL_ROWS; ++i) {
            int scale, min;
            w_scale_min(row, i, s, scale, min);
            for (uint j = 0u; j < cell_cols(); ++j) {
#ifdef K_AFFINE
                scaled[i][j] += scale * products[i][j];
                min_sum[i][j] += min * (x_sum(col + j, b, 2u * s) + x_sum(col + j, b, 2u * s + 1u));
#else
                scaled[i][j] += scale * (products[i][j] - 32 * x_sum(col + j, b, s));
#endif
            }
        }
    }
}

#if TILED == 0
shared ivec2 sums_of[ROWS][CELL_COLS][LANES];  // (scaled, min_sum) of each lane's block, per column
shared float dw_of[ROWS][LANES], mw_of[ROWS][LANES];

void main() {
    const uint lane = gl_LocalInvocationID.x, y = gl_LocalInvocationID.y, kb = pc.k / 256u;
#ifdef ROUNDING
    for (uint b = y * LANES + lane; b < kb; b += LANES * ROWS) round_span(256u * b, b);
    barrier();
#endif
    const uint row = group_index() * ROWS + y;
    const bool live = row < pc.m;
    const uint o = (live ? row : 0u) * row_bytes(pc.k);
    float acc = 0.0;  // lane c's: column c
    for (uint b0 = 0u; b0 < kb; b0 += LANES) {
        const uint b = b0 + lane;
        if (live && b < kb) {
            const uint at = o + b * BLOCK_BYTES;
            int scaled[1][CELL_COLS], min_sum[1][CELL_COLS];
            block_sums(at, 0u, b, scaled, min_sum);
            for (uint c = 0u; c < pc.n; ++c) sums_of[y][c][lane] = ivec2(scaled[0][c], min_sum[0][c]);
            dw_of[y][lane] = block_scale(pc.w, at);
#ifdef K_AFFINE
            mw_of[y][lane] = block_min(pc.w, at);
#endif
        }
        barrier();
        if (live && lane < pc.n)
            for (uint u = 0u; u < LANES && b0 + u < kb; ++u) {
                const ivec2 s = sums_of[y][lane][u];
                acc = chain(acc, dw_of[y][u], mw_of[y][u], x_scale(lane, b0 + u), s.x, s.y);
            }
        barrier();
    }
    if (live && lane < pc.n) store(row, lane, acc);
}
#else
void main() {
    const uint t = gl_LocalInvocationID.x, c = t % TILE_N, r0 = (t / TILE_N) * CELL_ROWS;
    const uint row0 = gl_WorkGroupID.x * TILE_M, col0 = gl_WorkGroupID.y * TILE_N;
    const uint rb = row_bytes(pc.k), kb = pc.k / 256u;
    float acc[CELL_ROWS];
    for (uint i = 0u; i < CELL_ROWS; ++i) acc[i] = 0.0;
    for (uint b = 0u; b < kb; ++b) {
        for (uint e = t; e < TILE_M * 64u; e += THREADS) {
            const uint r = e / 64u, w = e % 64u;
            wq[r][w] = row0 + r < pc.m ? k_codes(pc.w, (row0 + r) * rb + b * BLOCK_BYTES, w) : 0u;
        }
        for (uint e = t; e < TILE_N * 64u; e += THREADS) {
            const uint cc = e / 64u, w = e % 64u;
            xq[cc][w] = col0 + cc < pc.n ? pc.codes.w[(col0 + cc) * (pc.k / 4u) + 64u * b + w] : 0u;
        }
        for (uint e = t; e < TILE_M * SUBS; e += THREADS) {
            const uint r = e / SUBS, s = e % SUBS, at = (row0 + r) * rb + b * BLOCK_BYTES;
            int scale = 0, min = 0;
            if (row0 + r < pc.m) sub_scale_min(pc.w, at, s, scale, min);
            wscale[r][s] = scale;
            wmin[r][s] = min;
        }
        for (uint e = t; e < TILE_N * 16u; e += THREADS) {
            const uint cc = e / 16u, r = e % 16u;
            xsum[cc][r] = col0 + cc < pc.n ? int(pc.sums.f[(col0 + cc) * (pc.k / 16u) + 16u * b + r]) : 0;
        }
        if (t < TILE_M) {
            const uint at = (row0 + t) * rb + b * BLOCK_BYTES;
            wd[t] = row0 + t < pc.m ? block_scale(pc.w, at) : 0.0;
#ifdef K_AFFINE
            wm[t] = row0 + t < pc.m ? block_min(pc.w, at) : 0.0;
#endif
        } else if (t < TILE_M + TILE_N) {
            const uint cc = t - TILE_M;
            xd[cc] = col0 + cc < pc.n ? pc.scales.f[(col0 + cc) * kb + b] : 0.0;
        }
        barrier();
        int scaled[CELL_ROWS][CELL_COLS], min_sum[CELL_ROWS][CELL_COLS];
        block_sums(r0, c, b, scaled, min_sum);
        for (uint i = 0u; i < CELL_ROWS; ++i) acc[i] = chain(acc[i], wd[r0 + i], wm[r0 + i], xd[c], scaled[i][0], min_sum[i][0]);
        barrier();
    }
    for (uint i = 0u; i < CELL_ROWS; ++i)
        if (row0 + r0 + i < pc.m && col0 + c < pc.n) store(row0 + r0 + i, col0 + c, acc[i]);
}
#endif
