// The table every CPU can run: plain loops the compiler may vectorise for the build's baseline.
#include "kernels.hpp"

#include "blocks.h"
#include "reference_kernels.hpp"

namespace cellm::openblas {
namespace {

float dot_f32(const float* a, const float* b, int64_t n) {
    return cpu::dot_in_lanes(a, [b](int64_t i) { return b[i]; }, n);
}

float dot_f16(const float* a, const uint16_t* b, int64_t n) {
    return cpu::dot_in_lanes(a, [b](int64_t i) { return blocks::fp16_to_fp32(b[i]); }, n);
}

void quantize_q8(const float* x, int64_t n, int8_t* codes, float* scales, float* sums, int32_t* offsets) {
    blocks::quantize_q8(x, n, codes, scales, sums);
    for (int64_t g = 0; g < n / 4; ++g)
        offsets[g] = -128 * (codes[4 * g] + codes[4 * g + 1] + codes[4 * g + 2] + codes[4 * g + 3]);
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void axpy_f16(float a, const uint16_t* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * blocks::fp16_to_fp32(x[i]);
}

void round_f16(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = blocks::fp16_to_fp32(blocks::fp32_to_fp16(x[i]));
}

void to_f16(const float* x, uint16_t* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = blocks::fp32_to_fp16(x[i]);
}

const Kernels table = {
    "portable", quantize_q8, {}, {}, nullptr,
    blocks::quantize_q8_k, {}, dot_f32, dot_f16, axpy_f32, axpy_f16, round_f16, to_f16, nullptr, nullptr,
};

}  // namespace

const Kernels& portable_kernels() { return table; }

#if !defined(__x86_64__)
const Kernels* avx2_kernels() { return nullptr; }
const Kernels* avx512_kernels() { return nullptr; }
#endif

const std::vector<const Kernels*>& runnable_kernels() {
    static const std::vector<const Kernels*> tables = [] {
        std::vector<const Kernels*> found;
#if defined(__x86_64__)
        __builtin_cpu_init();
        const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
        if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
            found.push_back(avx512_kernels());
        if (avx2) found.push_back(avx2_kernels());
#endif
        found.push_back(&table);
        return found;
    }();
    return tables;
}

}  // namespace cellm::openblas
