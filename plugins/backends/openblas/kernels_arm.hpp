// The ARM64 kernel table, written once and compiled once per feature level: kernels_neon.cpp (ARMv8.0 Advanced
// SIMD, every 64-bit ARM core), kernels_dotprod.cpp (the SDOT byte dot product, ARMv8.2 phones on) and
// kernels_i8mm.cpp (SDOT and the SMMLA 2x8 by 8x2 matrix multiply, ARMv8.6 phones on). Include it only from
// those files: everything here has internal linkage, so no function built for a newer level is shared with (and
// then run by) code meant for an older core.
//
// The quantized products sum bytes as integers and only then meet the floats, as on x86 (kernels_x86.hpp): a
// 32-element block's products sum in groups of four into eight int32 lanes (two vectors of four), which is what
// SDOT computes in one instruction and ARMv8.0 computes with widening multiplies and pairwise adds. `Products`
// says how a level forms those lanes; every level gives the same integers, and the floats then follow
// blocks::dot_q8's order, so every table is bit-equal to the reference.
#pragma once

#include "exp_table.hpp"
#include "kernels.hpp"

#include <arm_neon.h>

#include "blocks.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <utility>

namespace cellm::openblas::arm {
namespace {

float half(const uint8_t* p) {
    __fp16 h;
    std::memcpy(&h, p, sizeof h);
    return static_cast<float>(h);
}

// The 32 codes of a block as bytes: elements 0-15 in `lo`, 16-31 in `hi`.
struct Codes {
    int8x16_t lo, hi;
};

// 16 bytes of packed 4-bit codes: element j (low nibble of byte j) and element j + 16 (high nibble), GGUF's order.
Codes unpack_nibbles(const uint8_t* packed) {
    const uint8x16_t b = vld1q_u8(packed);
    return {vreinterpretq_s8_u8(vandq_u8(b, vdupq_n_u8(0x0F))), vreinterpretq_s8_u8(vshrq_n_u8(b, 4))};
}

// 16 in every byte whose bit is set in the 32-bit little-endian mask at p (byte j <- bit j): the fifth bits.
Codes fifth_bits(const uint8_t* p) {
    uint32_t bits;
    std::memcpy(&bits, p, sizeof bits);
    const uint8x16_t select = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    auto spread = [&](int byte) {
        return vcombine_u8(vdup_n_u8(static_cast<uint8_t>(bits >> (8 * byte))),
                           vdup_n_u8(static_cast<uint8_t>(bits >> (8 * byte + 8))));
    };
    const uint8x16_t sixteen = vdupq_n_u8(16);
    return {vreinterpretq_s8_u8(vandq_u8(vtstq_u8(spread(0), select), sixteen)),
            vreinterpretq_s8_u8(vandq_u8(vtstq_u8(spread(2), select), sixteen))};
}

Codes offset(Codes c, int8_t by) {
    return {vsubq_s8(c.lo, vdupq_n_s8(by)), vsubq_s8(c.hi, vdupq_n_s8(by))};
}

Codes either(Codes a, Codes b) { return {vorrq_s8(a.lo, b.lo), vorrq_s8(a.hi, b.hi)}; }

// Block layouts (GGUF): Q8_0 = fp16 d + 32 int8; Q4_0 = fp16 d + 16 bytes (code - 8); Q4_1 = fp16 d, fp16 m
// + 16 bytes (d code + m); Q5_0 = fp16 d, 32-bit qh, 16 bytes (code - 16); Q5_1 = fp16 d, fp16 m, qh, 16 bytes.
// Each gives its 32 codes as signed bytes (the unsigned ones are below 32).
struct Q8_0 {
    static constexpr int64_t bytes = 34;
    static constexpr bool affine = false;
    static Codes codes(const uint8_t* b) {
        const auto* q = reinterpret_cast<const int8_t*>(b + 2);
        return {vld1q_s8(q), vld1q_s8(q + 16)};
    }
};
struct Q4_0 {
    static constexpr int64_t bytes = 18;
    static constexpr bool affine = false;
    static Codes codes(const uint8_t* b) { return offset(unpack_nibbles(b + 2), 8); }
};
struct Q4_1 {
    static constexpr int64_t bytes = 20;
    static constexpr bool affine = true;
    static Codes codes(const uint8_t* b) { return unpack_nibbles(b + 4); }
};
struct Q5_0 {
    static constexpr int64_t bytes = 22;
    static constexpr bool affine = false;
    static Codes codes(const uint8_t* b) { return offset(either(unpack_nibbles(b + 6), fifth_bits(b + 2)), 16); }
};
struct Q5_1 {
    static constexpr int64_t bytes = 24;
    static constexpr bool affine = true;
    static Codes codes(const uint8_t* b) { return either(unpack_nibbles(b + 8), fifth_bits(b + 4)); }
};

Codes load_codes(const int8_t* codes) { return {vld1q_s8(codes), vld1q_s8(codes + 16)}; }

// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)): blocks::dot_q8's reduction of its eight lanes.
float reduce(float32x4_t lo, float32x4_t hi) {
    const float32x4_t s = vaddq_f32(lo, hi);
    const float32x2_t t = vadd_f32(vget_low_f32(s), vget_high_f32(s));
    return vget_lane_f32(t, 0) + vget_lane_f32(t, 1);
}

// R rows against C columns at once: each weight block is decoded once for C columns and each activation block
// loaded once for R rows. Every (row, column) pair still accumulates in blocks::dot_q8's order.
template <class Products, class F, int R, int C>
void tile(const uint8_t* rows, uint64_t row_bytes, const Q8Columns& x, float* y, int64_t y_stride) {
    float32x4_t lo[R][C], hi[R][C];
    float mins[R][C];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
            lo[r][c] = hi[r][c] = vdupq_n_f32(0.0f);
            mins[r][c] = 0.0f;
        }
    for (int64_t i = 0; i < x.n_blocks; ++i) {
        Codes a[C];
        float ax[C], as[C];
        for (int c = 0; c < C; ++c) {
            a[c] = load_codes(x.codes + (c * x.n_blocks + i) * 32);
            ax[c] = x.scales[c * x.n_blocks + i];
            as[c] = x.sums[c * x.n_blocks + i];
        }
        for (int r = 0; r < R; ++r) {
            const uint8_t* b = rows + r * row_bytes + i * F::bytes;
            // The same block of the next tile's rows: a task's rows are one stream.
            __builtin_prefetch(b + R * row_bytes);
            const Codes w = F::codes(b);
            const float dw = half(b);
            for (int c = 0; c < C; ++c) {
                const float d = dw * ax[c];
                lo[r][c] = vfmaq_n_f32(lo[r][c], vcvtq_f32_s32(Products::quads(w.lo, a[c].lo)), d);
                hi[r][c] = vfmaq_n_f32(hi[r][c], vcvtq_f32_s32(Products::quads(w.hi, a[c].hi)), d);
                if constexpr (F::affine) mins[r][c] = std::fma(half(b + 2), as[c], mins[r][c]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) y[c * y_stride + r] = reduce(lo[r][c], hi[r][c]) + mins[r][c];
}

// Tiles of R rows x C columns over the whole product, with smaller tiles for the remainders. Rows go in chunks
// small enough to stay in cache while every column passes over them.
template <class Products, class F, int R, int C>
void rows_dot(const void* rows, uint64_t row_bytes, int64_t n_rows, const Q8Columns& x, int64_t n_cols, float* y,
              int64_t y_stride) {
    const int64_t chunk = std::max<int64_t>(R, static_cast<int64_t>((32 * 1024) / row_bytes) / R * R);
    for (int64_t r0 = 0; r0 < n_rows; r0 += chunk) {
        const auto* base = static_cast<const uint8_t*>(rows) + r0 * row_bytes;
        const int64_t chunk_rows = std::min(chunk, n_rows - r0);
        for (int64_t c = 0; c < n_cols;) {
            const Q8Columns cols{x.codes + c * x.n_blocks * 32, x.scales + c * x.n_blocks, x.sums + c * x.n_blocks,
                                 x.offsets + c * x.n_blocks * 8, x.n_blocks, nullptr};
            float* out = y + c * y_stride + r0;
            auto pass = [&]<int Cols>() {
                int64_t r = 0;
                for (; r + R <= chunk_rows; r += R)
                    tile<Products, F, R, Cols>(base + r * row_bytes, row_bytes, cols, out + r, y_stride);
                for (; r < chunk_rows; ++r) tile<Products, F, 1, Cols>(base + r * row_bytes, row_bytes, cols, out + r, y_stride);
            };
            const int64_t step = n_cols - c >= C ? C : 1;
            if (step == C) pass.template operator()<C>();
            else pass.template operator()<1>();
            c += step;
        }
    }
}

template <class F>
void dequantize(const void* row, float* out, int64_t n_blocks) {
    const auto* b = static_cast<const uint8_t*>(row);
    for (int64_t i = 0; i < n_blocks; ++i, b += F::bytes, out += 32) {
        const Codes q = F::codes(b);
        const float32x4_t d = vdupq_n_f32(half(b));
        const int8x16_t halves[2] = {q.lo, q.hi};
        for (int h = 0; h < 2; ++h) {
            const int16x8_t wide[2] = {vmovl_s8(vget_low_s8(halves[h])), vmovl_high_s8(halves[h])};
            for (int p = 0; p < 4; ++p) {
                const int32x4_t v = p % 2 == 0 ? vmovl_s16(vget_low_s16(wide[p / 2])) : vmovl_high_s16(wide[p / 2]);
                // Multiply, then add the min: the reference rounds twice (and adds nothing for the symmetric
                // formats, so a -0 stays -0).
                float32x4_t value = vmulq_f32(vcvtq_f32_s32(v), d);
                if constexpr (F::affine) value = vaddq_f32(value, vdupq_n_f32(half(b + 2)));
                vst1q_f32(out + 16 * h + 4 * p, value);
            }
        }
    }
}

// blocks::quantize_q8 with the same float operations: the largest magnitude (NaN skipped), codes x * (127 /
// amax) rounded to nearest even, scale and scaled sum stored as halves; and -128 times each quad's code sum.
void quantize_q8(const float* x, int64_t n, int8_t* codes, float* scales, float* sums, int32_t* offsets) {
    for (int64_t b = 0; b < n / 32; ++b, x += 32, codes += 32, offsets += 8) {
        float32x4_t v[8];
        float32x4_t m = vdupq_n_f32(0.0f);
        for (int p = 0; p < 8; ++p) {
            v[p] = vld1q_f32(x + 4 * p);
            m = vmaxnmq_f32(m, vabsq_f32(v[p]));
        }
        const float amax = vmaxnmvq_f32(m);
        const float d = amax / 127.0f;
        const float32x4_t id = vdupq_n_f32(amax != 0.0f ? 127.0f / amax : 0.0f);
        int16x8_t q16[4];
        for (int p = 0; p < 4; ++p)
            q16[p] = vcombine_s16(vmovn_s32(vcvtnq_s32_f32(vmulq_f32(v[2 * p], id))),
                                  vmovn_s32(vcvtnq_s32_f32(vmulq_f32(v[2 * p + 1], id))));
        const int8x16_t lo = vcombine_s8(vmovn_s16(q16[0]), vmovn_s16(q16[1]));
        const int8x16_t hi = vcombine_s8(vmovn_s16(q16[2]), vmovn_s16(q16[3]));
        vst1q_s8(codes, lo);
        vst1q_s8(codes + 16, hi);
        const int32x4_t quads_lo = vpaddlq_s16(vpaddlq_s8(lo)), quads_hi = vpaddlq_s16(vpaddlq_s8(hi));
        vst1q_s32(offsets, vnegq_s32(vshlq_n_s32(quads_lo, 7)));
        vst1q_s32(offsets + 4, vnegq_s32(vshlq_n_s32(quads_hi, 7)));
        const int32_t total = vaddvq_s32(vaddq_s32(quads_lo, quads_hi));
        scales[b] = blocks::fp16_to_fp32(blocks::fp32_to_fp16(d));
        sums[b] = blocks::fp16_to_fp32(blocks::fp32_to_fp16(d * static_cast<float>(total)));
    }
}

// blocks::quantize_q8_k with the same float operations: the first element of the largest magnitude gives the
// scale's sign, codes min(127, x * iscale rounded to nearest even) (a NaN product gives 127, as std::min does),
// and the sum of each run of 16 codes.
void quantize_q8_k(const float* x, int64_t n, int8_t* codes, float* scales, int16_t* sums) {
    for (int64_t b = 0; b < n / 256; ++b, x += 256, codes += 256, sums += 16) {
        float32x4_t m = vdupq_n_f32(0.0f);
        for (int i = 0; i < 256; i += 4) m = vmaxnmq_f32(m, vabsq_f32(vld1q_f32(x + i)));
        const float amax = vmaxnmvq_f32(m);
        float max = 0.0f;
        if (amax != 0.0f) {
            const float32x4_t target = vdupq_n_f32(amax);
            for (int i = 0; i < 256; i += 4)
                if (vmaxvq_u32(vceqq_f32(vabsq_f32(vld1q_f32(x + i)), target)) != 0) {
                    int j = i;
                    while (std::fabs(x[j]) != amax) ++j;
                    max = x[j];
                    break;
                }
        }
        const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
        scales[b] = amax != 0.0f ? 1.0f / iscale : 0.0f;
        const float32x4_t factor = vdupq_n_f32(iscale), cap = vdupq_n_f32(127.0f);
        for (int g = 0; g < 16; ++g) {
            int16x4_t q[4];
            for (int p = 0; p < 4; ++p) {
                const float32x4_t rounded = vminnmq_f32(vrndnq_f32(vmulq_f32(factor, vld1q_f32(x + 16 * g + 4 * p))), cap);
                q[p] = vmovn_s32(vcvtq_s32_f32(rounded));
            }
            const int8x16_t bytes = vcombine_s8(vmovn_s16(vcombine_s16(q[0], q[1])), vmovn_s16(vcombine_s16(q[2], q[3])));
            vst1q_s8(codes + 16 * g, bytes);
            sums[g] = static_cast<int16_t>(vaddlvq_s8(bytes));
        }
    }
}

// ---- K-quants against Q8_K columns (blocks::dot_q8_k) ------------------------------------------------------
//
// A block of 256 goes as eight sub-blocks of 32. Each sub-block's codes are decoded to bytes (Q4_K and Q5_K
// unsigned, Q6_K with its -32 applied), their products with the activation codes summed as integers and
// multiplied by their 6- or 8-bit scale; a block's integers then add to the one integer the reference computes,
// and only that meets the floats. The integers are exact in any order, so every level gives the same ones.

// 16 in every byte of h whose bit J is set.
template <int J>
uint8x16_t sixteen_at(uint8x16_t h) {
    if constexpr (J < 4) h = vshlq_n_u8(h, 4 - J);
    if constexpr (J > 4) h = vshrq_n_u8(h, J - 4);
    return vandq_u8(h, vdupq_n_u8(16));
}

// The scales of a block's sixteen runs of 16 (Q4_K and Q5_K repeat each sub-block's), and for Q4_K and Q5_K the
// mins of its eight sub-blocks.
struct KScales {
    int32_t run[16];
    int16x8_t mins;
};

// Q4_K and Q5_K (blocks.cpp KAffine): d, dmin, 12 bytes of 6-bit scales and mins, [Q5_K: qh[32]], qs[128].
template <int Bits>
struct KAffine {
    static constexpr int64_t bytes = Bits == 5 ? 176 : 144;
    static constexpr bool affine = true;
    static void scales(const uint8_t* b, KScales& k) {
        const uint8_t* s = b + 4;
        int16_t mins[8];
        for (int j = 0; j < 8; ++j) {
            int scale, min;
            if (j < 4) {
                scale = s[j] & 63;
                min = s[j + 4] & 63;
            } else {
                scale = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
                min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
            }
            k.run[2 * j] = k.run[2 * j + 1] = scale;
            mins[j] = static_cast<int16_t>(min);
        }
        k.mins = vld1q_s16(mins);
    }
    // Sub-blocks are decoded a pair at a time, the pair that shares qs[32 G .. 32 G + 31]: the low nibbles are
    // sub-block 2G, the high ones 2G + 1; Q5_K's fifth bits are bits 2G and 2G + 1 of qh[0 .. 31].
    static constexpr int group = 2;
    template <int G>
    static void decode(const uint8_t* b, Codes (&w)[group]) {
        const uint8_t* qs = b + (Bits == 5 ? 48 : 16) + 32 * G;
        const uint8x16_t q0 = vld1q_u8(qs), q1 = vld1q_u8(qs + 16), low4 = vdupq_n_u8(0x0F);
        uint8x16_t c[2][2] = {{vandq_u8(q0, low4), vandq_u8(q1, low4)}, {vshrq_n_u8(q0, 4), vshrq_n_u8(q1, 4)}};
        if constexpr (Bits == 5) {
            const uint8x16_t h0 = vld1q_u8(b + 16), h1 = vld1q_u8(b + 32);
            c[0][0] = vorrq_u8(c[0][0], sixteen_at<2 * G>(h0));
            c[0][1] = vorrq_u8(c[0][1], sixteen_at<2 * G>(h1));
            c[1][0] = vorrq_u8(c[1][0], sixteen_at<2 * G + 1>(h0));
            c[1][1] = vorrq_u8(c[1][1], sixteen_at<2 * G + 1>(h1));
        }
        for (int s = 0; s < 2; ++s) w[s] = {vreinterpretq_s8_u8(c[s][0]), vreinterpretq_s8_u8(c[s][1])};
    }
    static float d(const uint8_t* b) { return half(b); }
    static float dmin(const uint8_t* b) { return half(b + 2); }
};

// Q6_K (blocks.cpp Q6K): ql[128], qh[64], int8 scales[16], d. Sub-block j = 4h + q of half h: the nibbles of
// ql[64h + 32 (q % 2) ..] (low for q < 2) below bits 2q, 2q + 1 of qh[32h ..], minus 32.
struct Q6K {
    static constexpr int64_t bytes = 210;
    static constexpr bool affine = false;
    static void scales(const uint8_t* b, KScales& k) {
        for (int j = 0; j < 16; ++j) k.run[j] = static_cast<int8_t>(b[192 + j]);
        k.mins = vdupq_n_s16(0);
    }
    // Sub-blocks are decoded a half at a time: half G's four share ql[64 G .. 64 G + 63] and qh[32 G .. 32 G + 31].
    static constexpr int group = 4;
    template <int G>
    static void decode(const uint8_t* b, Codes (&w)[group]) {
        const uint8_t* ql = b + 64 * G;
        const uint8x16_t l[4] = {vld1q_u8(ql), vld1q_u8(ql + 16), vld1q_u8(ql + 32), vld1q_u8(ql + 48)};
        const uint8x16_t h[2] = {vld1q_u8(b + 128 + 32 * G), vld1q_u8(b + 128 + 32 * G + 16)};
        const uint8x16_t low4 = vdupq_n_u8(0x0F), top2 = vdupq_n_u8(0x30);
        [&]<int... Q>(std::integer_sequence<int, Q...>) {
            auto one = [&]<int q>() {
                uint8x16_t c[2];
                for (int part = 0; part < 2; ++part) {
                    const uint8x16_t packed = l[2 * (q % 2) + part];
                    const uint8x16_t low = q < 2 ? vandq_u8(packed, low4) : vshrq_n_u8(packed, 4);
                    // Bits 2q, 2q + 1 of qh moved to bits 4, 5.
                    uint8x16_t high = h[part];
                    if constexpr (q < 2) high = vshlq_n_u8(high, 4 - 2 * q);
                    if constexpr (q == 3) high = vshrq_n_u8(high, 2);
                    c[part] = vorrq_u8(low, vandq_u8(high, top2));
                }
                w[q] = {vsubq_s8(vreinterpretq_s8_u8(c[0]), vdupq_n_s8(32)), vsubq_s8(vreinterpretq_s8_u8(c[1]), vdupq_n_s8(32))};
            };
            (one.template operator()<Q>(), ...);
        }(std::make_integer_sequence<int, 4>{});
    }
    static float d(const uint8_t* b) { return half(b + 208); }
    static float dmin(const uint8_t*) { return 0.0f; }
};

int32_t min_products(const KScales& k, const int16_t* sums) {
    const int16x8_t pairs = vpaddq_s16(vld1q_s16(sums), vld1q_s16(sums + 8));
    return vaddvq_s32(vmlal_high_s16(vmull_s16(vget_low_s16(pairs), vget_low_s16(k.mins)), pairs, k.mins));
}

// One block's contribution, in blocks::dot_q8k_row's float order.
template <class F>
float k_block(float acc, const uint8_t* b, int32_t scaled, int32_t min_sum, float dx) {
    if constexpr (F::affine) {
        const float mins = (F::dmin(b) * dx) * static_cast<float>(min_sum);
        return acc + std::fma(F::d(b) * dx, static_cast<float>(scaled), -mins);
    } else {
        return std::fma(F::d(b) * dx, static_cast<float>(scaled), acc);
    }
}

// One row against C columns: each sub-block is decoded once for the C columns (a pair or a half of them at a
// time, so that they share their loads).
template <class Products, class F, int C>
void k_row(const uint8_t* row, const Q8KColumns& x, float* y, int64_t y_stride) {
    float acc[C] = {};
    KScales k;
    for (int64_t i = 0; i < x.n_blocks; ++i) {
        const uint8_t* b = row + i * F::bytes;
        F::scales(b, k);
        int32x4_t scaled[C];
        for (int c = 0; c < C; ++c) scaled[c] = vdupq_n_s32(0);
        [&]<int... G>(std::integer_sequence<int, G...>) {
            auto one = [&]<int g>() {
                Codes w[F::group];
                F::template decode<g>(b, w);
                for (int s = 0; s < F::group; ++s) {
                    const int j = g * F::group + s;
                    for (int c = 0; c < C; ++c) {
                        const Codes a = load_codes(x.codes + (c * x.n_blocks + i) * 256 + 32 * j);
                        scaled[c] = vmlaq_n_s32(scaled[c], Products::quads(w[s].lo, a.lo), k.run[2 * j]);
                        scaled[c] = vmlaq_n_s32(scaled[c], Products::quads(w[s].hi, a.hi), k.run[2 * j + 1]);
                    }
                }
            };
            (one.template operator()<G>(), ...);
        }(std::make_integer_sequence<int, 8 / F::group>{});
        for (int c = 0; c < C; ++c) {
            const int64_t block = c * x.n_blocks + i;
            const int32_t min_sum = F::affine ? min_products(k, x.sums + block * 16) : 0;
            acc[c] = k_block<F>(acc[c], b, vaddvq_s32(scaled[c]), min_sum, x.scales[block]);
        }
    }
    for (int c = 0; c < C; ++c) y[c * y_stride] = acc[c];
}

Q8KColumns k_columns_from(const Q8KColumns& x, int64_t c) {
    return {x.codes + c * x.n_blocks * 256, x.scales + c * x.n_blocks, x.sums + c * x.n_blocks * 16, x.n_blocks,
            nullptr};
}

// Every row against every column, C columns to a pass (Kernels::dot_q8k).
template <class Products, class F, int C>
void k_rows_dot(const void* rows, uint64_t row_bytes, int64_t n_rows, const Q8KColumns& x, int64_t n_cols, float* y,
                int64_t y_stride) {
    for (int64_t r = 0; r < n_rows; ++r) {
        const auto* row = static_cast<const uint8_t*>(rows) + r * row_bytes;
        int64_t c = 0;
        for (; c + C <= n_cols; c += C) k_row<Products, F, C>(row, k_columns_from(x, c), y + c * y_stride + r, y_stride);
        for (; c < n_cols; ++c) k_row<Products, F, 1>(row, k_columns_from(x, c), y + c * y_stride + r, y_stride);
    }
}

// ---- Float loops (attention, float weights) ---------------------------------------------------------------

float32x4_t load_halves(const uint16_t* h) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h))); }

// cpu::dot_in_lanes: eight fused lanes as two vectors, reduced in its order, the tail multiplied and added one by
// one. `four(i)` loads b[i .. i + 3] as floats, `one(i)` b[i].
template <class Four, class One>
float dot_lanes(const float* a, Four four, One one, int64_t n) {
    float32x4_t lo = vdupq_n_f32(0.0f), hi = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        lo = vfmaq_f32(lo, vld1q_f32(a + i), four(i));
        hi = vfmaq_f32(hi, vld1q_f32(a + i + 4), four(i + 4));
    }
    float sum = reduce(lo, hi);
    for (; i < n; ++i) sum += a[i] * one(i);
    return sum;
}

float dot_f32(const float* a, const float* b, int64_t n) {
    return dot_lanes(a, [b](int64_t i) { return vld1q_f32(b + i); }, [b](int64_t i) { return b[i]; }, n);
}

float dot_f16(const float* a, const uint16_t* b, int64_t n) {
    return dot_lanes(a, [b](int64_t i) { return load_halves(b + i); },
                     [b](int64_t i) { return blocks::fp16_to_fp32(b[i]); }, n);
}

// y += a x as a multiply, then an add.
void axpy_f32(float a, const float* x, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vaddq_f32(vld1q_f32(y + i), vmulq_n_f32(vld1q_f32(x + i), a)));
    for (; i < n; ++i) y[i] += a * x[i];
}

void axpy_f16(float a, const uint16_t* x, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vaddq_f32(vld1q_f32(y + i), vmulq_n_f32(load_halves(x + i), a)));
    for (; i < n; ++i) y[i] += a * blocks::fp16_to_fp32(x[i]);
}

// The hardware conversion rounds to nearest even as blocks::fp32_to_fp16 does, but keeps a NaN's payload where
// the reference stores the one quiet NaN 0x7e00 (with the sign): NaN lanes take that instead.
uint16x4_t halves_of(float32x4_t v) {
    const uint16x4_t converted = vreinterpret_u16_f16(vcvt_f16_f32(v));
    const uint16x4_t nan = vmovn_u32(vmvnq_u32(vceqq_f32(v, v)));
    const uint16x4_t quiet = vorr_u16(vand_u16(converted, vdup_n_u16(0x8000)), vdup_n_u16(0x7e00));
    return vbsl_u16(nan, quiet, converted);
}

void to_f16(const float* x, uint16_t* y, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(y + i, halves_of(vld1q_f32(x + i)));
    for (; i < n; ++i) y[i] = blocks::fp32_to_fp16(x[i]);
}

void round_f16(const float* x, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vcvt_f32_f16(vreinterpret_f16_u16(halves_of(vld1q_f32(x + i)))));
    for (; i < n; ++i) y[i] = blocks::fp16_to_fp32(blocks::fp32_to_fp16(x[i]));
}

// expf as ARM64's glibc computes it (its table-driven expf, in double): x * 32 / ln 2 = k + r with k rounded to
// the nearest integer, ties away from zero (glibc's aarch64 build rounds with FRINTA and FCVTAS), 2^(k/32) from a
// table of 32 and the exponent bits of k, and a cubic in r, its steps fused as that build's compiler fuses them;
// one rounding to float. Lanes outside |x| < 88 (overflow, underflow, inf, NaN) take std::exp. libm_exp() checks
// at run time that this process's libm is that one.
float64x2_t exp_lanes(float64x2_t xd, const ExpTable& table) {
    const float64x2_t z = vmulq_f64(vdupq_n_f64(0x1.71547652b82fep+0 * 32), xd);
    const float64x2_t r = vsubq_f64(z, vrndaq_f64(z));
    const int64x2_t ki = vcvtaq_s64_f64(z);
    const uint64x2_t at = vandq_u64(vreinterpretq_u64_s64(ki), vdupq_n_u64(31));
    const uint64x2_t t = vaddq_u64(vcombine_u64(vld1_u64(table.t + vgetq_lane_u64(at, 0)), vld1_u64(table.t + vgetq_lane_u64(at, 1))),
                                   vshlq_n_u64(vreinterpretq_u64_s64(ki), 47));
    const float64x2_t high = vfmaq_f64(vdupq_n_f64(0x1.ebfce50fac4f3p-3 / (32.0 * 32.0)),
                                       vdupq_n_f64(0x1.c6af84b912394p-5 / (32.0 * 32.0 * 32.0)), r);
    float64x2_t y = vfmaq_f64(vdupq_n_f64(1.0), vdupq_n_f64(0x1.62e42ff0c52d6p-1 / 32.0), r);
    y = vfmaq_f64(y, high, vmulq_f64(r, r));
    return vmulq_f64(y, vreinterpretq_f64_u64(t));
}

void exp_f32(const float* x, float* y, int64_t n) {
    static const ExpTable table;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t v = vld1q_f32(x + i);
        // NaN compares false, so it leaves with the large values.
        if (vminvq_u32(vcaltq_f32(v, vdupq_n_f32(88.0f))) == 0) {
            for (int j = 0; j < 4; ++j) y[i + j] = std::exp(x[i + j]);
            continue;
        }
        const float32x2_t low = vcvt_f32_f64(exp_lanes(vcvt_f64_f32(vget_low_f32(v)), table));
        vst1q_f32(y + i, vcvt_high_f32_f64(low, exp_lanes(vcvt_high_f64_f32(v), table)));
    }
    for (; i < n; ++i) y[i] = std::exp(x[i]);
}

// Attention over an F16 pool for the query heads that share one KV head (Kernels::dots_f16, weighted_sum_f16):
// each K or V row is converted once for up to four heads at a time, and every head's sums keep the one-row
// loops' order, so the results are theirs bit for bit.
template <int G>
void dots_heads(const float* q, const uint16_t* base, const int64_t* rows, int64_t count, int64_t n, float* scores) {
    for (int64_t j = 0; j < count; ++j) {
        const uint16_t* r = base + rows[j];
        float32x4_t lo[G], hi[G];
        for (int g = 0; g < G; ++g) lo[g] = hi[g] = vdupq_n_f32(0.0f);
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            const float32x4_t k_lo = load_halves(r + i), k_hi = load_halves(r + i + 4);
            for (int g = 0; g < G; ++g) {
                lo[g] = vfmaq_f32(lo[g], vld1q_f32(q + g * n + i), k_lo);
                hi[g] = vfmaq_f32(hi[g], vld1q_f32(q + g * n + i + 4), k_hi);
            }
        }
        for (int g = 0; g < G; ++g) {
            float sum = reduce(lo[g], hi[g]);
            for (int64_t t = i; t < n; ++t) sum += q[g * n + t] * blocks::fp16_to_fp32(r[t]);
            scores[g * count + j] = sum;
        }
    }
}

// Calls f.template operator()<G>(h) for heads h .. h + G - 1, G = 4 while four are left, then 2, then 1.
template <class F>
void by_head_chunks(int64_t heads, F&& f) {
    int64_t h = 0;
    for (; h + 4 <= heads; h += 4) f.template operator()<4>(h);
    for (; h + 2 <= heads; h += 2) f.template operator()<2>(h);
    for (; h < heads; ++h) f.template operator()<1>(h);
}

void dots_f16(const float* q, int64_t heads, const uint16_t* base, const int64_t* rows, int64_t count, int64_t n,
              float* scores) {
    by_head_chunks(heads, [&]<int G>(int64_t h) { dots_heads<G>(q + h * n, base, rows, count, n, scores + h * count); });
}

template <int G>
void sum_heads(const float* weights, const uint16_t* base, const int64_t* rows, int64_t count, int64_t n,
               float* out) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float32x4_t lo[G], hi[G];
        for (int g = 0; g < G; ++g) lo[g] = hi[g] = vdupq_n_f32(0.0f);
        for (int64_t j = 0; j < count; ++j) {
            const uint16_t* r = base + rows[j] + i;
            const float32x4_t v_lo = load_halves(r), v_hi = load_halves(r + 4);
            for (int g = 0; g < G; ++g) {
                const float w = weights[g * count + j];
                lo[g] = vaddq_f32(lo[g], vmulq_n_f32(v_lo, w));
                hi[g] = vaddq_f32(hi[g], vmulq_n_f32(v_hi, w));
            }
        }
        for (int g = 0; g < G; ++g) {
            vst1q_f32(out + g * n + i, lo[g]);
            vst1q_f32(out + g * n + i + 4, hi[g]);
        }
    }
    for (; i < n; ++i)
        for (int g = 0; g < G; ++g) {
            float sum = 0.0f;
            for (int64_t j = 0; j < count; ++j) sum += weights[g * count + j] * blocks::fp16_to_fp32(base[rows[j] + i]);
            out[g * n + i] = sum;
        }
}

void weighted_sum_f16(const float* weights, int64_t heads, const uint16_t* base, const int64_t* rows, int64_t count,
                      int64_t n, float* out) {
    by_head_chunks(heads, [&]<int G>(int64_t h) { sum_heads<G>(weights + h * count, base, rows, count, n, out + h * n); });
}

// The table for one feature level: `Products` forms the integer lanes, R x C is the tile of rows and columns of
// the 32-element formats, KC the columns a K-quant block is decoded once for.
template <class Products, int R, int C, int KC>
constexpr Kernels table(const char* isa) {
    return {
        isa,
        quantize_q8,
        {rows_dot<Products, Q8_0, R, C>, rows_dot<Products, Q4_0, R, C>, rows_dot<Products, Q4_1, R, C>,
         rows_dot<Products, Q5_0, R, C>, rows_dot<Products, Q5_1, R, C>},
        {dequantize<Q8_0>, dequantize<Q4_0>, dequantize<Q4_1>, dequantize<Q5_0>, dequantize<Q5_1>},
        nullptr,
        quantize_q8_k,
        {k_rows_dot<Products, KAffine<4>, KC>, k_rows_dot<Products, KAffine<5>, KC>, k_rows_dot<Products, Q6K, KC>},
        dot_f32,
        dot_f16,
        axpy_f32,
        axpy_f16,
        round_f16,
        to_f16,
        exp_f32,
        dots_f16,
        weighted_sum_f16,
    };
}

}  // namespace
}  // namespace cellm::openblas::arm
