// The AVX-512 VNNI table: vpdpbusd sums four byte products into each int32 lane in one instruction.
//
// A 256-bit register holds one block's eight lanes, the order ggml and the reference sum in. The integer
// tiles here use 512-bit registers as two of those side by side: the same weight block in both halves, two
// columns' activation blocks, one in each. Every lane then goes through exactly the operations of the 256-bit
// form (same integers, same float multiply, fma and final sum per half), so results stay bit-equal to the
// reference while each instruction does the work of two. Tiles are R rows x 2P columns.
#include "kernels_x86.hpp"

#include <cstddef>
#include <type_traits>

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
    // As MaddubsProducts::scaled, with the int16 step and the add in one instruction.
    static __m256i scaled(__m256i acc, __m256i u, __m256i a, __m256i scales) {
        return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, a), scales);
    }
};

// A group of 2P columns laid out the way the pair tile reads it, so that each operand is one load: for block
// i and pair p, the two columns' 64 codes, their scales (8 lanes each) and offsets; for block i, the eight
// columns' sums. pack_columns lays out every group once per product, in the order rows_dot_pairs walks them.
struct PairedColumns {
    const int8_t* codes;
    const float* scales;
    const int32_t* offsets;
    const float* sums;
    int64_t n_blocks;
};

size_t group_bytes(int64_t nb, int pairs) {
    return static_cast<size_t>(nb * pairs) * (64 + 16 * sizeof(float) + 16 * sizeof(int32_t)) +
           static_cast<size_t>(nb) * 8 * sizeof(float);
}

PairedColumns group_at(const void* base, int64_t nb, int pairs) {
    const auto* b = static_cast<const std::byte*>(base);
    const auto n = static_cast<size_t>(nb * pairs);
    const auto* scales = reinterpret_cast<const float*>(b + n * 64);
    const auto* offsets = reinterpret_cast<const int32_t*>(scales + n * 16);
    return {reinterpret_cast<const int8_t*>(b), scales, offsets, reinterpret_cast<const float*>(offsets + n * 16), nb};
}

void pack_group(const Q8Columns& x, int pairs, void* out) {
    const int64_t nb = x.n_blocks;
    const PairedColumns g = group_at(out, nb, pairs);
    auto* codes = const_cast<int8_t*>(g.codes);
    auto* scales = const_cast<float*>(g.scales);
    auto* offsets = const_cast<int32_t*>(g.offsets);
    auto* sums = const_cast<float*>(g.sums);
    std::fill_n(sums, nb * 8, 0.0f);
    for (int64_t i = 0; i < nb; ++i) {
        for (int p = 0; p < pairs; ++p) {
            const int64_t slot = i * pairs + p;
            for (int h = 0; h < 2; ++h) {
                const int64_t src = (2 * p + h) * nb + i;
                std::memcpy(codes + slot * 64 + h * 32, x.codes + src * 32, 32);
                std::fill_n(scales + slot * 16 + h * 8, 8, x.scales[src]);
                std::memcpy(offsets + slot * 16 + h * 8, x.offsets + src * 8, 8 * sizeof(int32_t));
                sums[i * 8 + 2 * p + h] = x.sums[src];
            }
        }
    }
}

// Columns from `c` on, as a Q8Columns of their own.
Q8Columns from_column(const Q8Columns& x, int64_t c) {
    return {x.codes + c * x.n_blocks * 32, x.scales + c * x.n_blocks, x.sums + c * x.n_blocks,
            x.offsets + c * x.n_blocks * 8, x.n_blocks, nullptr};
}

// How many pairs the group starting at column c holds: P while that many are left, then all the pairs left in
// one group, so that 4 or 6 columns also decode each weight block once (0: the last, odd column).
constexpr int group_pairs(int64_t n_cols, int64_t c, int P) {
    return static_cast<int>(std::min<int64_t>(P, (n_cols - c) / 2));
}

template <int P>
size_t pack_columns(const Q8Columns& x, int64_t n_cols, void* out) {
    size_t at = 0;
    for (int64_t c = 0;;) {
        const int pairs = group_pairs(n_cols, c, P);
        if (pairs == 0) return at;
        if (out != nullptr) pack_group(from_column(x, c), pairs, static_cast<std::byte*>(out) + at);
        at += group_bytes(x.n_blocks, pairs);
        c += 2 * pairs;
    }
}

// A block's 32 codes in both halves of a 512-bit register, straight from memory: broadcast loads need no
// shuffle unit, which the tile's other work keeps busy.
template <class F>
__m512i codes_twice(const uint8_t* b) {
    if constexpr (std::is_same_v<F, x86::Q8_0>) {
        return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)));
    } else if constexpr (std::is_same_v<F, x86::Q5_0> || std::is_same_v<F, x86::Q5_1>) {
        // The nibbles as below; the 32-bit qh, one bit per element, is a byte mask as it stands: 16 is added
        // where a bit is set, in both halves.
        constexpr int qh_at = F::affine ? 4 : 2;
        uint32_t qh;
        std::memcpy(&qh, b + qh_at, sizeof qh);
        const __m512i packed = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + qh_at + 4)));
        const __m512i shifts = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4);
        const __m512i nibbles = _mm512_and_si512(_mm512_srlv_epi32(packed, shifts), _mm512_set1_epi8(0x0F));
        const __m512i codes = _mm512_mask_add_epi8(nibbles, (__mmask64{qh} << 32) | qh, nibbles, _mm512_set1_epi8(16));
        return F::is_unsigned ? codes : _mm512_sub_epi8(codes, _mm512_set1_epi8(16));
    } else {
        // 16 bytes of nibbles in each 128-bit lane: low nibbles are elements 0-15, high ones 16-31.
        constexpr int offset = F::affine ? 4 : 2;
        const __m512i packed = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + offset)));
        const __m512i shifts = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4);
        const __m512i nibbles = _mm512_and_si512(_mm512_srlv_epi32(packed, shifts), _mm512_set1_epi8(0x0F));
        return F::is_unsigned ? nibbles : _mm512_sub_epi8(nibbles, _mm512_set1_epi8(8));
    }
}

template <class F, int R, int P, bool Prefetch>
void pair_tile(const uint8_t* rows, uint64_t row_bytes, const PairedColumns& x, float* y, int64_t y_stride) {
    static_assert(2 * P <= 8, "the affine mins keep one lane per column in an 8-lane register");
    __m512 acc[R][P];
    __m256 mins[R];  // lane c: the running sum of min * activation block sum of column c
    for (int r = 0; r < R; ++r) {
        mins[r] = _mm256_setzero_ps();
        for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < x.n_blocks; ++i) {
        __m512i a[P], start[P];
        __m512 ax[P];
        for (int p = 0; p < P; ++p) {
            const int64_t slot = i * P + p;
            a[p] = _mm512_loadu_si512(x.codes + slot * 64);
            ax[p] = _mm512_loadu_ps(x.scales + slot * 16);
            if constexpr (!F::is_unsigned) start[p] = _mm512_loadu_si512(x.offsets + slot * 16);
        }
        const __m256 sums = F::affine ? _mm256_loadu_ps(x.sums + i * 8) : _mm256_setzero_ps();
        for (int r = 0; r < R; ++r) {
            const uint8_t* b = rows + r * row_bytes + i * F::bytes;
            if constexpr (Prefetch) _mm_prefetch(reinterpret_cast<const char*>(b + R * row_bytes), _MM_HINT_T0);
            __m512i both = codes_twice<F>(b);
            if constexpr (!F::is_unsigned) both = _mm512_xor_si512(both, _mm512_set1_epi8(-128));
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

// As x86::rows_dot, with pair tiles over the packed groups: columns go 2P at a time, then the pairs left in one
// group, and a last odd one through the 256-bit tile.
template <class F, int R, int P>
void rows_dot_pairs(const void* rows, uint64_t row_bytes, int64_t n_rows, const Q8Columns& x, int64_t n_cols, float* y,
                    int64_t y_stride) {
    const int64_t chunk = std::max<int64_t>(R, static_cast<int64_t>((32 * 1024) / row_bytes) / R * R);
    for (int64_t r0 = 0; r0 < n_rows; r0 += chunk) {
        const auto* base = static_cast<const uint8_t*>(rows) + r0 * row_bytes;
        const int64_t chunk_rows = std::min(chunk, n_rows - r0);
        size_t packed_at = 0;
        for (int64_t c = 0; c < n_cols;) {
            float* out = y + c * y_stride + r0;
            const int pairs = group_pairs(n_cols, c, P);
            auto pass = [&]<int Pairs, bool Prefetch>() {
                int64_t r = 0;
                if constexpr (Pairs == 0) {
                    const Q8Columns cols = from_column(x, c);
                    for (; r + R <= chunk_rows; r += R)
                        x86::tile<VnniProducts, F, R, 1, Prefetch>(base + r * row_bytes, row_bytes, cols, out + r, y_stride);
                    for (; r < chunk_rows; ++r)
                        x86::tile<VnniProducts, F, 1, 1, Prefetch>(base + r * row_bytes, row_bytes, cols, out + r, y_stride);
                } else {
                    const PairedColumns group = group_at(static_cast<const std::byte*>(x.packed) + packed_at, x.n_blocks, Pairs);
                    for (; r + R <= chunk_rows; r += R)
                        pair_tile<F, R, Pairs, Prefetch>(base + r * row_bytes, row_bytes, group, out + r, y_stride);
                    for (; r < chunk_rows; ++r)
                        pair_tile<F, 1, Pairs, Prefetch>(base + r * row_bytes, row_bytes, group, out + r, y_stride);
                }
            };
            static_assert(P == 4, "the dispatch below names each group size");
            const bool first = c == 0;
            switch (pairs) {
            case 4: first ? pass.template operator()<4, true>() : pass.template operator()<4, false>(); break;
            case 3: first ? pass.template operator()<3, true>() : pass.template operator()<3, false>(); break;
            case 2: first ? pass.template operator()<2, true>() : pass.template operator()<2, false>(); break;
            case 1: first ? pass.template operator()<1, true>() : pass.template operator()<1, false>(); break;
            default: first ? pass.template operator()<0, true>() : pass.template operator()<0, false>(); break;
            }
            if (pairs > 0) packed_at += group_bytes(x.n_blocks, pairs);
            c += pairs > 0 ? 2 * pairs : 1;
        }
    }
}

Kernels make_table() {
    Kernels k = x86::table<VnniProducts, 4, 4>("avx512-vnni");
    k.dot_q8[0] = rows_dot_pairs<x86::Q8_0, 4, 4>;
    k.dot_q8[1] = rows_dot_pairs<x86::Q4_0, 4, 4>;
    k.dot_q8[2] = rows_dot_pairs<x86::Q4_1, 4, 4>;
    k.dot_q8[3] = rows_dot_pairs<x86::Q5_0, 4, 4>;
    k.dot_q8[4] = rows_dot_pairs<x86::Q5_1, 4, 4>;
    k.pack_columns = pack_columns<4>;
    return k;
}

const Kernels avx512 = make_table();

}  // namespace

const Kernels* avx512_kernels() { return &avx512; }

}  // namespace cellm::openblas
