// The portable table (scalar, in double: slower than the SIMD tables but within their bound) and the choice of
// the best table this CPU can run.
#include "activations_fast.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace cellm::openblas {
namespace {

// x / (1 + exp(w)), w = -z (activations_fast.hpp); -0 from where the SIMD tables give it.
float activate(double x, double w) {
    return w >= 127.5 * std::numbers::ln2 ? -0.0f : static_cast<float>(x / (1.0 + std::exp(w)));
}

float gelu_one(float x) {
    const double xd = x;
    const double k1 = 2.0 * double{gelu_sqrt_2_over_pi}, k3 = k1 * double{gelu_cubic};
    return activate(xd, -xd * (k1 + k3 * xd * xd));
}

float silu_one(float x) { return activate(x, -double{x}); }

void glu(const float* gate, const float* up, float* out, int64_t n, bool gelu) {
    for (int64_t i = 0; i < n; ++i) out[i] = (gelu ? gelu_one(gate[i]) : silu_one(gate[i])) * up[i];
}

void gelu(const float* x, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = gelu_one(x[i]);
}

void silu(const float* x, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = silu_one(x[i]);
}

// In double, as the others: exact enough to stand in for the SIMD tables.
void softmax(float* x, int64_t n, float scale) {
    float best = -INFINITY;
    for (int64_t i = 0; i < n; ++i) best = std::max(best, scale * x[i]);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = static_cast<float>(std::exp(double{scale} * x[i] - best));
        sum += x[i];
    }
    const auto inverse = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) x[i] *= inverse;
}

const Activations portable = {"portable", glu, gelu, silu, softmax};

const Activations& best() { return *runnable_activations().front(); }

}  // namespace

#if !defined(__x86_64__)
const Activations* avx2_activations() { return nullptr; }
const Activations* avx512_activations() { return nullptr; }
#endif
#if !defined(__aarch64__)
const Activations* neon_activations() { return nullptr; }
#endif

const std::vector<const Activations*>& runnable_activations() {
    static const std::vector<const Activations*> tables = [] {
        std::vector<const Activations*> found;
#if defined(__x86_64__)
        __builtin_cpu_init();
        const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        if (avx2 && __builtin_cpu_supports("avx512f")) found.push_back(avx512_activations());
        if (avx2) found.push_back(avx2_activations());
#elif defined(__aarch64__)
        found.push_back(neon_activations());  // Advanced SIMD is part of ARMv8.0's 64-bit state
#endif
        found.push_back(&portable);
        return found;
    }();
    return tables;
}

void glu_fast(const float* gate, const float* up, float* out, int64_t n, bool gelu) { best().glu(gate, up, out, n, gelu); }
void gelu_fast(const float* x, float* out, int64_t n) { best().gelu(x, out, n); }
void softmax_fast(float* x, int64_t n, float scale) { best().softmax(x, n, scale); }

}  // namespace cellm::openblas
