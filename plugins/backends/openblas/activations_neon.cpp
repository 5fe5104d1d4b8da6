// The fast activations with ARM64's Advanced SIMD (every 64-bit ARM core), 4 floats at a time. Min and max are
// the IEEE minNum/maxNum forms, which return the number where one operand is NaN: what the algorithm expects of
// them (activations_simd.hpp), and what x86's min/max give with the NaN first.
#include "activations_simd.hpp"

#include <arm_neon.h>

#include <cstring>

namespace cellm::openblas {
namespace {

struct Neon {
    using F = float32x4_t;
    static constexpr int64_t lanes = 4;

    static F load(const float* p) { return vld1q_f32(p); }
    // Through a buffer: reads and writes stay within the n elements.
    static F load_partial(const float* p, int64_t n) {
        float buffer[4] = {};
        std::memcpy(buffer, p, static_cast<size_t>(n) * sizeof(float));
        return vld1q_f32(buffer);
    }
    static void store(float* p, F v) { vst1q_f32(p, v); }
    static void store_partial(float* p, F v, int64_t n) {
        float buffer[4];
        vst1q_f32(buffer, v);
        std::memcpy(p, buffer, static_cast<size_t>(n) * sizeof(float));
    }

    static float reduce_max(F v) { return vmaxvq_f32(v); }
    static float reduce_add(F v) { return vaddvq_f32(v); }
    static F set1(float v) { return vdupq_n_f32(v); }
    static F add(F a, F b) { return vaddq_f32(a, b); }
    static F mul(F a, F b) { return vmulq_f32(a, b); }
    static F div(F a, F b) { return vdivq_f32(a, b); }
    static F fma(F a, F b, F c) { return vfmaq_f32(c, a, b); }
    static F min(F a, F b) { return vminnmq_f32(a, b); }
    static F max(F a, F b) { return vmaxnmq_f32(a, b); }
    static F round(F v) { return vrndnq_f32(v); }
    // p 2^n for whole n in [-126, 128], 2^n built from its exponent bits (n = 128: infinity's).
    static F ldexp(F p, F n) {
        const int32x4_t bits = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
        return vmulq_f32(p, vreinterpretq_f32_s32(bits));
    }
    // value where v > limit, else y.
    static F where_above(F v, float limit, F value, F y) { return vbslq_f32(vcgtq_f32(v, vdupq_n_f32(limit)), value, y); }

    // GELU's w = -z, reduced to n and r in double, two lanes at a time.
    static void gelu_reduce_half(float64x2_t xd, float64x2_t& nd, float64x2_t& rd) {
        const float64x2_t wd = vmulq_f64(xd, vfmaq_f64(vdupq_n_f64(-simd::gelu_k1), vmulq_f64(xd, xd), vdupq_n_f64(-simd::gelu_k3)));
        const float64x2_t clamped = vminnmq_f64(vmaxnmq_f64(wd, vdupq_n_f64(simd::w_min)), vdupq_n_f64(simd::w_max));
        nd = vrndnq_f64(vmulq_f64(clamped, vdupq_n_f64(simd::log2e)));
        rd = vfmaq_f64(clamped, nd, vdupq_n_f64(-simd::ln2));
    }
    static void gelu_reduce(F x, F& n, F& r) {
        float64x2_t n_lo, r_lo, n_hi, r_hi;
        gelu_reduce_half(vcvt_f64_f32(vget_low_f32(x)), n_lo, r_lo);
        gelu_reduce_half(vcvt_high_f64_f32(x), n_hi, r_hi);
        n = vcvt_high_f32_f64(vcvt_f32_f64(n_lo), n_hi);
        r = vcvt_high_f32_f64(vcvt_f32_f64(r_lo), r_hi);
    }
};

constinit const Activations neon = simd::table<Neon>("neon");

}  // namespace

const Activations* neon_activations() { return &neon; }

}  // namespace cellm::openblas
