// The fast activations' algorithm, written once over a vector type `V` that activations_avx2.cpp,
// activations_avx512.cpp and activations_neon.cpp define. Include it only from those files: everything here has
// internal linkage, so no function compiled with wider instructions is shared with code meant for an older CPU.
#pragma once

#include "activations_fast.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace cellm::openblas::simd {
namespace {

// GELU's z = k1 x + k3 x^3 (activations_fast.hpp), exact in double: the float constants' products fit.
constexpr double gelu_k1 = 2.0 * double{gelu_sqrt_2_over_pi};
constexpr double gelu_k3 = 2.0 * double{gelu_sqrt_2_over_pi} * double{gelu_cubic};

// exp(w) is taken for w = -z clamped to [w_min, w_max], so that 2^n stays in float's range: below w_min,
// 1 + exp(w) is 1 anyway; at w_max, n = 128 makes 2^n infinite, and so it does from w = 127.5 ln 2 on, where
// the result (below 4e-37 in magnitude) becomes -0: what x / inf gives for finite x, and what n = 128 selects
// for x = -inf.
constexpr float w_min = -87.0f, w_max = 88.5f, n_infinite = 127.5f;
constexpr double log2e = 1.44269504088896341, ln2 = 0.693147180559945309;
// ln 2 in two parts (Cephes): ln2_hi has 9 significant bits, so n ln2_hi is exact for every n here.
constexpr float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;

// exp(r) for |r| <= ln(2) / 2 as 1 + r + r^2 P(r), Cephes expf's minimax P.
template <class V>
typename V::F exp_reduced(typename V::F r) {
    typename V::F p = V::fma(V::set1(1.9875691500e-4f), r, V::set1(1.3981999507e-3f));
    p = V::fma(p, r, V::set1(8.3334519073e-3f));
    p = V::fma(p, r, V::set1(4.1665795894e-2f));
    p = V::fma(p, r, V::set1(1.6666665459e-1f));
    p = V::fma(p, r, V::set1(5.0000001201e-1f));
    return V::add(V::fma(p, V::mul(r, r), r), V::set1(1.0f));
}

// x / (1 + exp(w)), w = -z: w = n ln 2 + r (n whole, |r| <= ln(2) / 2) and exp(w) = 2^n exp(r). Forced inline:
// as a call, GCC reloads the constants for every vector, and GELU took 20% longer.
template <class V, bool Gelu>
[[gnu::always_inline]] inline typename V::F activate(typename V::F x) {
    using F = typename V::F;
    F n, r;
    if constexpr (Gelu) {
        V::gelu_reduce(x, n, r);
    } else {
        const F w = V::mul(x, V::set1(-1.0f));
        const F clamped = V::min(V::max(w, V::set1(w_min)), V::set1(w_max));  // a NaN becomes w_min
        n = V::round(V::mul(clamped, V::set1(static_cast<float>(log2e))));
        r = V::fma(n, V::set1(-ln2_lo), V::fma(n, V::set1(-ln2_hi), clamped));
    }
    const F y = V::div(x, V::add(V::set1(1.0f), V::ldexp(exp_reduced<V>(r), n)));
    // For x = -inf, y is -inf / inf.
    return V::where_above(n, n_infinite, V::set1(-0.0f), y);
}

template <class V, bool Gelu, bool Gated>
void apply(const float* x, const float* up, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + V::lanes <= n; i += V::lanes) {
        typename V::F y = activate<V, Gelu>(V::load(x + i));
        if constexpr (Gated) y = V::mul(y, V::load(up + i));
        V::store(out + i, y);
    }
    if (i == n) return;
    typename V::F y = activate<V, Gelu>(V::load_partial(x + i, n - i));
    if constexpr (Gated) y = V::mul(y, V::load_partial(up + i, n - i));
    V::store_partial(out + i, y, n - i);
}

template <class V>
void glu(const float* gate, const float* up, float* out, int64_t n, bool gelu) {
    gelu ? apply<V, true, true>(gate, up, out, n) : apply<V, false, true>(gate, up, out, n);
}

template <class V>
void gelu(const float* x, float* out, int64_t n) {
    apply<V, true, false>(x, nullptr, out, n);
}

template <class V>
void silu(const float* x, float* out, int64_t n) {
    apply<V, false, false>(x, nullptr, out, n);
}

// exp(w) for w <= 0 (a score less the largest), 0 below w_min.
template <class V>
typename V::F exp_nonpositive(typename V::F w) {
    using F = typename V::F;
    const F clamped = V::max(w, V::set1(w_min));
    const F n = V::round(V::mul(clamped, V::set1(static_cast<float>(log2e))));
    const F r = V::fma(n, V::set1(-ln2_lo), V::fma(n, V::set1(-ln2_hi), clamped));
    return V::where_above(V::mul(w, V::set1(-1.0f)), -w_min, V::set1(0.0f), V::ldexp(exp_reduced<V>(r), n));
}

template <class V>
void softmax(float* x, int64_t n, float scale) {
    using F = typename V::F;
    float best = -INFINITY;
    int64_t i = 0;
    if (n >= V::lanes) {
        F top = V::mul(V::load(x), V::set1(scale));
        for (i = V::lanes; i + V::lanes <= n; i += V::lanes) top = V::max(top, V::mul(V::load(x + i), V::set1(scale)));
        best = V::reduce_max(top);
    }
    for (int64_t j = i; j < n; ++j) best = std::max(best, scale * x[j]);
    F sum = V::set1(0.0f);
    float tail = 0.0f;
    for (i = 0; i + V::lanes <= n; i += V::lanes) {
        const F e = exp_nonpositive<V>(V::fma(V::load(x + i), V::set1(scale), V::set1(-best)));
        V::store(x + i, e);
        sum = V::add(sum, e);
    }
    if (i < n) {
        const F e = exp_nonpositive<V>(V::fma(V::load_partial(x + i, n - i), V::set1(scale), V::set1(-best)));
        V::store_partial(x + i, e, n - i);
        for (int64_t j = i; j < n; ++j) tail += x[j];
    }
    const F inverse = V::set1(1.0f / (V::reduce_add(sum) + tail));
    for (i = 0; i + V::lanes <= n; i += V::lanes) V::store(x + i, V::mul(V::load(x + i), inverse));
    if (i < n) V::store_partial(x + i, V::mul(V::load_partial(x + i, n - i), inverse), n - i);
}

template <class V>
constexpr Activations table(const char* isa) {
    return {isa, glu<V>, gelu<V>, silu<V>, softmax<V>};
}

}  // namespace
}  // namespace cellm::openblas::simd
