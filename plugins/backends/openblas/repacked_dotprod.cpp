// The repacked products (repacked.hpp) with SDOT's by-element form: a 16-byte register holds the same four codes
// of four rows, so SDOT against one quad of a column adds four products to each of the four rows' sums, and a
// group's sixteen rows are four registers. The layout is the one the AVX-512 kernel reads; the float steps are
// its steps too, so fast precision gives the same results on both.
#include "repacked.hpp"

#include <arm_neon.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace cellm::openblas {
namespace {

// sum[v] += rows 4 (v0 + v) .. 4 (v0 + v) + 3 of quad J (w[v]) times quad J of the column's 32 codes (a[J / 4],
// lane J % 4).
template <int J, int V>
[[gnu::always_inline]] inline void quad_sums(int32x4_t (&sum)[V], const int8x16_t (&w)[V], const int8x16_t (&a)[2]) {
    for (int v = 0; v < V; ++v) sum[v] = vdotq_laneq_s32(sum[v], w[v], a[J / 4], J % 4);
}

// Registers v0 .. v0 + V - 1 of rows of quad Q (Q < 4: chunk Q's low nibbles; Q >= 4: chunk Q - 4's high
// ones, each with its fifth bits), or of Q8_0's chunk Q.
template <bool Nibbles, bool Fifth, int Q, int V>
[[gnu::always_inline]] inline void quad_rows(const uint8_t* b, int v0, int8x16_t (&w)[V]) {
    if constexpr (Nibbles) {
        constexpr int chunk = Q % 4;
        for (int v = 0; v < V; ++v) {
            const uint8x16_t packed = vld1q_u8(b + 64 * chunk + 16 * (v0 + v));
            w[v] = vreinterpretq_s8_u8(Q < 4 ? vandq_u8(packed, vdupq_n_u8(0x0F)) : vshrq_n_u8(packed, 4));
        }
        if constexpr (Fifth) {
            // Bit Q of each byte moved to bit 4: the 16 to add where it is set.
            for (int v = 0; v < V; ++v) {
                uint8x16_t bits = vld1q_u8(b + 256 + 16 * (v0 + v));
                if constexpr (Q < 4) bits = vshlq_n_u8(bits, 4 - Q);
                if constexpr (Q > 4) bits = vshrq_n_u8(bits, Q - 4);
                w[v] = vorrq_s8(w[v], vreinterpretq_s8_u8(vandq_u8(bits, vdupq_n_u8(16))));
            }
        }
    } else {
        for (int v = 0; v < V; ++v) w[v] = vld1q_s8(reinterpret_cast<const int8_t*>(b + 64 * Q + 16 * (v0 + v)));
    }
}

// Rows 4 v0 .. 4 (v0 + V) - 1 of one group (V registers of four rows) against C columns, block after block:
// the whole group (V = 4) for one or two columns, half of it (V = 2) for four, so that the sums and the
// accumulators fit the 32 registers. The eight quads are unrolled, so every SDOT names its column lane as a
// constant.
template <bool Nibbles, bool Fifth, bool Affine, int V, int C>
void group_dot(const std::byte* group, int64_t nb, const Q8Columns& x, const int32_t* starts, float* y,
               int64_t y_stride, int v0, int64_t rows) {
    constexpr RepackedFormat f{Nibbles, Fifth, Affine, 0};
    float32x4_t acc[C][V];
    for (int c = 0; c < C; ++c)
        for (int v = 0; v < V; ++v) acc[c][v] = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < nb; ++i) {
        const auto* b = reinterpret_cast<const uint8_t*>(group + i * f.block_bytes());
        int8x16_t a[C][2];
        int32x4_t sum[C][V];
        for (int c = 0; c < C; ++c) {
            const int8_t* codes = x.codes + (c * nb + i) * 32;
            a[c][0] = vld1q_s8(codes);
            a[c][1] = vld1q_s8(codes + 16);
            // ARM's repacked Q8_0 codes are signed as stored (repacked.cpp), so its sums need no start.
            const int32x4_t start = vdupq_n_s32(Nibbles && !Affine ? starts[c * nb + i] : 0);
            for (int v = 0; v < V; ++v) sum[c][v] = start;
        }
        [&]<int... Q>(std::integer_sequence<int, Q...>) {
            auto one = [&]<int J>() {
                int8x16_t w[V];
                quad_rows<Nibbles, Fifth, J, V>(b, v0, w);
                for (int c = 0; c < C; ++c) quad_sums<J, V>(sum[c], w, a[c]);
            };
            (one.template operator()<Q>(), ...);
        }(std::make_integer_sequence<int, 8>{});
        const auto* halves = reinterpret_cast<const uint16_t*>(b + f.code_bytes()) + 4 * v0;
        for (int v = 0; v < V; ++v) {
            const float32x4_t d = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(halves + 4 * v)));
            for (int c = 0; c < C; ++c) {
                const int64_t at = c * nb + i;
                acc[c][v] = vfmaq_f32(acc[c][v], vmulq_n_f32(d, x.scales[at]), vcvtq_f32_s32(sum[c][v]));
                if constexpr (Affine)
                    acc[c][v] = vfmaq_n_f32(acc[c][v], vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(halves + 16 + 4 * v))),
                                            x.sums[at]);
            }
        }
    }
    // Rows past the weight's end are padding: only `rows` (counted from row 4 v0) are stored.
    for (int c = 0; c < C; ++c) {
        float out[4 * V];
        for (int v = 0; v < V; ++v) vst1q_f32(out + 4 * v, acc[c][v]);
        std::copy(out, out + std::clamp<int64_t>(rows, 0, 4 * V), y + c * y_stride + 4 * v0);
    }
}

template <bool Nibbles, bool Fifth, bool Affine>
void dot(const RepackedWeight& w, int64_t g0, int64_t g1, const Q8Columns& x, const int32_t* starts, int64_t n_cols,
         float* y, int64_t y_stride) {
    const int64_t nb = w.k / 32, group_bytes = nb * RepackedFormat{Nibbles, Fifth, Affine, 0}.block_bytes();
    auto from = [&](int64_t c) {
        return Q8Columns{x.codes + c * nb * 32, x.scales + c * nb, x.sums + c * nb, nullptr, nb, nullptr};
    };
    for (int64_t g = g0; g < g1; ++g) {
        const std::byte* group = w.data + g * group_bytes;
        const int64_t r0 = g * group_rows, rows = std::min(group_rows, w.m - r0);
        int64_t c = 0;
        for (; c + 4 <= n_cols; c += 4)
            for (int half = 0; half < 2 && 8 * half < rows; ++half)
                group_dot<Nibbles, Fifth, Affine, 2, 4>(group, nb, from(c), starts + c * nb, y + c * y_stride + r0,
                                                        y_stride, 2 * half, rows - 8 * half);
        for (; c + 2 <= n_cols; c += 2)
            group_dot<Nibbles, Fifth, Affine, 4, 2>(group, nb, from(c), starts + c * nb, y + c * y_stride + r0, y_stride,
                                                    0, rows);
        if (c < n_cols)
            group_dot<Nibbles, Fifth, Affine, 4, 1>(group, nb, from(c), starts + c * nb, y + c * y_stride + r0, y_stride,
                                                    0, rows);
    }
}

void dot_any(const RepackedWeight& w, int64_t g0, int64_t g1, const Q8Columns& x, const int32_t* starts,
             int64_t n_cols, float* y, int64_t y_stride) {
    with_repacked_format(w.type, [&]<bool Nibbles, bool Fifth, bool Affine>() {
        dot<Nibbles, Fifth, Affine>(w, g0, g1, x, starts, n_cols, y, y_stride);
    });
}

}  // namespace

constinit const RepackedDot repacked_dot_sdot = dot_any;

}  // namespace cellm::openblas
