// The AVX-512 VNNI table: vpdpbusd sums four byte products into each int32 lane in one instruction.
//
// A 256-bit register holds one block's eight lanes, the order ggml and the reference sum in. The integer
// tiles here use 512-bit registers as two of those side by side: the same weight block in both halves, two
// columns' activation blocks, one in each. Every lane then goes through exactly the operations of the 256-bit
// form (same integers, same float multiply, fma and final sum per half), so results stay bit-equal to the
// reference while each instruction does the work of two. Tiles are R rows x 2P columns.
#include "kernels_x86.hpp"

// GCC 12's 512-bit insert and broadcast intrinsics start from a self-initialised "undefined" register, which
// its own -Wuninitialized then reports at every use; the values are all defined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace cellm::openblas {
namespace {

struct VnniProducts {
    static __m256i lanes(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
    // (w + 128) . a - 128 * sum(a) in each lane: one instruction per product, the offsets loaded from memory.
    static __m256i signed_lanes(__m256i w, __m256i a, const int32_t* offsets) {
        const __m256i start = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(offsets));
        return _mm256_dpbusd_epi32(start, _mm256_xor_si256(w, _mm256_set1_epi8(-128)), a);
    }
};

__m512i pair(__m256i low, __m256i high) { return _mm512_inserti64x4(_mm512_zextsi256_si512(low), high, 1); }
__m512 pair(__m256 low, __m256 high) { return _mm512_insertf32x8(_mm512_zextps256_ps512(low), high, 1); }

template <class F, int R, int P, bool Prefetch>
void pair_tile(const uint8_t* rows, uint64_t row_bytes, const Q8Columns& x, float* y, int64_t y_stride) {
    constexpr int C = 2 * P;
    static_assert(C <= 8, "the affine mins keep one lane per column in an 8-lane register");
    const int64_t nb = x.n_blocks;
    __m512 acc[R][P];
    __m256 mins[R];  // lane c: the running sum of min * activation block sum of column c
    for (int r = 0; r < R; ++r) {
        mins[r] = _mm256_setzero_ps();
        for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < nb; ++i) {
        __m512i a[P], start[P];
        __m512 ax[P];
        for (int p = 0; p < P; ++p) {
            const int64_t lo = (2 * p) * nb + i, hi = (2 * p + 1) * nb + i;
            a[p] = pair(x86::load_codes(x.codes + lo * 32), x86::load_codes(x.codes + hi * 32));
            ax[p] = pair(_mm256_broadcast_ss(x.scales + lo), _mm256_broadcast_ss(x.scales + hi));
            if constexpr (!F::is_unsigned) {
                start[p] = pair(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.offsets + lo * 8)),
                                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.offsets + hi * 8)));
            }
        }
        auto sum_of = [&](int c) { return c < C ? x.sums[c * nb + i] : 0.0f; };
        const __m256 sums = F::affine ? _mm256_setr_ps(sum_of(0), sum_of(1), sum_of(2), sum_of(3), sum_of(4), sum_of(5),
                                                       sum_of(6), sum_of(7))
                                      : _mm256_setzero_ps();
        for (int r = 0; r < R; ++r) {
            const uint8_t* b = rows + r * row_bytes + i * F::bytes;
            if constexpr (Prefetch) _mm_prefetch(reinterpret_cast<const char*>(b + R * row_bytes), _MM_HINT_T0);
            __m256i w = F::codes(b);
            if constexpr (!F::is_unsigned) w = _mm256_xor_si256(w, _mm256_set1_epi8(-128));
            const __m512i both = _mm512_broadcast_i64x4(w);
            const __m128 halves = x86::block_halves(b);
            const __m512 dw = _mm512_broadcastss_ps(halves);
            if constexpr (F::affine) mins[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_permute_ps(halves, 0x55)), sums, mins[r]);
            for (int p = 0; p < P; ++p) {
                const __m512i lanes = F::is_unsigned ? _mm512_dpbusd_epi32(_mm512_setzero_si512(), both, a[p])
                                                     : _mm512_dpbusd_epi32(start[p], both, a[p]);
                acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(dw, ax[p]), _mm512_cvtepi32_ps(lanes), acc[r][p]);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        float m[8];
        _mm256_storeu_ps(m, mins[r]);
        for (int p = 0; p < P; ++p) {
            y[(2 * p) * y_stride + r] = x86::hsum(_mm512_castps512_ps256(acc[r][p])) + m[2 * p];
            y[(2 * p + 1) * y_stride + r] = x86::hsum(_mm512_extractf32x8_ps(acc[r][p], 1)) + m[2 * p + 1];
        }
    }
}

// As x86::rows_dot, with pair tiles: columns go 2P at a time, then in pairs, and a last odd one through the
// 256-bit tile.
template <class F, int R, int P>
void rows_dot_pairs(const void* rows, uint64_t row_bytes, int64_t n_rows, const Q8Columns& x, int64_t n_cols, float* y,
                    int64_t y_stride) {
    const int64_t chunk = std::max<int64_t>(R, static_cast<int64_t>((32 * 1024) / row_bytes) / R * R);
    for (int64_t r0 = 0; r0 < n_rows; r0 += chunk) {
        const auto* base = static_cast<const uint8_t*>(rows) + r0 * row_bytes;
        const int64_t chunk_rows = std::min(chunk, n_rows - r0);
        for (int64_t c = 0; c < n_cols;) {
            const Q8Columns cols{x.codes + c * x.n_blocks * 32, x.scales + c * x.n_blocks, x.sums + c * x.n_blocks,
                                 x.offsets + c * x.n_blocks * 8, x.n_blocks};
            float* out = y + c * y_stride + r0;
            auto pass = [&]<int Pairs, bool Prefetch>() {
                int64_t r = 0;
                if constexpr (Pairs == 0) {
                    for (; r + R <= chunk_rows; r += R)
                        x86::tile<VnniProducts, F, R, 1, Prefetch>(base + r * row_bytes, row_bytes, cols, out + r, y_stride);
                    for (; r < chunk_rows; ++r)
                        x86::tile<VnniProducts, F, 1, 1, Prefetch>(base + r * row_bytes, row_bytes, cols, out + r, y_stride);
                } else {
                    for (; r + R <= chunk_rows; r += R)
                        pair_tile<F, R, Pairs, Prefetch>(base + r * row_bytes, row_bytes, cols, out + r, y_stride);
                    for (; r < chunk_rows; ++r)
                        pair_tile<F, 1, Pairs, Prefetch>(base + r * row_bytes, row_bytes, cols, out + r, y_stride);
                }
            };
            const int64_t left = n_cols - c;
            const bool first = c == 0;
            if (left >= 2 * P) {
                first ? pass.template operator()<P, true>() : pass.template operator()<P, false>();
                c += 2 * P;
            } else if (left >= 2) {
                first ? pass.template operator()<1, true>() : pass.template operator()<1, false>();
                c += 2;
            } else {
                first ? pass.template operator()<0, true>() : pass.template operator()<0, false>();
                c += 1;
            }
        }
    }
}

Kernels make_table() {
    Kernels k = x86::table<VnniProducts, 4, 4>("avx512-vnni");
    k.dot_q8[0] = rows_dot_pairs<x86::Q8_0, 4, 4>;
    k.dot_q8[1] = rows_dot_pairs<x86::Q4_0, 4, 4>;
    k.dot_q8[2] = rows_dot_pairs<x86::Q4_1, 4, 4>;
    return k;
}

const Kernels avx512 = make_table();

}  // namespace

const Kernels* avx512_kernels() { return &avx512; }

}  // namespace cellm::openblas
