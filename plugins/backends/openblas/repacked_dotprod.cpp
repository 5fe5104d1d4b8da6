// The repacked products (repacked.hpp) with SDOT's by-element form: a 16-byte register holds the same four codes
// of four rows, so SDOT against one quad of a column adds four products to each of the four rows' sums, and a
// group's sixteen rows are four registers. The layout is the one the AVX-512 kernel reads; the float steps are
// its steps too, so fast precision gives the same results on both.
#include "repacked.hpp"

#include <arm_neon.h>

#include <algorithm>
#include <cstring>

namespace cellm::openblas {
namespace {

// Rows 4v .. 4v + 3 of a quad's fifth bits (64-bit mask: bit 4r + t for row r's code t), as 16 per byte.
int8x16_t fifth_bits(uint64_t mask, int v) {
    const auto bits = static_cast<uint16_t>(mask >> (16 * v));
    const uint8x16_t spread = vcombine_u8(vdup_n_u8(static_cast<uint8_t>(bits)), vdup_n_u8(static_cast<uint8_t>(bits >> 8)));
    const uint8x16_t select = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    return vreinterpretq_s8_u8(vandq_u8(vtstq_u8(spread, select), vdupq_n_u8(16)));
}

// Sixteen rows of one group against C columns, block after block.
template <bool Nibbles, bool Fifth, bool Affine, int C>
void group_dot(const std::byte* group, int64_t nb, const Q8Columns& x, const int32_t* starts, float* y,
               int64_t y_stride, int64_t rows) {
    constexpr RepackedFormat f{Nibbles, Fifth, Affine, 0};
    float32x4_t acc[C][4];
    for (int c = 0; c < C; ++c)
        for (int v = 0; v < 4; ++v) acc[c][v] = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < nb; ++i) {
        const auto* b = reinterpret_cast<const uint8_t*>(group + i * f.block_bytes());
        int8x16_t a[C][2];
        int32x4_t sum[C][4];
        for (int c = 0; c < C; ++c) {
            const int8_t* codes = x.codes + (c * nb + i) * 32;
            a[c][0] = vld1q_s8(codes);
            a[c][1] = vld1q_s8(codes + 16);
            // Q8_0's codes go back to signed bytes below, so its sums need no start.
            const int32_t start = Nibbles && !Affine ? starts[c * nb + i] : 0;
            for (int v = 0; v < 4; ++v) sum[c][v] = vdupq_n_s32(start);
        }
        // Quad j's four registers of rows meet quad j of every column.
        auto quad = [&](int j, const int8x16_t (&w)[4]) {
            for (int c = 0; c < C; ++c)
                for (int v = 0; v < 4; ++v) {
                    const int8x16_t act = a[c][j / 4];
                    switch (j % 4) {
                    case 0: sum[c][v] = vdotq_laneq_s32(sum[c][v], w[v], act, 0); break;
                    case 1: sum[c][v] = vdotq_laneq_s32(sum[c][v], w[v], act, 1); break;
                    case 2: sum[c][v] = vdotq_laneq_s32(sum[c][v], w[v], act, 2); break;
                    default: sum[c][v] = vdotq_laneq_s32(sum[c][v], w[v], act, 3); break;
                    }
                }
        };
        if constexpr (Nibbles) {
            for (int q = 0; q < 4; ++q) {
                int8x16_t low[4], high[4];
                for (int v = 0; v < 4; ++v) {
                    const uint8x16_t packed = vld1q_u8(b + 64 * q + 16 * v);
                    low[v] = vreinterpretq_s8_u8(vandq_u8(packed, vdupq_n_u8(0x0F)));
                    high[v] = vreinterpretq_s8_u8(vshrq_n_u8(packed, 4));
                }
                if constexpr (Fifth) {
                    uint64_t lo_mask, hi_mask;
                    std::memcpy(&lo_mask, b + 256 + 8 * q, sizeof lo_mask);
                    std::memcpy(&hi_mask, b + 256 + 8 * (q + 4), sizeof hi_mask);
                    for (int v = 0; v < 4; ++v) {
                        low[v] = vorrq_s8(low[v], fifth_bits(lo_mask, v));
                        high[v] = vorrq_s8(high[v], fifth_bits(hi_mask, v));
                    }
                }
                quad(q, low);
                quad(q + 4, high);
            }
        } else {
            for (int j = 0; j < 8; ++j) {
                int8x16_t w[4];
                for (int v = 0; v < 4; ++v)
                    w[v] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(b + 64 * j + 16 * v), vdupq_n_u8(0x80)));
                quad(j, w);
            }
        }
        const auto* halves = reinterpret_cast<const uint16_t*>(b + f.code_bytes());
        for (int v = 0; v < 4; ++v) {
            const float32x4_t d = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(halves + 4 * v)));
            const float32x4_t m =
                Affine ? vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(halves + 16 + 4 * v))) : vdupq_n_f32(0.0f);
            for (int c = 0; c < C; ++c) {
                const int64_t at = c * nb + i;
                acc[c][v] = vfmaq_f32(acc[c][v], vmulq_n_f32(d, x.scales[at]), vcvtq_f32_s32(sum[c][v]));
                if constexpr (Affine) acc[c][v] = vfmaq_n_f32(acc[c][v], m, x.sums[at]);
            }
        }
    }
    for (int c = 0; c < C; ++c) {
        float out[16];
        for (int v = 0; v < 4; ++v) vst1q_f32(out + 4 * v, acc[c][v]);
        std::copy(out, out + rows, y + c * y_stride);
    }
}

template <bool Nibbles, bool Fifth, bool Affine>
void dot(const RepackedWeight& w, int64_t g0, int64_t g1, const Q8Columns& x, const int32_t* starts, int64_t n_cols,
         float* y, int64_t y_stride) {
    const int64_t nb = w.k / 32, group_bytes = nb * RepackedFormat{Nibbles, Fifth, Affine, 0}.block_bytes();
    for (int64_t g = g0; g < g1; ++g) {
        const std::byte* group = w.data + g * group_bytes;
        const int64_t r0 = g * group_rows, rows = std::min(group_rows, w.m - r0);
        int64_t c = 0;
        for (; c + 2 <= n_cols; c += 2) {
            const Q8Columns cols{x.codes + c * nb * 32, x.scales + c * nb, x.sums + c * nb, nullptr, nb, nullptr};
            group_dot<Nibbles, Fifth, Affine, 2>(group, nb, cols, starts + c * nb, y + c * y_stride + r0, y_stride, rows);
        }
        if (c < n_cols) {
            const Q8Columns cols{x.codes + c * nb * 32, x.scales + c * nb, x.sums + c * nb, nullptr, nb, nullptr};
            group_dot<Nibbles, Fifth, Affine, 1>(group, nb, cols, starts + c * nb, y + c * y_stride + r0, y_stride, rows);
        }
    }
}

void dot_any(const RepackedWeight& w, int64_t g0, int64_t g1, const Q8Columns& x, const int32_t* starts,
             int64_t n_cols, float* y, int64_t y_stride) {
    switch (w.type) {
    case CELLM_TYPE_Q4_0: dot<true, false, false>(w, g0, g1, x, starts, n_cols, y, y_stride); break;
    case CELLM_TYPE_Q4_1: dot<true, false, true>(w, g0, g1, x, starts, n_cols, y, y_stride); break;
    case CELLM_TYPE_Q5_0: dot<true, true, false>(w, g0, g1, x, starts, n_cols, y, y_stride); break;
    case CELLM_TYPE_Q5_1: dot<true, true, true>(w, g0, g1, x, starts, n_cols, y, y_stride); break;
    default: dot<false, false, false>(w, g0, g1, x, starts, n_cols, y, y_stride); break;  // Q8_0
    }
}

}  // namespace

const RepackedDot repacked_dot_sdot = dot_any;

}  // namespace cellm::openblas
