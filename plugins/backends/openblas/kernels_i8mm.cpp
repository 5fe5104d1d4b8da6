// The matrix-multiply table (ARMv8.6's SMMLA, recent phones): SMMLA multiplies a 2x8 block of bytes by an 8x2
// one into a 2x2 block of int32 sums, so two weight rows meet two columns in one instruction, twice SDOT's
// work. The K-quants use it when there are several columns (prefill): their integer block sums are exact in any
// order, so a sum over eight products at once gives the reference's integers. The 32-element formats keep
// SDOT: blocks::dot_q8 defines their float lanes as sums of four, which SMMLA's sums of eight would merge.
#include "kernels_arm.hpp"

#include <utility>

namespace cellm::openblas {
namespace {

struct DotProducts {
    static int32x4_t quads(int8x16_t a, int8x16_t b) { return vdotq_s32(vdupq_n_s32(0), a, b); }
};

int8x16_t low_halves(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
int8x16_t high_halves(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

// Q8_K columns in pairs, as SMMLA reads them: for pair p (columns 2p and 2p + 1) and every 16 codes e ..,
// column 2p's codes e .. e + 7, then column 2p + 1's, then both columns' e + 8 .. e + 15. An odd last column is
// not packed (the products read it directly).
size_t pack_k_columns(const Q8KColumns& x, int64_t n_cols, void* out, int64_t part, int64_t parts) {
    const int64_t pairs = n_cols / 2, codes = x.n_blocks * 256;
    if (out == nullptr) return static_cast<size_t>(pairs * 2 * codes);
    for (int64_t p = part * pairs / parts; p < (part + 1) * pairs / parts; ++p) {
        const int8_t* c0 = x.codes + 2 * p * codes;
        const int8_t* c1 = c0 + codes;
        int8_t* o = static_cast<int8_t*>(out) + 2 * p * codes;
        for (int64_t e = 0; e < codes; e += 16) {
            const int8x16_t a = vld1q_s8(c0 + e), b = vld1q_s8(c1 + e);
            vst1q_s8(o + 2 * e, low_halves(a, b));
            vst1q_s8(o + 2 * e + 16, high_halves(a, b));
        }
    }
    return 0;
}

// Rows r0, r0 + 1 against P pairs of columns from pair p0 on. Lane order of every 2x2 result: (row 0, column 0),
// (row 0, column 1), (row 1, column 0), (row 1, column 1); each lane does k_row's float operations.
template <class F, int P>
void pair_tile(const uint8_t* row0, const uint8_t* row1, const Q8KColumns& x, int64_t p0, float* y, int64_t y_stride) {
    const auto* packed = static_cast<const int8_t*>(x.packed);
    const int64_t nb = x.n_blocks;
    float32x4_t acc[P];
    for (int p = 0; p < P; ++p) acc[p] = vdupq_n_f32(0.0f);
    arm::KScales k0, k1;
    for (int64_t i = 0; i < nb; ++i) {
        const uint8_t* b0 = row0 + i * F::bytes;
        const uint8_t* b1 = row1 + i * F::bytes;
        F::scales(b0, k0);
        F::scales(b1, k1);
        int32x4_t scaled[P];
        for (int p = 0; p < P; ++p) scaled[p] = vdupq_n_s32(0);
        // A pair or a half of sub-blocks of both rows at a time (they share their loads).
        [&]<int... G>(std::integer_sequence<int, G...>) {
            auto one = [&]<int g>() {
                arm::Codes d0[F::group], d1[F::group];
                F::template decode<g>(b0, d0);
                F::template decode<g>(b1, d1);
                for (int s = 0; s < F::group; ++s) {
                    const int j = g * F::group + s;
                    const int8x16_t w[4] = {low_halves(d0[s].lo, d1[s].lo), high_halves(d0[s].lo, d1[s].lo),
                                            low_halves(d0[s].hi, d1[s].hi), high_halves(d0[s].hi, d1[s].hi)};
                    const int32x4_t run_lo = {k0.run[2 * j], k0.run[2 * j], k1.run[2 * j], k1.run[2 * j]};
                    const int32x4_t run_hi = {k0.run[2 * j + 1], k0.run[2 * j + 1], k1.run[2 * j + 1], k1.run[2 * j + 1]};
                    for (int p = 0; p < P; ++p) {
                        const int8_t* a = packed + ((p0 + p) * 2 * nb + 2 * i) * 256 + 64 * j;
                        const int32x4_t lo =
                            vmmlaq_s32(vmmlaq_s32(vdupq_n_s32(0), w[0], vld1q_s8(a)), w[1], vld1q_s8(a + 16));
                        const int32x4_t hi =
                            vmmlaq_s32(vmmlaq_s32(vdupq_n_s32(0), w[2], vld1q_s8(a + 32)), w[3], vld1q_s8(a + 48));
                        scaled[p] = vmlaq_s32(vmlaq_s32(scaled[p], lo, run_lo), hi, run_hi);
                    }
                }
            };
            (one.template operator()<G>(), ...);
        }(std::make_integer_sequence<int, 8 / F::group>{});
        const float32x4_t d = {F::d(b0), F::d(b0), F::d(b1), F::d(b1)};
        for (int p = 0; p < P; ++p) {
            const int64_t c0 = 2 * (p0 + p);
            const float32x4_t dx = {x.scales[c0 * nb + i], x.scales[(c0 + 1) * nb + i], x.scales[c0 * nb + i],
                                    x.scales[(c0 + 1) * nb + i]};
            const float32x4_t dd = vmulq_f32(d, dx);
            const float32x4_t products = vcvtq_f32_s32(scaled[p]);
            if constexpr (F::affine) {
                const int16_t* s0 = x.sums + (c0 * nb + i) * 16;
                const int16_t* s1 = x.sums + ((c0 + 1) * nb + i) * 16;
                const int32x4_t min_sums = {arm::min_products(k0, s0), arm::min_products(k0, s1),
                                            arm::min_products(k1, s0), arm::min_products(k1, s1)};
                const float32x4_t dmin = {F::dmin(b0), F::dmin(b0), F::dmin(b1), F::dmin(b1)};
                const float32x4_t mins = vmulq_f32(vmulq_f32(dmin, dx), vcvtq_f32_s32(min_sums));
                acc[p] = vaddq_f32(acc[p], vfmaq_f32(vnegq_f32(mins), dd, products));
            } else {
                acc[p] = vfmaq_f32(acc[p], dd, products);
            }
        }
    }
    for (int p = 0; p < P; ++p) {
        float* out = y + 2 * (p0 + p) * y_stride;
        out[0] = vgetq_lane_f32(acc[p], 0);
        out[y_stride] = vgetq_lane_f32(acc[p], 1);
        out[1] = vgetq_lane_f32(acc[p], 2);
        out[y_stride + 1] = vgetq_lane_f32(acc[p], 3);
    }
}

// Pairs of rows against pairs of columns through SMMLA; an odd last row or column through SDOT (k_row).
template <class F>
void k_rows_dot(const void* rows, uint64_t row_bytes, int64_t n_rows, const Q8KColumns& x, int64_t n_cols, float* y,
                int64_t y_stride) {
    const auto* base = static_cast<const uint8_t*>(rows);
    const int64_t pairs = x.packed != nullptr ? n_cols / 2 : 0;
    int64_t r = 0;
    for (; pairs > 0 && r + 2 <= n_rows; r += 2) {
        const uint8_t* row0 = base + r * row_bytes;
        int64_t p = 0;
        for (; p + 2 <= pairs; p += 2) pair_tile<F, 2>(row0, row0 + row_bytes, x, p, y + r, y_stride);
        for (; p < pairs; ++p) pair_tile<F, 1>(row0, row0 + row_bytes, x, p, y + r, y_stride);
        for (int64_t c = 2 * pairs; c < n_cols; ++c)
            for (int64_t q = r; q < r + 2; ++q)
                arm::k_row<DotProducts, F, 1>(base + q * row_bytes, arm::k_columns_from(x, c), y + c * y_stride + q, y_stride);
    }
    // The rows left (all of them when there are no column pairs), as the SDOT table does them.
    arm::k_rows_dot<DotProducts, F, 4>(base + r * row_bytes, row_bytes, n_rows - r, x, n_cols, y + r, y_stride);
}

constexpr Kernels make() {
    Kernels k = arm::table<DotProducts, 4, 2, 4>("neon-i8mm");
    k.dot_q8k[0] = k_rows_dot<arm::KAffine<4>>;
    k.dot_q8k[1] = k_rows_dot<arm::KAffine<5>>;
    k.dot_q8k[2] = k_rows_dot<arm::Q6K>;
    k.pack_k_columns = pack_k_columns;
    return k;
}

// Constant-initialised: nothing built for this level runs before the CPU check has chosen it.
constinit const Kernels i8mm = make();

}  // namespace

const Kernels* i8mm_kernels() { return &i8mm; }

}  // namespace cellm::openblas
