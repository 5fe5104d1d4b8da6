// The AVX-512 VNNI table: vpdpbusd sums four byte products into each int32 lane in one instruction.
//
// A 256-bit register holds one block's eight lanes, the order ggml and the reference sum in. The integer
// tiles here use 512-bit registers as two of those side by side: the same weight block in both halves, two
// columns' activation blocks, one in each. Every lane then goes through exactly the operations of the 256-bit
// form (same integers, same float multiply, fma and final sum per half), so results stay bit-equal to the
// reference while each instruction does the work of two. Tiles are R rows x 2P columns.
//
// From 16 columns on (prefill), lane-major tiles take over, for the legacy formats and the K-quants alike: a
// register holds the same lane of sixteen columns, so each weight block is decoded once for sixteen columns and
// its float steps run sixteen columns to an instruction (below).
#include "kernels_x86.hpp"

#include <cstddef>
#include <memory>
#include <type_traits>
#include <vector>

// GCC 12's 512-bit insert and broadcast intrinsics start from a self-initialised "undefined" register, which
// its own -Wuninitialized then reports at every use; the values are all defined.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

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
size_t pack_pairs(const Q8Columns& x, int64_t n_cols, void* out) {
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
            if constexpr (Prefetch) _mm_prefetch(reinterpret_cast<const char*>(b + R * row_bytes), _MM_HINT_T1);
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

// ---- Lane-major tiles, for products of 16 columns and more ------------------------------------------------
//
// A 512-bit register holds one lane of sixteen columns: lane l (the sum of products 4l..4l+3 of a block, the
// unit the reference accumulates) of columns c..c+15. Each weight block is decoded once per row for all sixteen
// columns, its four-byte group l broadcast against the sixteen columns' group l, so one vpdpbusd does sixteen
// columns' lane l; the block's float step, fma(d_w * d_x, float(lane), acc), then also covers sixteen columns,
// and a tile's eight lane registers add in the reference's order to sixteen results at once, with no horizontal
// sums. Signed weights meet the activations as w + 128 with the column's -128 * (sum of the group's activation
// codes) as the starting value, as in the pair tiles.
//
// The int32 lanes become floats without a conversion instruction: they start from the bits of 1.5 * 2^23, so
// that adding an integer |s| < 2^22 to those bits gives exactly the float 1.5 * 2^23 + s, and subtracting
// 1.5 * 2^23 leaves float(s) exactly (a block's lane is at most 4 * 128 * 127 in size). The subtraction can run
// on either of the vector ports of Intel's cores, where the conversion would share port 0 with vpdpbusd.
constexpr int lane_columns = 16;
constexpr int32_t magic_bits = 0x4B400000;  // 1.5 * 2^23 as a float

// One group of 16 columns, block after block: the codes of group l of the sixteen columns (64 bytes per l), the
// starting values of their lanes (magic + offsets, 16 int32 per l), their 16 scales and 16 block sums.
struct LaneBlock {
    int8_t codes[8][lane_columns * 4];
    int32_t start[8][lane_columns];
    float scales[lane_columns];
    float sums[lane_columns];
};

// Columns [c, c + count) (count <= 16) as lane-major blocks at `out`; the missing columns are zeros, which add
// nothing and are never stored.
void pack_lane_group(const Q8Columns& x, int64_t c, int64_t count, LaneBlock* out) {
    const int64_t nb = x.n_blocks;
    for (int64_t i = 0; i < nb; ++i) {
        LaneBlock& b = out[i];
        for (int64_t j = 0; j < lane_columns; ++j) {
            const bool real = j < count;
            const int64_t src = (c + j) * nb + i;
            for (int l = 0; l < 8; ++l) {
                if (real) std::memcpy(&b.codes[l][4 * j], x.codes + src * 32 + 4 * l, 4);
                else std::memset(&b.codes[l][4 * j], 0, 4);
                b.start[l][j] = magic_bits + (real ? x.offsets[src * 8 + l] : 0);
            }
            b.scales[j] = real ? x.scales[src] : 0.0f;
            b.sums[j] = real ? x.sums[src] : 0.0f;
        }
    }
}

// Lane groups cover the first lane_span(n) columns (none below 16); the rest, fewer than 8 columns, go to the
// kernels for few columns, so that a short remainder is not padded to sixteen.
int64_t lane_span(int64_t n_cols) {
    if (n_cols < lane_columns) return 0;
    const int64_t full = n_cols / lane_columns * lane_columns;
    return n_cols - full >= 8 ? n_cols : full;
}

int64_t lane_groups(int64_t n_cols) { return (lane_span(n_cols) + lane_columns - 1) / lane_columns; }

// Whether products with dot_q8[slot] (kernels.hpp's slot()) read lane groups from 16 columns on. Not Q8_0:
// its blocks need no decoding (one broadcast load), so the pair tiles, which reuse each activation load for
// four rows, measured as fast or faster there (docs/benchmarks.md).
constexpr bool lanes_for(int slot) { return slot != 0; }

// Four bytes from memory in all sixteen lanes. For a vector it has just stored, GCC would instead take each
// group out of the register with two shuffles, which compete with the products for the vector units.
__m512i broadcast_from(const int32_t* p) {
    __m512i v;
    asm("vpbroadcastd %1, %0" : "=v"(v) : "m"(*p));
    return v;
}

// A block's 32 weight codes as unsigned bytes: the code + 128 for signed formats (the starting values take the
// 128 back out), the code itself for unsigned ones. The 4- and 5-bit formats (Q8_0 stays on the pair tiles).
template <class F>
__m256i lane_codes(const uint8_t* b) {
    static_assert(!std::is_same_v<F, x86::Q8_0>, "lanes_for(0) is false");
    if constexpr (std::is_same_v<F, x86::Q5_0> || std::is_same_v<F, x86::Q5_1>) {
        constexpr int qh_at = F::affine ? 4 : 2;
        uint32_t qh;
        std::memcpy(&qh, b + qh_at, sizeof qh);
        const __m256i nibbles = x86::unpack_nibbles(b + qh_at + 4);
        // Q5_0: code + 128 = nibbles + 16 * bit + 112.
        const __m256i base = F::is_unsigned ? nibbles : _mm256_add_epi8(nibbles, _mm256_set1_epi8(112));
        return _mm256_mask_add_epi8(base, __mmask32{qh}, base, _mm256_set1_epi8(16));
    } else {
        constexpr int offset = F::affine ? 4 : 2;
        const __m256i nibbles = x86::unpack_nibbles(b + offset);
        return F::is_unsigned ? nibbles : _mm256_add_epi8(nibbles, _mm256_set1_epi8(120));  // Q4_0: code + 128
    }
}

// Blocks of a group per span: 16 KiB of a group's activations, which stay in the L1 cache for all the rows.
constexpr int64_t max_span_blocks = (16 * 1024) / sizeof(LaneBlock);

// The running sums of one row of a lane tile between two spans of blocks: its eight lane registers and its mins.
struct LaneSums {
    __m512 lanes[8];
    __m512 mins;
};

// R rows against one group of 16 columns over `nb` <= max_span_blocks blocks (x and rows start at the span's
// first block), carrying the rows' running sums in `sums`: from zero when `first`, and into y (the reference's
// final additions) when `last`. A product's blocks go in spans so that a span of the group stays in the L1
// cache for all the rows.
template <class F, int R, bool Prefetch>
void lane_tile(const uint8_t* rows, uint64_t row_bytes, const LaneBlock* x, int64_t nb, LaneSums* sums, bool first,
               bool last, int64_t n_valid, float* y, int64_t y_stride) {
    const __m512i magic = _mm512_set1_epi32(magic_bits);
    const __m512 magic_f = _mm512_castsi512_ps(magic);
    __m512 acc[R][8];
    __m512 mins[R];
    for (int r = 0; r < R; ++r) {
        mins[r] = _mm512_setzero_ps();
        for (int l = 0; l < 8; ++l) acc[r][l] = _mm512_setzero_ps();
    }
    if (!first) {
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            mins[r] = sums[r].mins;
            for (int l = 0; l < 8; ++l) acc[r][l] = sums[r].lanes[l];
        }
    }
    // The span's weight blocks decoded first, so that the broadcasts below read codes stored well before, not
    // stores still in flight.
    alignas(32) int32_t codes_of[max_span_blocks][R][8];
    float halves_of[max_span_blocks][R][2];
    for (int64_t i = 0; i < nb; ++i)
        for (int r = 0; r < R; ++r) {
            const uint8_t* b = rows + r * row_bytes + i * F::bytes;
            if constexpr (Prefetch) _mm_prefetch(reinterpret_cast<const char*>(b + R * row_bytes), _MM_HINT_T1);
            _mm256_store_si256(reinterpret_cast<__m256i*>(codes_of[i][r]), lane_codes<F>(b));
            _mm_storel_pi(reinterpret_cast<__m64*>(halves_of[i][r]), x86::block_halves(b));
        }
    for (int64_t i = 0; i < nb; ++i) {
        const LaneBlock& blk = x[i];
        const __m512 xs = _mm512_loadu_ps(blk.scales);
        const int32_t (*w)[8] = codes_of[i];
        __m512 d[R];
        for (int r = 0; r < R; ++r) {
            d[r] = _mm512_mul_ps(_mm512_set1_ps(halves_of[i][r][0]), xs);
            if constexpr (F::affine)
                mins[r] = _mm512_fmadd_ps(_mm512_set1_ps(halves_of[i][r][1]), _mm512_loadu_ps(blk.sums), mins[r]);
        }
        // Lane by lane, each activation register meeting every row of the tile.
#pragma GCC unroll 8
        for (int l = 0; l < 8; ++l) {
            const __m512i codes = _mm512_loadu_si512(blk.codes[l]);
            const __m512i start = F::is_unsigned ? magic : _mm512_loadu_si512(blk.start[l]);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                const __m512i lane = _mm512_dpbusd_epi32(start, broadcast_from(&w[r][l]), codes);
                acc[r][l] = _mm512_fmadd_ps(d[r], _mm512_sub_ps(_mm512_castsi512_ps(lane), magic_f), acc[r][l]);
            }
        }
    }
    if (!last) {
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            sums[r].mins = mins[r];
            for (int l = 0; l < 8; ++l) sums[r].lanes[l] = acc[r][l];
        }
        return;
    }
    // Every index into acc must be a constant for GCC to keep it in registers; with one loop over rows left
    // rolled it would store the accumulators after every block.
    float out[R][lane_columns];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
        const __m512 even = _mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][4]), _mm512_add_ps(acc[r][2], acc[r][6]));
        const __m512 odd = _mm512_add_ps(_mm512_add_ps(acc[r][1], acc[r][5]), _mm512_add_ps(acc[r][3], acc[r][7]));
        _mm512_storeu_ps(out[r], _mm512_add_ps(_mm512_add_ps(even, odd), mins[r]));
    }
    for (int r = 0; r < R; ++r)
        for (int64_t j = 0; j < n_valid; ++j) y[j * y_stride + r] = out[r][j];
}

// The lane groups first, then the pair layout of the columns left; part p packs lane groups p, p + parts, ...
// and the first part the pairs too.
template <int P>
size_t pack_columns(const Q8Columns& x, int64_t n_cols, int slot, void* out, int64_t part, int64_t parts) {
    if (!lanes_for(slot)) return part == 0 ? pack_pairs<P>(x, n_cols, out) : 0;
    const int64_t span = lane_span(n_cols), groups = lane_groups(n_cols);
    const size_t lane_bytes = static_cast<size_t>(groups * x.n_blocks) * sizeof(LaneBlock);
    auto* base = static_cast<std::byte*>(out);
    if (out == nullptr) return lane_bytes + pack_pairs<P>(from_column(x, span), n_cols - span, nullptr);
    for (int64_t g = part; g < groups; g += parts)
        pack_lane_group(x, g * lane_columns, std::min<int64_t>(lane_columns, span - g * lane_columns),
                        reinterpret_cast<LaneBlock*>(base) + g * x.n_blocks);
    if (part == 0) pack_pairs<P>(from_column(x, span), n_cols - span, base + lane_bytes);
    return lane_bytes;
}

// Lane tiles over the lane groups, then the pair tiles over the columns left. Rows go in chunks that stay in
// cache while every group passes over them, and each group's blocks in spans of at most 16 KiB, so that long
// rows (Q8_0 at k = 2048 is 74 KiB of a group) do not stream the activations from L2 for every tile.
template <class F, int R, int P>
void rows_dot_wide(const void* rows, uint64_t row_bytes, int64_t n_rows, const Q8Columns& x, int64_t n_cols, float* y,
                   int64_t y_stride) {
    const int64_t span = lane_span(n_cols), groups = lane_groups(n_cols), nb = x.n_blocks;
    const auto* lanes = static_cast<const LaneBlock*>(x.packed);
    const int64_t chunk = std::max<int64_t>(R, static_cast<int64_t>((64 * 1024) / row_bytes) / R * R);
    // Only where a row's blocks take several spans: the running sums of a chunk's rows between spans.
    const bool spans = groups > 0 && nb > max_span_blocks;
    const std::unique_ptr<LaneSums[]> sums(spans ? new LaneSums[static_cast<size_t>(std::min(chunk, n_rows))]
                                                 : nullptr);
    for (int64_t r0 = 0; r0 < n_rows && groups > 0; r0 += chunk) {
        const auto* base = static_cast<const uint8_t*>(rows) + r0 * row_bytes;
        const int64_t chunk_rows = std::min(chunk, n_rows - r0);
        for (int64_t g = 0; g < groups; ++g) {
            const int64_t c = g * lane_columns, valid = std::min<int64_t>(lane_columns, span - c);
            float* out = y + c * y_stride + r0;
            for (int64_t i0 = 0; i0 < nb; i0 += max_span_blocks) {
                const int64_t count = std::min(max_span_blocks, nb - i0);
                const LaneBlock* group = lanes + g * nb + i0;
                const bool first = i0 == 0, last = i0 + count == nb;
                auto pass = [&]<bool Prefetch>() {
                    int64_t r = 0;
                    for (; r + R <= chunk_rows; r += R)
                        lane_tile<F, R, Prefetch>(base + r * row_bytes + i0 * F::bytes, row_bytes, group, count,
                                                  sums.get() + r, first, last, valid, out + r, y_stride);
                    for (; r < chunk_rows; ++r)
                        lane_tile<F, 1, Prefetch>(base + r * row_bytes + i0 * F::bytes, row_bytes, group, count,
                                                  sums.get() + r, first, last, valid, out + r, y_stride);
                };
                g == 0 ? pass.template operator()<true>() : pass.template operator()<false>();
            }
        }
    }
    if (span == n_cols) return;
    Q8Columns rest = from_column(x, span);
    rest.packed = lanes + groups * nb;
    rows_dot_pairs<F, 4, P>(rows, row_bytes, n_rows, rest, n_cols - span, y + span * y_stride, y_stride);
}

// ---- K-quant lane-major tiles -------------------------------------------------------------------------------
//
// The same layout for K-quant blocks against Q8_K columns: a register holds sixteen columns' group g (four
// consecutive elements) of a block, and a weight block's group g, broadcast, meets it in one vpdpbusd. Here
// the activations are the unsigned operand, a + 128 (the weights' codes are all non-negative, so they serve as
// the signed one, straight from memory), and everything a block adds up is one integer per column, as in the
// reference: per sub-block the products' sum times its scale (vpmulld), less 128 * (sum over the block of scale
// times code), the term the +128 brought in, which is the row's and the same for every column; the mins
// (Q4_K/Q5_K) or Q6_K's -32 * scales meet the activations' sums of 16 codes through vpdpwssd. Only then do
// the block's floats run, sixteen columns in one register, in dot_q8k_row's order.

// One block of sixteen columns: the codes + 128 of group g (64 bytes per g), the scales, and the sums of runs
// 2t and 2t + 1 of each column as an int16 pair (t = 0..7).
struct KLaneBlock {
    uint8_t codes[64][lane_columns * 4];
    float scales[lane_columns];
    int32_t runs[8][lane_columns];
};

void pack_k_lane_group(const Q8KColumns& x, int64_t c, int64_t count, KLaneBlock* out) {
    const int64_t nb = x.n_blocks;
    for (int64_t i = 0; i < nb; ++i) {
        KLaneBlock& b = out[i];
        for (int64_t j = 0; j < lane_columns; ++j) {
            const bool real = j < count;
            const int64_t src = (c + j) * nb + i;
            for (int g = 0; g < 64; ++g) {
                uint32_t four = 0;
                if (real) std::memcpy(&four, x.codes + src * 256 + 4 * g, 4);
                four ^= 0x80808080u;
                std::memcpy(&b.codes[g][4 * j], &four, 4);
            }
            b.scales[j] = real ? x.scales[src] : 0.0f;
            for (int t = 0; t < 8; ++t) {
                const int16_t pair[2] = {real ? x.sums[src * 16 + 2 * t] : int16_t{0},
                                         real ? x.sums[src * 16 + 2 * t + 1] : int16_t{0}};
                std::memcpy(&b.runs[t][j], pair, 4);
            }
        }
    }
}

size_t pack_k_columns(const Q8KColumns& x, int64_t n_cols, void* out, int64_t part, int64_t parts) {
    const int64_t span = lane_span(n_cols), groups = lane_groups(n_cols);
    if (out != nullptr)
        for (int64_t g = part; g < groups; g += parts)
            pack_k_lane_group(x, g * lane_columns, std::min<int64_t>(lane_columns, span - g * lane_columns),
                              static_cast<KLaneBlock*>(out) + g * x.n_blocks);
    return static_cast<size_t>(groups * x.n_blocks) * sizeof(KLaneBlock);
}

// One block of one row, decoded for the lane tile: codes in element order, the scale of each sub-block (32
// elements for Q4_K/Q5_K, 16 for Q6_K), the int16 pairs that meet the run sums, and 128 * sum(scale * code).
struct KLaneRow {
    alignas(64) int8_t codes[256];
    int32_t scales[16];
    int32_t run_factors[8];
    int32_t correction;
    float d, dmin;
};

template <class F>
void decode_lane_row(const uint8_t* b, KLaneRow& out) {
    x86::KBlock k;
    F::decode(b, k);
    __m256i weighted = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(out.codes + 32 * j), k.codes[j]);
        weighted = VnniProducts::scaled(weighted, k.codes[j], _mm256_set1_epi8(1), k.scales[j]);
    }
    out.correction = 128 * x86::hsum_i32(weighted);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.run_factors), k.run_factors);
    if constexpr (F::affine) {
        for (int j = 0; j < 8; ++j) out.scales[j] = static_cast<int16_t>(_mm256_extract_epi16(k.scales[j], 0));
    } else {
        for (int s = 0; s < 16; ++s) out.scales[s] = static_cast<int8_t>(b[192 + s]);
    }
    out.d = k.d;
    out.dmin = k.dmin;
}

// R rows against every lane group: each block of the R rows is decoded once for all the groups, whose float
// sums wait in `acc` (group g, row r at (g * R + r) * 16) from one block to the next.
template <class F, int R>
void k_lane_rows(const uint8_t* rows, uint64_t row_bytes, const KLaneBlock* x, int64_t nb, int64_t groups,
                 float* acc) {
    constexpr int S = F::affine ? 8 : 16, G = 64 / S;  // sub-blocks per block, groups of four per sub-block
    std::fill(acc, acc + groups * R * lane_columns, 0.0f);
    KLaneRow row[R];
    for (int64_t i = 0; i < nb; ++i) {
        for (int r = 0; r < R; ++r) decode_lane_row<F>(rows + r * row_bytes + i * F::bytes, row[r]);
        for (int64_t g = 0; g < groups; ++g) {
            const KLaneBlock& blk = x[g * nb + i];
            __m512i scaled[R], runs[R];
            for (int r = 0; r < R; ++r) {
                scaled[r] = _mm512_set1_epi32(-row[r].correction);
                runs[r] = _mm512_setzero_si512();
            }
            for (int s = 0; s < S; ++s) {
                __m512i a[G];
                for (int k = 0; k < G; ++k) a[k] = _mm512_loadu_si512(blk.codes[s * G + k]);
                for (int r = 0; r < R; ++r) {
                    __m512i products = _mm512_setzero_si512();
                    for (int k = 0; k < G; ++k) {
                        int32_t four;
                        std::memcpy(&four, row[r].codes + 4 * (s * G + k), 4);
                        products = _mm512_dpbusd_epi32(products, a[k], _mm512_set1_epi32(four));
                    }
                    const __m512i scale = _mm512_set1_epi32(row[r].scales[s]);
                    scaled[r] = _mm512_add_epi32(scaled[r], _mm512_mullo_epi32(products, scale));
                }
            }
            for (int t = 0; t < 8; ++t) {
                const __m512i pairs = _mm512_loadu_si512(blk.runs[t]);
                for (int r = 0; r < R; ++r)
                    runs[r] = _mm512_dpwssd_epi32(runs[r], pairs, _mm512_set1_epi32(row[r].run_factors[t]));
            }
            const __m512 xs = _mm512_loadu_ps(blk.scales);
            for (int r = 0; r < R; ++r) {
                float* sum = acc + (g * R + r) * lane_columns;
                const __m512 d = _mm512_mul_ps(_mm512_set1_ps(row[r].d), xs);
                if constexpr (F::affine) {
                    const __m512 dmin = _mm512_mul_ps(_mm512_set1_ps(row[r].dmin), xs);
                    const __m512 mins = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(runs[r]));
                    const __m512 block = _mm512_fmsub_ps(d, _mm512_cvtepi32_ps(scaled[r]), mins);
                    _mm512_storeu_ps(sum, _mm512_add_ps(_mm512_loadu_ps(sum), block));
                } else {
                    const __m512i offset = _mm512_sub_epi32(scaled[r], _mm512_slli_epi32(runs[r], 5));
                    _mm512_storeu_ps(sum, _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(offset), _mm512_loadu_ps(sum)));
                }
            }
        }
    }
}

// Lane tiles over the lane groups, then x86::k_rows_dot over the columns left.
template <class F, int R>
void k_rows_dot_wide(const void* rows, uint64_t row_bytes, int64_t n_rows, const Q8KColumns& x, int64_t n_cols,
                     float* y, int64_t y_stride) {
    const int64_t span = lane_span(n_cols), groups = lane_groups(n_cols), nb = x.n_blocks;
    const auto* lanes = static_cast<const KLaneBlock*>(x.packed);
    const auto* base = static_cast<const uint8_t*>(rows);
    std::vector<float> acc(static_cast<size_t>(groups * R * lane_columns));
    auto store = [&](int64_t r0, int rows_done) {
        for (int64_t g = 0; g < groups; ++g) {
            const int64_t c = g * lane_columns, valid = std::min<int64_t>(lane_columns, span - c);
            for (int r = 0; r < rows_done; ++r) {
                const float* sums = acc.data() + (g * rows_done + r) * lane_columns;
                for (int64_t j = 0; j < valid; ++j) y[(c + j) * y_stride + r0 + r] = sums[j];
            }
        }
    };
    int64_t r = 0;
    if (groups > 0) {
        for (; r + R <= n_rows; r += R) {
            k_lane_rows<F, R>(base + r * row_bytes, row_bytes, lanes, nb, groups, acc.data());
            store(r, R);
        }
        for (; r < n_rows; ++r) {
            k_lane_rows<F, 1>(base + r * row_bytes, row_bytes, lanes, nb, groups, acc.data());
            store(r, 1);
        }
    }
    if (span == n_cols) return;
    const Q8KColumns rest{x.codes + span * nb * 256, x.scales + span * nb, x.sums + span * nb * 16, nb};
    x86::k_rows_dot<VnniProducts, F>(rows, row_bytes, n_rows, rest, n_cols - span, y + span * y_stride, y_stride);
}

constexpr Kernels make_table() {
    Kernels k = x86::table<VnniProducts, 4, 4, 32>("avx512-vnni");
    k.dot_q8[0] = rows_dot_pairs<x86::Q8_0, 4, 4>;  // lanes_for(0) is false
    k.dot_q8[1] = rows_dot_wide<x86::Q4_0, 2, 4>;
    k.dot_q8[2] = rows_dot_wide<x86::Q4_1, 2, 4>;
    k.dot_q8[3] = rows_dot_wide<x86::Q5_0, 2, 4>;
    k.dot_q8[4] = rows_dot_wide<x86::Q5_1, 2, 4>;
    k.pack_columns = pack_columns<4>;
    k.dot_q8k[0] = k_rows_dot_wide<x86::KAffine<4>, 4>;
    k.dot_q8k[1] = k_rows_dot_wide<x86::KAffine<5>, 4>;
    k.dot_q8k[2] = k_rows_dot_wide<x86::Q6K, 4>;
    k.pack_k_columns = pack_k_columns;
    return k;
}

constinit const Kernels avx512 = make_table();

}  // namespace

const Kernels* avx512_kernels() { return &avx512; }

}  // namespace cellm::openblas
