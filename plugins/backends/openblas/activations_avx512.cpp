// The fast activations with AVX-512F, 16 floats at a time.
#include "activations_simd.hpp"

#include <immintrin.h>

// GCC 12's 512-bit scalef, convert and insert intrinsics start from a self-initialised "undefined" register,
// which its own -Wmaybe-uninitialized then reports at every use; the values are all defined.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace cellm::openblas {
namespace {

struct Avx512 {
    using F = __m512;
    static constexpr int64_t lanes = 16;

    static __mmask16 first(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }
    static F load(const float* p) { return _mm512_loadu_ps(p); }
    static F load_partial(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(first(n), p); }
    static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
    static void store_partial(float* p, F v, int64_t n) { _mm512_mask_storeu_ps(p, first(n), v); }

    static float reduce_max(F v) { return _mm512_reduce_max_ps(v); }
    static float reduce_add(F v) { return _mm512_reduce_add_ps(v); }
    static F set1(float v) { return _mm512_set1_ps(v); }
    static F add(F a, F b) { return _mm512_add_ps(a, b); }
    static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
    static F div(F a, F b) { return _mm512_div_ps(a, b); }
    static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
    static F min(F a, F b) { return _mm512_min_ps(a, b); }
    static F max(F a, F b) { return _mm512_max_ps(a, b); }
    static F round(F v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    static F ldexp(F p, F n) { return _mm512_scalef_ps(p, n); }
    // value where v > limit, else y.
    static F where_above(F v, float limit, F value, F y) {
        return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, set1(limit), _CMP_GT_OQ), y, value);
    }

    // GELU's w = -z, reduced to n and r in double, eight lanes at a time.
    static void gelu_reduce_half(__m256 x, __m256& n, __m256& r) {
        const __m512d xd = _mm512_cvtps_pd(x);
        const __m512d wd = _mm512_mul_pd(xd, _mm512_fmadd_pd(_mm512_mul_pd(xd, xd), _mm512_set1_pd(-simd::gelu_k3),
                                                             _mm512_set1_pd(-simd::gelu_k1)));
        const __m512d clamped = _mm512_min_pd(_mm512_max_pd(wd, _mm512_set1_pd(simd::w_min)), _mm512_set1_pd(simd::w_max));
        const __m512d nd = _mm512_roundscale_pd(_mm512_mul_pd(clamped, _mm512_set1_pd(simd::log2e)),
                                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        n = _mm512_cvtpd_ps(nd);
        r = _mm512_cvtpd_ps(_mm512_fmadd_pd(nd, _mm512_set1_pd(-simd::ln2), clamped));
    }
    static F join(__m256 lo, __m256 hi) {
        return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
    }
    static void gelu_reduce(F x, F& n, F& r) {
        __m256 n2[2], r2[2];
        gelu_reduce_half(_mm512_castps512_ps256(x), n2[0], r2[0]);
        gelu_reduce_half(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)), n2[1], r2[1]);
        n = join(n2[0], n2[1]);
        r = join(r2[0], r2[1]);
    }
};

constinit const Activations avx512 = simd::table<Avx512>("avx512");

}  // namespace

const Activations* avx512_activations() { return &avx512; }

}  // namespace cellm::openblas
