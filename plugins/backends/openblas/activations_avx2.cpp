// The fast activations with AVX2 and FMA, 8 floats at a time.
#include "activations_simd.hpp"

#include <immintrin.h>

#include <cstring>

namespace cellm::openblas {
namespace {

struct Avx2 {
    using F = __m256;
    static constexpr int64_t lanes = 8;

    static F load(const float* p) { return _mm256_loadu_ps(p); }
    // Through a buffer: reads and writes stay within the n elements.
    static F load_partial(const float* p, int64_t n) {
        float buffer[8] = {};
        std::memcpy(buffer, p, static_cast<size_t>(n) * sizeof(float));
        return _mm256_loadu_ps(buffer);
    }
    static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
    static void store_partial(float* p, F v, int64_t n) {
        float buffer[8];
        _mm256_storeu_ps(buffer, v);
        std::memcpy(p, buffer, static_cast<size_t>(n) * sizeof(float));
    }

    static float reduce_max(F v) {
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
    }
    static float reduce_add(F v) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
    }
    static F set1(float v) { return _mm256_set1_ps(v); }
    static F add(F a, F b) { return _mm256_add_ps(a, b); }
    static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
    static F div(F a, F b) { return _mm256_div_ps(a, b); }
    static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
    static F min(F a, F b) { return _mm256_min_ps(a, b); }
    static F max(F a, F b) { return _mm256_max_ps(a, b); }
    static F round(F v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    // p 2^n for whole n in [-126, 128], 2^n built from its exponent bits (n = 128: infinity's).
    static F ldexp(F p, F n) {
        const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
        return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
    }
    // value where v > limit, else y.
    static F where_above(F v, float limit, F value, F y) {
        return _mm256_blendv_ps(y, value, _mm256_cmp_ps(v, set1(limit), _CMP_GT_OQ));
    }

    // GELU's w = -z, reduced to n and r in double, four lanes at a time.
    static void gelu_reduce_half(__m128 x, __m128& n, __m128& r) {
        const __m256d xd = _mm256_cvtps_pd(x);
        const __m256d wd = _mm256_mul_pd(xd, _mm256_fmadd_pd(_mm256_mul_pd(xd, xd), _mm256_set1_pd(-simd::gelu_k3),
                                                             _mm256_set1_pd(-simd::gelu_k1)));
        const __m256d clamped = _mm256_min_pd(_mm256_max_pd(wd, _mm256_set1_pd(simd::w_min)), _mm256_set1_pd(simd::w_max));
        const __m256d nd = _mm256_round_pd(_mm256_mul_pd(clamped, _mm256_set1_pd(simd::log2e)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        n = _mm256_cvtpd_ps(nd);
        r = _mm256_cvtpd_ps(_mm256_fmadd_pd(nd, _mm256_set1_pd(-simd::ln2), clamped));
    }
    static void gelu_reduce(F x, F& n, F& r) {
        __m128 n2[2], r2[2];
        gelu_reduce_half(_mm256_castps256_ps128(x), n2[0], r2[0]);
        gelu_reduce_half(_mm256_extractf128_ps(x, 1), n2[1], r2[1]);
        n = _mm256_set_m128(n2[1], n2[0]);
        r = _mm256_set_m128(r2[1], r2[0]);
    }
};

constinit const Activations avx2 = simd::table<Avx2>("avx2");

}  // namespace

const Activations* avx2_activations() { return &avx2; }

}  // namespace cellm::openblas
