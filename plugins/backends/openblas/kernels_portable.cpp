// The table every CPU can run: plain loops the compiler may vectorise for the build's baseline.
#include "kernels.hpp"

#include "blocks.h"
#include "reference_kernels.hpp"

#include <bit>
#include <cmath>

#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

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
    blocks::quantize_q8_k, {}, dot_f32, dot_f16, axpy_f32, axpy_f16, round_f16, to_f16, nullptr, nullptr, nullptr,
};

}  // namespace

const Kernels& portable_kernels() { return table; }

#if !defined(__x86_64__)
const Kernels* avx2_kernels() { return nullptr; }
const Kernels* avx512_kernels() { return nullptr; }
#endif
#if !defined(__aarch64__)
const Kernels* neon_kernels() { return nullptr; }
const Kernels* dotprod_kernels() { return nullptr; }
const Kernels* i8mm_kernels() { return nullptr; }
#endif

ExpF32 libm_exp() {
    static const ExpF32 checked = []() -> ExpF32 {
        const ExpF32 exp = kernels().exp_f32;
        if (exp == nullptr) return nullptr;
        // Every 65521st float pattern (a prime stride, so the low mantissa bits vary too) and the edges of the
        // algorithm's range.
        std::vector<float> x;
        for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 65521) x.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
        for (float v : {0.0f, -0.0f, 88.0f, -88.0f, 88.7f, -103.9f, -104.0f, 89.0f, -150.0f, 1e-30f})
            x.push_back(v);
        std::vector<float> y(x.size());
        exp(x.data(), y.data(), static_cast<int64_t>(x.size()));
        for (size_t i = 0; i < x.size(); ++i)
            if (std::bit_cast<uint32_t>(y[i]) != std::bit_cast<uint32_t>(std::exp(x[i])) && !(std::isnan(y[i]) && std::isnan(x[i])))
                return nullptr;
        return exp;
    }();
    return checked;
}

#if defined(__x86_64__)
namespace {

// Bit `bit` of ECX from CPUID leaf `leaf` (subleaf 0), for the features clang's __builtin_cpu_supports does not
// name. The AVX ones among them also need the OS to save the registers, which the named checks beside them
// cover.
bool cpuid_ecx(unsigned leaf, unsigned bit) {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(leaf, 0, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << bit)) != 0;
}

}  // namespace
#endif

bool has_avx512_vnni() {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && cpuid_ecx(7, 11);
#else
    return false;
#endif
}

const std::vector<const Kernels*>& runnable_kernels() {
    static const std::vector<const Kernels*> tables = [] {
        std::vector<const Kernels*> found;
#if defined(__x86_64__)
        __builtin_cpu_init();
        const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpuid_ecx(1, 29);  // F16C
        if (avx2 && has_avx512_vnni()) found.push_back(avx512_kernels());
        if (avx2) found.push_back(avx2_kernels());
#elif defined(__aarch64__)
        // What the kernel reports this core (and the OS) can run; the compiler's target says nothing about it.
        const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
        const bool dotprod = (hwcap & HWCAP_ASIMDDP) != 0;
        if (dotprod && (hwcap2 & HWCAP2_I8MM) != 0) found.push_back(i8mm_kernels());
        if (dotprod) found.push_back(dotprod_kernels());
        if ((hwcap & HWCAP_ASIMD) != 0) found.push_back(neon_kernels());
#endif
        found.push_back(&table);
        return found;
    }();
    return tables;
}

}  // namespace cellm::openblas
