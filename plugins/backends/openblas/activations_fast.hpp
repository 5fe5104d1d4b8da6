// GELU (tanh form), SiLU and GLU for precision "fast": vectorised, chosen at run time by CPU features, and
// within a few ULP of the reference's formulas evaluated exactly, instead of bit-equal to the reference's
// one-element-at-a-time libm calls (plugins/backends/cpu/reference_kernels.cpp).
//
// Both activations are x * sigmoid(z), so both compute x / (1 + exp(-z)): z = x for SiLU, and for GELU
// z = 2u, u = c (x + a x^3), since 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)). This form never subtracts nearly equal
// numbers (1 + tanh u does, for negative x), and GELU's z is taken in double, whose rounding in float would be
// magnified by |z| in exp. Where exp(-z) passes 2^127.5 (z < -88.37) the result, below 4e-37 in magnitude, is -0;
// x = -inf gives -0 (the reference gives NaN), +inf gives +inf, NaN stays NaN. activations_fast_test.cpp states
// the error bound.
#pragma once

#include <cstdint>
#include <vector>

namespace cellm::openblas {

// The reference's GELU constants: sqrt(2 / pi) and the cubic coefficient, as floats.
inline constexpr float gelu_sqrt_2_over_pi = 0.7978845608028654f;
inline constexpr float gelu_cubic = 0.044715f;

// out[i] = act(gate[i]) * up[i], act GELU when `gelu` else SiLU. out may be gate or up.
void glu_fast(const float* gate, const float* up, float* out, int64_t n, bool gelu);
// out[i] = GELU(x[i]); out may be x. (The tables' SiLU is measured, not used: see plugin.cpp.)
void gelu_fast(const float* x, float* out, int64_t n);
// Attention's weights: x[j] = exp(scale x[j] - max) / sum, over n > 0 finite scores, in place.
void softmax_fast(float* x, int64_t n, float scale);

// The functions above for one instruction set; tests and benchmarks reach every table the CPU can run.
struct Activations {
    const char* isa;  // "avx512", "avx2", "neon", "portable"
    void (*glu)(const float* gate, const float* up, float* out, int64_t n, bool gelu);
    void (*gelu)(const float* x, float* out, int64_t n);
    void (*silu)(const float* x, float* out, int64_t n);
    void (*softmax)(float* x, int64_t n, float scale);
};

// nullptr when not compiled in (builds for another instruction set).
const Activations* avx2_activations();
const Activations* avx512_activations();
const Activations* neon_activations();

// Every table this CPU can run, best first.
const std::vector<const Activations*>& runnable_activations();

}  // namespace cellm::openblas
