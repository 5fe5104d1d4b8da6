// The repacked products (repacked.hpp) with AVX-512 VNNI: sixteen rows to a register, up to eight columns at a
// time, so each block's codes are decoded once for eight columns and each column's codes are read once for
// sixteen rows (as broadcasts folded into vpdpbusd).
#include "repacked.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

// GCC 12's 512-bit conversion intrinsics start from a self-initialised "undefined" register, which its own
// -Wmaybe-uninitialized then reports (as in kernels_avx512.cpp).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace cellm::openblas {
namespace {

int32_t code_quad(const int8_t* codes, int j) {
    int32_t v;
    std::memcpy(&v, codes + 4 * j, sizeof v);
    return v;
}

// How many blocks ahead a product of several columns asks for the weight's lines. With eight columns' work per
// block the hardware prefetcher alone left the loads waiting: an 8-session SmolLM2 step's products took 7.5 ms,
// 5.7 with this. One column streams at memory speed without it, and would only pay for the instructions. Into
// L2, as the attention loops ask (kernels_x86.hpp).
constexpr int64_t ahead = 8;

template <bool Nibbles, bool Fifth, bool Affine, int C>
void group_dot(const std::byte* group, int64_t nb, const Q8Columns& x, const int32_t* starts, float* y,
               int64_t y_stride, __mmask16 rows) {
    constexpr int64_t code_bytes = RepackedFormat{Nibbles, Fifth, Affine, 0}.code_bytes();
    constexpr int64_t block_bytes = RepackedFormat{Nibbles, Fifth, Affine, 0}.block_bytes();
    __m512 acc[C];
    for (auto& a : acc) a = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const std::byte* b = group + i * block_bytes;
        if constexpr (C > 1)
            for (int64_t l = 0; l < block_bytes; l += 64)
                _mm_prefetch(reinterpret_cast<const char*>(b + ahead * block_bytes + l), _MM_HINT_T1);
        __m512i w[8];
        if constexpr (Nibbles) {
            const __m512i low = _mm512_set1_epi8(0x0F);
            for (int q = 0; q < 4; ++q) {
                const __m512i packed = _mm512_loadu_si512(b + 64 * q);
                w[q] = _mm512_and_si512(packed, low);
                w[q + 4] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low);
            }
            if constexpr (Fifth) {
                for (int j = 0; j < 8; ++j) {
                    __mmask64 bits;
                    std::memcpy(&bits, b + 256 + 8 * j, sizeof bits);
                    w[j] = _mm512_mask_add_epi8(w[j], bits, w[j], _mm512_set1_epi8(16));
                }
            }
        } else {
            for (int j = 0; j < 8; ++j) w[j] = _mm512_loadu_si512(b + 64 * j);
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + code_bytes)));
        const __m512 m = Affine ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + code_bytes + 32)))
                                : _mm512_setzero_ps();
        // The columns' integer sums side by side, each still over the quads in order: a column's eight
        // vpdpbusd depend on each other, and one column at a time left them waiting on that chain.
        __m512i sum[C];
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) sum[c] = Affine ? _mm512_setzero_si512() : _mm512_set1_epi32(starts[c * nb + i]);
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j)
#pragma GCC unroll 8
            for (int c = 0; c < C; ++c)
                sum[c] = _mm512_dpbusd_epi32(sum[c], w[j], _mm512_set1_epi32(code_quad(x.codes + (c * nb + i) * 32, j)));
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
            const int64_t at = c * nb + i;
            acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(x.scales[at])), _mm512_cvtepi32_ps(sum[c]), acc[c]);
            if constexpr (Affine) acc[c] = _mm512_fmadd_ps(m, _mm512_set1_ps(x.sums[at]), acc[c]);
        }
    }
    for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(y + c * y_stride, rows, acc[c]);
}

// Columns from c on, as their own Q8Columns (and starts).
Q8Columns columns_from(const Q8Columns& x, int64_t c) {
    return {x.codes + c * x.n_blocks * 32, x.scales + c * x.n_blocks, x.sums + c * x.n_blocks, nullptr, x.n_blocks,
            nullptr};
}

template <bool Nibbles, bool Fifth, bool Affine>
void dot(const RepackedWeight& w, int64_t g0, int64_t g1, const Q8Columns& x, const int32_t* starts, int64_t n_cols,
         float* y, int64_t y_stride) {
    const int64_t nb = w.k / 32, group_bytes = nb * RepackedFormat{Nibbles, Fifth, Affine, 0}.block_bytes();
    for (int64_t g = g0; g < g1; ++g) {
        const std::byte* group = w.data + g * group_bytes;
        const int64_t r0 = g * group_rows;
        const auto rows = static_cast<__mmask16>(w.m - r0 >= 16 ? 0xFFFF : (1u << (w.m - r0)) - 1);
        for (int64_t c = 0; c < n_cols; c += 8) {
            const Q8Columns cols = columns_from(x, c);
            const int32_t* s = starts + c * nb;
            float* out = y + c * y_stride + r0;
            switch (std::min<int64_t>(8, n_cols - c)) {
            case 1: group_dot<Nibbles, Fifth, Affine, 1>(group, nb, cols, s, out, y_stride, rows); break;
            case 2: group_dot<Nibbles, Fifth, Affine, 2>(group, nb, cols, s, out, y_stride, rows); break;
            case 3: group_dot<Nibbles, Fifth, Affine, 3>(group, nb, cols, s, out, y_stride, rows); break;
            case 4: group_dot<Nibbles, Fifth, Affine, 4>(group, nb, cols, s, out, y_stride, rows); break;
            case 5: group_dot<Nibbles, Fifth, Affine, 5>(group, nb, cols, s, out, y_stride, rows); break;
            case 6: group_dot<Nibbles, Fifth, Affine, 6>(group, nb, cols, s, out, y_stride, rows); break;
            case 7: group_dot<Nibbles, Fifth, Affine, 7>(group, nb, cols, s, out, y_stride, rows); break;
            default: group_dot<Nibbles, Fifth, Affine, 8>(group, nb, cols, s, out, y_stride, rows); break;
            }
        }
    }
}

void dot_any(const RepackedWeight& w, int64_t g0, int64_t g1, const Q8Columns& x, const int32_t* starts,
             int64_t n_cols, float* y, int64_t y_stride) {
    with_repacked_format(w.type, [&]<bool Nibbles, bool Fifth, bool Affine>() {
        dot<Nibbles, Fifth, Affine>(w, g0, g1, x, starts, n_cols, y, y_stride);
    });
}

}  // namespace

RepackedDot repacked_dot() {
    static const bool vnni = has_avx512_vnni();
    return vnni ? dot_any : nullptr;
}

}  // namespace cellm::openblas
