// The x86 kernel table, written once and compiled once per instruction set: kernels_avx2.cpp (AVX2 + FMA +
// F16C, x86-64 since Haswell) and kernels_avx512.cpp (AVX-512 with VNNI, at 256-bit width for its 32 registers).
// Include it only from those files: everything here has internal linkage, so no function compiled with wider
// instructions can be shared with (and then run by) code meant for an older CPU.
//
// Quantized dot products follow ggml's scheme: a block's 32 weight codes and 32 activation codes multiply as
// bytes (unsigned x signed, with the sign moved onto the activations for signed weights), the products sum in
// groups of four into eight int32 lanes, and only then meet the block's two scales in float. `Products` says
// how an instruction set forms those lanes from unsigned weights, and from signed ones (either moving the sign
// onto the activations, or multiplying w + 128 and adding the column's offsets); every choice gives the same
// integers.
#pragma once

#include "exp_table.hpp"
#include "kernels.hpp"

#include <immintrin.h>

#include "blocks.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace cellm::openblas::x86 {
namespace {
float half(const void* p) {
    uint16_t h;
    std::memcpy(&h, p, sizeof h);
    return _cvtsh_ss(h);
}

float hsum(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

// hsum of a, b, c and d in lanes 0 to 3, each bit-equal to hsum's: the same adds of the same operands, four
// vectors to an instruction.
__m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
    // Per 128-bit half, lanes l0+l4 .. l3+l7 of a and b (lo and hi half), then of c and d.
    const __m256 ab = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
    const __m256 cd = _mm256_add_ps(_mm256_permute2f128_ps(c, d, 0x20), _mm256_permute2f128_ps(c, d, 0x31));
    // (l0+l4)+(l2+l6) and (l1+l5)+(l3+l7): of a and c in the low half, of b and d in the high one.
    const __m256 pairs = _mm256_add_ps(_mm256_shuffle_ps(ab, cd, 0x44), _mm256_shuffle_ps(ab, cd, 0xee));
    const __m256 sums = _mm256_hadd_ps(pairs, pairs);  // a, c, a, c | b, d, b, d
    return _mm_unpacklo_ps(_mm256_castps256_ps128(sums), _mm256_extractf128_ps(sums, 1));
}

// 16 bytes of packed 4-bit codes as 32 bytes: element j (low nibble of byte j) in lane j, element j + 16 (high
// nibble) in lane j + 16, GGUF's order.
__m256i unpack_nibbles(const uint8_t* packed) {
    // Both halves from one load; the high half shifts right by 4.
    const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed)));
    return _mm256_and_si256(_mm256_srlv_epi32(both, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0F));
}

// The fp16 scale at the start of a block (lane 0) and, for affine blocks, the min after it (lane 1), from one
// 32-bit load; every block has at least two more bytes after its scale.
__m128 block_halves(const uint8_t* b) {
    int32_t both;
    std::memcpy(&both, b, sizeof both);
    return _mm_cvtph_ps(_mm_cvtsi32_si128(both));
}

__m256i load_codes(const int8_t* codes) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes)); }

// Block layouts (GGUF): Q8_0 = fp16 d + 32 int8; Q4_0 = fp16 d + 16 bytes (code - 8); Q4_1 = fp16 d, fp16 m
// + 16 bytes (d code + m); Q5_0 and Q5_1 below. Each format gives its 32 codes as bytes, and whether they are
// unsigned.
struct Q8_0 {
    static constexpr int64_t bytes = 34;
    static constexpr bool affine = false, is_unsigned = false;
    static __m256i codes(const uint8_t* b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)); }
};
struct Q4_0 {
    static constexpr int64_t bytes = 18;
    static constexpr bool affine = false, is_unsigned = false;
    static __m256i codes(const uint8_t* b) { return _mm256_sub_epi8(unpack_nibbles(b + 2), _mm256_set1_epi8(8)); }
};
struct Q4_1 {
    static constexpr int64_t bytes = 20;
    static constexpr bool affine = true, is_unsigned = true;
    static __m256i codes(const uint8_t* b) { return unpack_nibbles(b + 4); }
};

// 16 in every byte whose bit is set in the 32-bit little-endian mask at p (byte j <- bit j): the fifth bits.
__m256i fifth_bits(const uint8_t* p) {
    uint32_t bits;
    std::memcpy(&bits, p, sizeof bits);
    // Byte j takes mask byte j / 8, then all ones iff its bit j % 8 is set.
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                                               _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                                 0x0101010101010101, 0x0000000000000000));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)),
                                          _mm256_set1_epi64x(-1));
    return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

// Q5_0 = fp16 d, 32-bit qh, 16 bytes (code - 16); Q5_1 = fp16 d, fp16 m, qh, 16 bytes (d code + m).
struct Q5_0 {
    static constexpr int64_t bytes = 22;
    static constexpr bool affine = false, is_unsigned = false;
    static __m256i codes(const uint8_t* b) {
        return _mm256_sub_epi8(_mm256_or_si256(unpack_nibbles(b + 6), fifth_bits(b + 2)), _mm256_set1_epi8(16));
    }
};
struct Q5_1 {
    static constexpr int64_t bytes = 24;
    static constexpr bool affine = true, is_unsigned = true;
    static __m256i codes(const uint8_t* b) { return _mm256_or_si256(unpack_nibbles(b + 8), fifth_bits(b + 4)); }
};

// R rows against C columns at once: each weight block is decoded once for C columns and each activation block
// loaded once for R rows, and the R*C independent accumulators hide the FMA latency. Every (row, column) pair
// still accumulates in blocks::dot_q8's order, so tiling never changes a bit.
template <class Products, class F, int R, int C, bool Prefetch>
void tile(const uint8_t* rows, uint64_t row_bytes, const Q8Columns& x, float* y, int64_t y_stride) {
    static_assert(C <= 4, "the affine mins keep one lane per column in a 4-lane register");
    __m256 acc[R][C];
    __m128 mins[R];  // lane c: the running sum of min * activation block sum of column c
    for (int r = 0; r < R; ++r) {
        mins[r] = _mm_setzero_ps();
        for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < x.n_blocks; ++i) {
        // Per column: the activation codes and scale of block i, loaded once for all R rows.
        __m256i a[C];
        __m256 ax[C];
        for (int c = 0; c < C; ++c) {
            a[c] = load_codes(x.codes + (c * x.n_blocks + i) * 32);
            ax[c] = _mm256_broadcast_ss(x.scales + c * x.n_blocks + i);
        }
        // Built in registers: four scalar stores read back as a vector would stall on store forwarding.
        auto sum_of = [&](int c) { return c < C ? x.sums[c * x.n_blocks + i] : 0.0f; };
        const __m128 sums = F::affine ? _mm_setr_ps(sum_of(0), sum_of(1), sum_of(2), sum_of(3)) : _mm_setzero_ps();
        for (int r = 0; r < R; ++r) {
            const uint8_t* b = rows + r * row_bytes + i * F::bytes;
            // The same block of the next tile's row: the rows of a task are one contiguous stream, and asking
            // early keeps enough memory requests in flight to use the bandwidth.
            if constexpr (Prefetch) _mm_prefetch(reinterpret_cast<const char*>(b + R * row_bytes), _MM_HINT_T1);
            const __m256i w = F::codes(b);
            const __m128 halves = block_halves(b);
            const __m256 dw = _mm256_broadcastss_ps(halves);
            if constexpr (F::affine) mins[r] = _mm_fmadd_ps(_mm_permute_ps(halves, 0x55), sums, mins[r]);
            for (int c = 0; c < C; ++c) {
                const __m256i lanes = F::is_unsigned
                                          ? Products::lanes(w, a[c])
                                          : Products::signed_lanes(w, a[c], x.offsets + (c * x.n_blocks + i) * 8);
                acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dw, ax[c]), _mm256_cvtepi32_ps(lanes), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        float m[4];
        _mm_storeu_ps(m, mins[r]);
        for (int c = 0; c < C; ++c) y[c * y_stride + r] = hsum(acc[r][c]) + m[c];
    }
}

// Tiles of R rows x C columns over the whole product, with smaller tiles for the remainders. Rows go in chunks
// small enough to stay in cache while every column passes over them; only the first columns' pass streams a
// chunk from memory, so only it prefetches.
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
            auto pass = [&]<int Cols, bool Prefetch>() {
                int64_t r = 0;
                for (; r + R <= chunk_rows; r += R)
                    tile<Products, F, R, Cols, Prefetch>(base + r * row_bytes, row_bytes, cols, out + r, y_stride);
                for (; r < chunk_rows; ++r)
                    tile<Products, F, 1, Cols, Prefetch>(base + r * row_bytes, row_bytes, cols, out + r, y_stride);
            };
            const int64_t step = n_cols - c >= C ? C : 1;
            if (step == C) c == 0 ? pass.template operator()<C, true>() : pass.template operator()<C, false>();
            else c == 0 ? pass.template operator()<1, true>() : pass.template operator()<1, false>();
            c += step;
        }
    }
}

// Eight codes of bytes as floats.
__m256 widen(__m128i eight_bytes, bool is_signed) {
    return _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(eight_bytes) : _mm256_cvtepu8_epi32(eight_bytes));
}

void store_block(__m256i codes, bool is_signed, __m256 d, __m256 m, float* out) {
    const __m128i lo = _mm256_castsi256_si128(codes), hi = _mm256_extracti128_si256(codes, 1);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int p = 0; p < 4; ++p) _mm256_storeu_ps(out + 8 * p, _mm256_add_ps(_mm256_mul_ps(widen(parts[p], is_signed), d), m));
}

void dequantize_q8_0(const void* row, float* out, int64_t n_blocks) {
    const auto* b = static_cast<const uint8_t*>(row);
    for (int64_t i = 0; i < n_blocks; ++i, b += Q8_0::bytes, out += 32)
        store_block(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)), true, _mm256_set1_ps(half(b)),
                    _mm256_setzero_ps(), out);
}

void dequantize_q4_0(const void* row, float* out, int64_t n_blocks) {
    const auto* b = static_cast<const uint8_t*>(row);
    for (int64_t i = 0; i < n_blocks; ++i, b += Q4_0::bytes, out += 32)
        store_block(_mm256_sub_epi8(unpack_nibbles(b + 2), _mm256_set1_epi8(8)), true, _mm256_set1_ps(half(b)),
                    _mm256_setzero_ps(), out);
}

void dequantize_q4_1(const void* row, float* out, int64_t n_blocks) {
    const auto* b = static_cast<const uint8_t*>(row);
    for (int64_t i = 0; i < n_blocks; ++i, b += Q4_1::bytes, out += 32)
        store_block(unpack_nibbles(b + 4), false, _mm256_set1_ps(half(b)), _mm256_set1_ps(half(b + 2)), out);
}

void dequantize_q5_0(const void* row, float* out, int64_t n_blocks) {
    const auto* b = static_cast<const uint8_t*>(row);
    for (int64_t i = 0; i < n_blocks; ++i, b += Q5_0::bytes, out += 32)
        store_block(Q5_0::codes(b), true, _mm256_set1_ps(half(b)), _mm256_setzero_ps(), out);
}

void dequantize_q5_1(const void* row, float* out, int64_t n_blocks) {
    const auto* b = static_cast<const uint8_t*>(row);
    for (int64_t i = 0; i < n_blocks; ++i, b += Q5_1::bytes, out += 32)
        store_block(Q5_1::codes(b), false, _mm256_set1_ps(half(b)), _mm256_set1_ps(half(b + 2)), out);
}

// blocks::quantize_q8 with the same float operations: the largest magnitude, codes rounded to nearest even
// from x * (127 / amax), scale and scaled sum stored as halves.
void quantize_q8(const float* x, int64_t n, int8_t* codes, float* scales, float* sums, int32_t* offsets) {
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < n / 32; ++b, x += 32, codes += 32, offsets += 8) {
        __m256 v[4];
        for (int p = 0; p < 4; ++p) v[p] = _mm256_loadu_ps(x + 8 * p);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], magnitude), _mm256_and_ps(v[1], magnitude)),
                                 _mm256_max_ps(_mm256_and_ps(v[2], magnitude), _mm256_and_ps(v[3], magnitude)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
        const float d = amax / 127.0f;
        const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        __m256i q[4];
        for (int p = 0; p < 4; ++p)
            q[p] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[p], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        // The packs interleave 128-bit halves; the permute puts the 32 codes back in order.
        const __m256i bytes = _mm256_permutevar8x32_epi32(
            _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])),
            _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes), bytes);
        // Sums of each group of four codes: in pairs as int16, then pairs of pairs as int32.
        const __m256i groups = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), bytes), ones);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(offsets), _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(groups, 7)));
        __m128i total = _mm_add_epi32(_mm256_castsi256_si128(groups), _mm256_extracti128_si256(groups, 1));
        total = _mm_add_epi32(total, _mm_shuffle_epi32(total, 0x4e));
        total = _mm_add_epi32(total, _mm_shuffle_epi32(total, 0xb1));
        scales[b] = blocks::fp16_to_fp32(blocks::fp32_to_fp16(d));
        sums[b] = blocks::fp16_to_fp32(blocks::fp32_to_fp16(d * static_cast<float>(_mm_cvtsi128_si32(total))));
    }
}

// blocks::quantize_q8_k with the same float operations: the first element of the largest magnitude gives the
// scale's sign, codes min(127, x * iscale rounded to nearest even) (a NaN product gives 127 both ways), and
// the sum of each run of 16 codes.
void quantize_q8_k(const float* x, int64_t n, int8_t* codes, float* scales, int16_t* sums) {
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t b = 0; b < n / 256; ++b, x += 256, codes += 256, sums += 16) {
        __m256 m = _mm256_setzero_ps();
        // max_ps returns its second operand when the first is NaN, so NaNs are skipped as the reference skips them.
        for (int i = 0; i < 256; i += 8) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), magnitude), m);
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
        float max = 0.0f;
        if (amax != 0.0f) {
            const __m256 target = _mm256_set1_ps(amax);
            for (int i = 0; i < 256; i += 8) {
                const int hits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), magnitude), target, _CMP_EQ_OQ));
                if (hits != 0) {
                    max = x[i + __builtin_ctz(static_cast<unsigned>(hits))];
                    break;
                }
            }
        }
        const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
        scales[b] = amax != 0.0f ? 1.0f / iscale : 0.0f;
        const __m256 factor = _mm256_set1_ps(iscale), cap = _mm256_set1_ps(127.0f);
        for (int g = 0; g < 256; g += 32) {
            __m256i q[4];
            for (int p = 0; p < 4; ++p) {
                const __m256 rounded = _mm256_round_ps(_mm256_mul_ps(factor, _mm256_loadu_ps(x + g + 8 * p)),
                                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                q[p] = _mm256_cvtps_epi32(_mm256_min_ps(rounded, cap));
            }
            const __m256i bytes = _mm256_permutevar8x32_epi32(
                _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])),
                _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + g), bytes);
            // Groups of four codes as int32 (elements 0-15 in the low half), then two horizontal adds.
            const __m256i fours = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), bytes), _mm256_set1_epi16(1));
            const __m256i runs = _mm256_hadd_epi32(_mm256_hadd_epi32(fours, fours), fours);
            sums[g / 16] = static_cast<int16_t>(_mm256_extract_epi32(runs, 0));
            sums[g / 16 + 1] = static_cast<int16_t>(_mm256_extract_epi32(runs, 4));
        }
    }
}

// F16C rounds to nearest even like blocks::fp32_to_fp16 (they differ only in NaN payloads).
void round_f16(const float* x, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; ++i) y[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

void to_f16(const float* x, uint16_t* y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) break;  // F16C keeps a NaN's payload
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; ++i) y[i] = blocks::fp32_to_fp16(x[i]);
}

// expf as glibc computes it (its table-driven expf, in double): x * 32 / ln 2 = k + r with k an integer (rounded by adding
// 1.5 * 2^52) and |r| <= 1/2, exp(x) = 2^(k / 32) * p(r) with 2^(i / 32) from a table of 32 and p a cubic, then
// one rounding to float. The FMA build glibc picks on these CPUs fuses the cubic's steps as below. Equal to
// std::exp bit for bit on every float of magnitude below 88 (checked on all of them); the others (overflow,
// underflow, inf, NaN) take std::exp. libm_exp() checks the libm at run time.
__m256d exp_lanes(__m128 x, const ExpTable& table) {
    const __m256d shift = _mm256_set1_pd(0x1.8p+52), inv_ln2_n = _mm256_set1_pd(0x1.71547652b82fep+0 * 32);
    const __m256d xd = _mm256_cvtps_pd(x);
    const __m256d z = _mm256_mul_pd(inv_ln2_n, xd);
    __m256d kd = _mm256_add_pd(z, shift);
    const __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, shift);
    const __m256d r = _mm256_sub_pd(z, kd);
    const __m256i at = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    __m256i t = _mm256_i64gather_epi64(reinterpret_cast<const long long*>(table.t), at, 8);
    t = _mm256_add_epi64(t, _mm256_slli_epi64(ki, 47));
    const __m256d c0 = _mm256_set1_pd(0x1.c6af84b912394p-5 / (32.0 * 32.0 * 32.0));
    const __m256d c1 = _mm256_set1_pd(0x1.ebfce50fac4f3p-3 / (32.0 * 32.0));
    const __m256d c2 = _mm256_set1_pd(0x1.62e42ff0c52d6p-1 / 32.0);
    const __m256d high = _mm256_fmadd_pd(c0, r, c1);
    __m256d y = _mm256_fmadd_pd(c2, r, _mm256_set1_pd(1.0));
    y = _mm256_fmadd_pd(high, _mm256_mul_pd(r, r), y);
    return _mm256_mul_pd(y, _mm256_castsi256_pd(t));
}

void exp_f32(const float* x, float* y, int64_t n) {
    static const ExpTable table;
    const __m256 limit = _mm256_set1_ps(88.0f), magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        // NaN compares false, so it leaves with the large values.
        if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(v, magnitude), limit, _CMP_LT_OQ)) != 0xFF) {
            for (int j = 0; j < 8; ++j) y[i + j] = std::exp(x[i + j]);
            continue;
        }
        const __m128 low = _mm256_cvtpd_ps(exp_lanes(_mm256_castps256_ps128(v), table));
        const __m128 high = _mm256_cvtpd_ps(exp_lanes(_mm256_extractf128_ps(v, 1), table));
        _mm256_storeu_ps(y + i, _mm256_set_m128(high, low));
    }
    for (; i < n; ++i) y[i] = std::exp(x[i]);
}

__m256 load_f16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// Asks for the cache lines of halves [p, p + n). A step's K and V rows mostly come from memory (SmolLM2's cache
// for 8 sessions of 300 tokens is 55 MB) in block-table order, which the hardware prefetchers do not foresee.
// Into L2, not L1: L1 holds few misses in flight, and requests into it stalled the loops once it was full
// (8 sessions' attention: 2.5 ms of a SmolLM2 step with T0 and 16 rows ahead, 1.9 with T1 and 32).
void prefetch_halves(const uint16_t* p, int64_t n) {
    const auto* first = reinterpret_cast<const char*>(p);
    const auto* line = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(first) & ~uintptr_t{63});
    for (; line < first + 2 * n; line += 64) _mm_prefetch(line, _MM_HINT_T1);
}

// How many rows ahead the attention loops ask for: enough to cover a memory latency with a row's work.
constexpr int64_t rows_ahead = 32;

// The first rows_ahead rows, asked for before a pass over the rows starts: the loops ask only for rows ahead of
// them, so a pass otherwise waited for its first 32 rows one by one. An 8-session step's attention (rows from
// memory, kernels_bench's decode8) took 25% less time with it.
void prefetch_first_rows(const uint16_t* base, const int64_t* rows, int64_t count, int64_t n) {
    for (int64_t j = 0; j < std::min(count, rows_ahead); ++j) prefetch_halves(base + rows[j], n);
}

float dot_f32(const float* a, const float* b, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float sum = hsum(acc);
    for (; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

float dot_f16(const float* a, const uint16_t* b, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load_f16(b + i), acc);
    float sum = hsum(acc);
    for (; i < n; ++i) sum += a[i] * _cvtsh_ss(b[i]);
    return sum;
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(va, _mm256_loadu_ps(x + i))));
    for (; i < n; ++i) y[i] += a * x[i];
}

void axpy_f16(float a, const uint16_t* x, float* y, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(va, load_f16(x + i))));
    for (; i < n; ++i) y[i] += a * _cvtsh_ss(x[i]);
}

// Runs f.template operator()<G>(h) over the query heads in chunks [h, h + G) of at most four, as even as
// possible: the attention loops below keep G heads' sums in registers at once.
template <class F>
void by_head_chunks(int64_t heads, F&& f) {
    const int64_t chunks = (heads + 3) / 4;
    for (int64_t c = 0, h = 0; c < chunks; ++c) {
        const int64_t size = (heads - h) / (chunks - c);
        switch (size) {
        case 1: f.template operator()<1>(h); break;
        case 2: f.template operator()<2>(h); break;
        case 3: f.template operator()<3>(h); break;
        default: f.template operator()<4>(h); break;
        }
        h += size;
    }
}

// Rows per dots tile of G heads with `Registers` vector registers: at most four, the R x G chains, R converted
// rows and a query fitting with one to spare.
constexpr int dot_rows(int G, int Registers) {
    int R = 4;
    while (R > 1 && G * R + R + 2 > Registers) --R;
    return R;
}

// dot_f16 of G queries (head g's at q + g * n) against R rows: each row's halves are converted once for the G
// queries and the R x G chains run interleaved; each chain and its final sum are dot_f16's.
template <int G, int R>
void dots_tile(const float* q, const uint16_t* const* r, int64_t n, float* out, int64_t out_stride) {
    // Chain g * R + j: head g against row j. Every index into acc must be a constant once the loops unroll, or
    // GCC keeps the chains in memory.
    __m256 acc[G * R];
#pragma GCC unroll 32
    for (int m = 0; m < G * R; ++m) acc[m] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 k[R];
#pragma GCC unroll 4
        for (int j = 0; j < R; ++j) k[j] = load_f16(r[j] + i);
#pragma GCC unroll 8
        for (int g = 0; g < G; ++g) {
            const __m256 qv = _mm256_loadu_ps(q + g * n + i);
#pragma GCC unroll 4
            for (int j = 0; j < R; ++j) acc[g * R + j] = _mm256_fmadd_ps(qv, k[j], acc[g * R + j]);
        }
    }
    // The chains' sums four at a time, then the rest one by one.
    float sums[G * R];
#pragma GCC unroll 8
    for (int m = 0; m + 4 <= G * R; m += 4) _mm_storeu_ps(sums + m, hsum4(acc[m], acc[m + 1], acc[m + 2], acc[m + 3]));
#pragma GCC unroll 4
    for (int m = G * R / 4 * 4; m < G * R; ++m) sums[m] = hsum(acc[m]);
    for (int g = 0; g < G; ++g)
        for (int j = 0; j < R; ++j) {
            float sum = sums[g * R + j];
            for (int64_t t = i; t < n; ++t) sum += q[g * n + t] * _cvtsh_ss(r[j][t]);
            out[g * out_stride + j] = sum;
        }
}

template <int Registers>
void dots_f16(const float* q, int64_t heads, const uint16_t* base, const int64_t* rows, int64_t count, int64_t n,
              float* out) {
    prefetch_first_rows(base, rows, count, n);
    by_head_chunks(heads, [&]<int G>(int64_t h) {
        constexpr int R = dot_rows(G, Registers);
        int64_t j = 0;
        for (; j + R <= count; j += R) {
            const uint16_t* r[R];
            for (int k = 0; k < R; ++k) {
                r[k] = base + rows[j + k];
                if (j + k + rows_ahead < count) prefetch_halves(base + rows[j + k + rows_ahead], n);
            }
            dots_tile<G, R>(q + h * n, r, n, out + h * count + j, count);
        }
        for (; j < count; ++j) {
            const uint16_t* r = base + rows[j];
            dots_tile<G, 1>(q + h * n, &r, n, out + h * count + j, count);
        }
    });
}

// Vectors of eight outputs per weighted-sum block of G heads (8, 4, 2 or 1): the G x C sums, G weights and a
// converted vector fit the registers with one to spare.
constexpr int sum_vectors(int G, int Registers) {
    int C = 8;
    while (C > 1 && G * C + G + 2 > Registers) C /= 2;
    return C;
}

// Outputs [i, i + 8C) of G heads (head g's weights at w + g * count, its output at out + g * n), kept in
// registers across the rows; each row's halves are converted once for the G heads. Every output adds weight *
// value in row order, as axpy_f16 from zero does.
template <int G, int C>
void sum_block(const float* w, const uint16_t* base, const int64_t* rows, int64_t count, int64_t n, int64_t i,
               float* out) {
    // Sum g * C + c: head g's outputs i + 8c .. i + 8c + 7 (constant indices, as in dots_tile).
    __m256 acc[G * C];
#pragma GCC unroll 32
    for (int m = 0; m < G * C; ++m) acc[m] = _mm256_setzero_ps();
    for (int64_t j = 0; j < count; ++j) {
        const uint16_t* r = base + rows[j] + i;
        if (j + rows_ahead < count) prefetch_halves(base + rows[j + rows_ahead] + i, 8 * C);
        __m256 wv[G];
#pragma GCC unroll 8
        for (int g = 0; g < G; ++g) wv[g] = _mm256_set1_ps(w[g * count + j]);
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
            const __m256 v = load_f16(r + 8 * c);
#pragma GCC unroll 8
            for (int g = 0; g < G; ++g) acc[g * C + c] = _mm256_add_ps(acc[g * C + c], _mm256_mul_ps(wv[g], v));
        }
    }
#pragma GCC unroll 32
    for (int m = 0; m < G * C; ++m) _mm256_storeu_ps(out + m / C * n + i + 8 * (m % C), acc[m]);
}

template <int Registers>
void weighted_sum_f16(const float* weights, int64_t heads, const uint16_t* base, const int64_t* rows, int64_t count,
                      int64_t n, float* out) {
    prefetch_first_rows(base, rows, count, n);
    by_head_chunks(heads, [&]<int G>(int64_t h) {
        constexpr int C = sum_vectors(G, Registers);
        const float* w = weights + h * count;
        float* o = out + h * n;
        int64_t i = 0;
        for (; i + 8 * C <= n; i += 8 * C) sum_block<G, C>(w, base, rows, count, n, i, o);
        for (; i + 8 <= n; i += 8) sum_block<G, 1>(w, base, rows, count, n, i, o);
        for (; i < n; ++i)
            for (int g = 0; g < G; ++g) {
                float sum = 0.0f;
                for (int64_t j = 0; j < count; ++j) sum += w[g * count + j] * _cvtsh_ss(base[rows[j] + i]);
                o[g * n + i] = sum;
            }
    });
}

// ---- K-quants against Q8_K columns (blocks::dot_q8_k) ------------------------------------------------------
//
// A block of 256 goes as eight chunks of 32 elements. Each chunk's weight codes are unsigned bytes (Q6_K's keep
// their +32), multiplied with the activation codes as bytes into int16 pairs (at most 63 * 127 * 2, no
// saturation) and then with the chunk's scales as int16 into int32 lanes: `Products::scaled` is that second
// step. A block's lanes then add to the one integer the reference computes, and only that meets the floats.

int32_t hsum_i32(__m256i v) {
    __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4e));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xb1));
    return _mm_cvtsi128_si32(x);
}

// One K-quant block of one row, decoded for every column it meets: the codes of chunk j, the int16 scales
// each of its products takes, and the int16 factors that meet the activations' 16 run sums (the mins of
// Q4_K/Q5_K, the scales of Q6_K, whose codes carry +32).
struct KBlock {
    __m256i codes[8], scales[8], run_factors;
    float d, dmin;
};

__m256i pair_scales(int lo, int hi) {
    return _mm256_setr_m128i(_mm_set1_epi16(static_cast<int16_t>(lo)), _mm_set1_epi16(static_cast<int16_t>(hi)));
}

// Q4_K and Q5_K (blocks.cpp KAffine): d, dmin, 12 bytes of 6-bit scales and mins, [Q5_K: qh[32]], qs[128].
template <int Bits>
struct KAffine {
    static constexpr int64_t bytes = Bits == 5 ? 176 : 144;
    static constexpr bool affine = true;
    static void decode(const uint8_t* b, KBlock& k) {
        // The 6-bit scales and mins (blocks.cpp read_scale_min) unpacked four at a time in 32-bit words: those of
        // sub-blocks 0-3 are the low 6 bits of bytes 0-3 and 4-7, those of 4-7 a nibble of bytes 8-11 below the
        // top two bits of bytes 0-3 and 4-7.
        uint32_t w[3];
        std::memcpy(w, b + 4, sizeof w);
        constexpr uint32_t low6 = 0x3f3f3f3f, nibble = 0x0f0f0f0f, top2 = 0x03030303;
        const uint32_t scales_lo = w[0] & low6, mins_lo = w[1] & low6;
        const uint32_t scales_hi = (w[2] & nibble) | (((w[0] >> 6) & top2) << 4);
        const uint32_t mins_hi = ((w[2] >> 4) & nibble) | (((w[1] >> 6) & top2) << 4);
        const __m128i scales = _mm_cvtepu8_epi16(_mm_setr_epi32(static_cast<int>(scales_lo), static_cast<int>(scales_hi), 0, 0));
        const __m128i mins = _mm_cvtepu8_epi16(_mm_setr_epi32(static_cast<int>(mins_lo), static_cast<int>(mins_hi), 0, 0));
        // Chunk j's scale in all 16 int16 lanes: bytes 2j and 2j + 1 of the widened scales, repeated.
        const __m256i both = _mm256_broadcastsi128_si256(scales);
        for (int j = 0; j < 8; ++j)
            k.scales[j] = _mm256_shuffle_epi8(both, _mm256_set1_epi16(static_cast<int16_t>((2 * j + 1) << 8 | 2 * j)));
        // Each min meets the two runs of 16 of its sub-block.
        k.run_factors = _mm256_setr_m128i(_mm_unpacklo_epi16(mins, mins), _mm_unpackhi_epi16(mins, mins));
        const uint8_t* qs = b + (Bits == 5 ? 48 : 16);
        const __m256i low4 = _mm256_set1_epi8(0x0F);
        __m256i qh = _mm256_setzero_si256();
        if constexpr (Bits == 5) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
        for (int p = 0; p < 4; ++p) {
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * p));
            k.codes[2 * p] = _mm256_and_si256(q, low4);
            k.codes[2 * p + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
            if constexpr (Bits == 5) {
                for (int h = 0; h < 2; ++h) {
                    const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << (2 * p + h)));
                    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
                    k.codes[2 * p + h] = _mm256_or_si256(k.codes[2 * p + h], _mm256_and_si256(set, _mm256_set1_epi8(16)));
                }
            }
        }
        k.d = half(b);
        k.dmin = half(b + 2);
    }
};

// Q6_K (blocks.cpp Q6K): ql[128], qh[64], int8 scales[16], d. Chunk j = 4h + k of half h: the nibbles of
// ql[64h + 32(k % 2) ..] (low for k < 2), the bits 2k, 2k + 1 of qh[32h ..]; its first 16 elements take
// scale 2j, the next 16 scale 2j + 1.
struct Q6K {
    static constexpr int64_t bytes = 210;
    static constexpr bool affine = false;
    static void decode(const uint8_t* b, KBlock& k) {
        const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(3);
        const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
        for (int h = 0; h < 2; ++h) {
            const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
            const __m256i low[4] = {_mm256_and_si256(ql0, low4), _mm256_and_si256(ql1, low4),
                                    _mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                                    _mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4)};
            for (int q = 0; q < 4; ++q) {
                const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * q), low2);
                const int j = 4 * h + q;
                k.codes[j] = _mm256_or_si256(low[q], _mm256_slli_epi16(high, 4));
                k.scales[j] = pair_scales(sc[2 * j], sc[2 * j + 1]);
            }
        }
        k.run_factors = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
        k.d = half(b + 208);
        k.dmin = 0.0f;
    }
};

// The code products of one column against a decoded block, in eight int32 lanes, and the activations' run sums
// met with the block's run factors, in eight more.
template <class Products>
void k_column(const KBlock& k, const int8_t* a, const int16_t* sums, __m256i& lanes, __m256i& runs) {
    lanes = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j)
        lanes = Products::scaled(lanes, k.codes[j], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 32 * j)), k.scales[j]);
    runs = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums)), k.run_factors);
}

// One row against one column, block after block, in blocks::dot_q8_k's order.
template <class Products, class F>
float k_row(const uint8_t* row, const Q8KColumns& x) {
    float acc = 0.0f;
    KBlock k;
    for (int64_t i = 0; i < x.n_blocks; ++i) {
        F::decode(row + i * F::bytes, k);
        __m256i lanes, runs;
        k_column<Products>(k, x.codes + i * 256, x.sums + i * 16, lanes, runs);
        const int32_t scaled = hsum_i32(lanes), run_sum = hsum_i32(runs);
        const float dx = x.scales[i];
        if constexpr (F::affine) {
            const float mins = (k.dmin * dx) * static_cast<float>(run_sum);
            acc += std::fma(k.d * dx, static_cast<float>(scaled), -mins);
        } else {
            acc = std::fma(k.d * dx, static_cast<float>(scaled - 32 * run_sum), acc);
        }
    }
    return acc;
}

// One row against four columns: each block is decoded once for the four, their eight integer sums are reduced
// together, and the four columns' floats run side by side in the lanes of one register, each lane doing
// exactly k_row's operations.
template <class Products, class F>
__m128 k_row4(const uint8_t* row, const Q8KColumns& x) {
    __m128 acc = _mm_setzero_ps();
    KBlock k;
    for (int64_t i = 0; i < x.n_blocks; ++i) {
        F::decode(row + i * F::bytes, k);
        __m256i lanes[4], runs[4];
        for (int c = 0; c < 4; ++c) {
            const int64_t block = c * x.n_blocks + i;
            k_column<Products>(k, x.codes + block * 256, x.sums + block * 16, lanes[c], runs[c]);
        }
        // Per 128-bit half, hadd leaves the four columns' partial sums in column order.
        const __m256i l = _mm256_hadd_epi32(_mm256_hadd_epi32(lanes[0], lanes[1]), _mm256_hadd_epi32(lanes[2], lanes[3]));
        const __m256i r = _mm256_hadd_epi32(_mm256_hadd_epi32(runs[0], runs[1]), _mm256_hadd_epi32(runs[2], runs[3]));
        const __m128i scaled = _mm_add_epi32(_mm256_castsi256_si128(l), _mm256_extracti128_si256(l, 1));
        const __m128i run_sum = _mm_add_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        const __m128 dx = _mm_setr_ps(x.scales[i], x.scales[x.n_blocks + i], x.scales[2 * x.n_blocks + i],
                                      x.scales[3 * x.n_blocks + i]);
        const __m128 d = _mm_mul_ps(_mm_set1_ps(k.d), dx);
        if constexpr (F::affine) {
            const __m128 mins = _mm_mul_ps(_mm_mul_ps(_mm_set1_ps(k.dmin), dx), _mm_cvtepi32_ps(run_sum));
            acc = _mm_add_ps(acc, _mm_fmsub_ps(d, _mm_cvtepi32_ps(scaled), mins));
        } else {
            const __m128i offset = _mm_sub_epi32(scaled, _mm_slli_epi32(run_sum, 5));
            acc = _mm_fmadd_ps(d, _mm_cvtepi32_ps(offset), acc);
        }
    }
    return acc;
}

// Every row against every column, four columns to a pass (Kernels::dot_q8k).
template <class Products, class F>
void k_rows_dot(const void* rows, uint64_t row_bytes, int64_t n_rows, const Q8KColumns& x, int64_t n_cols, float* y,
                int64_t y_stride) {
    auto from = [&](int64_t c) {
        return Q8KColumns{x.codes + c * x.n_blocks * 256, x.scales + c * x.n_blocks, x.sums + c * x.n_blocks * 16,
                          x.n_blocks};
    };
    for (int64_t r = 0; r < n_rows; ++r) {
        const auto* row = static_cast<const uint8_t*>(rows) + r * row_bytes;
        int64_t c = 0;
        for (; c + 4 <= n_cols; c += 4) {
            float out[4];
            _mm_storeu_ps(out, k_row4<Products, F>(row, from(c)));
            for (int j = 0; j < 4; ++j) y[(c + j) * y_stride + r] = out[j];
        }
        for (; c < n_cols; ++c) y[c * y_stride + r] = k_row<Products, F>(row, from(c));
    }
}

// The table for one instruction set: `Products` forms the integer lanes, R x C is the tile of rows and columns,
// `Registers` the vector registers the attention loops may fill.
template <class Products, int R, int C, int Registers>
constexpr Kernels table(const char* isa) {
    return {
        isa,
        quantize_q8,
        {rows_dot<Products, Q8_0, R, C>, rows_dot<Products, Q4_0, R, C>, rows_dot<Products, Q4_1, R, C>,
         rows_dot<Products, Q5_0, R, C>, rows_dot<Products, Q5_1, R, C>},
        {dequantize_q8_0, dequantize_q4_0, dequantize_q4_1, dequantize_q5_0, dequantize_q5_1},
        nullptr,
        quantize_q8_k,
        {k_rows_dot<Products, KAffine<4>>, k_rows_dot<Products, KAffine<5>>, k_rows_dot<Products, Q6K>},
        dot_f32,
        dot_f16,
        axpy_f32,
        axpy_f16,
        round_f16,
        to_f16,
        exp_f32,
        dots_f16<Registers>,
        weighted_sum_f16<Registers>,
    };
}

}  // namespace
}  // namespace cellm::openblas::x86
