// IEEE half and bfloat16 conversions, rounding as ggml does (nearest even, NaN kept quiet).
#include "blocks.h"

#include <bit>

namespace cellm::blocks {

float fp16_to_fp32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu;
    const uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
    if (exponent == 0) {
        // Zero or subnormal: mantissa * 2^-24 is exact in float.
        const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
        return sign != 0 ? -magnitude : magnitude;
    }
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t fp32_to_fp16(float f) {
    const uint32_t bits = std::bit_cast<uint32_t>(f);
    const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
    const uint32_t magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
    if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
    if (magnitude < 0x38800000u) {
        // Below the smallest normal half: adding 0.5 puts the value's 2^-24 units into the low mantissa bits,
        // and the FPU's own round-to-nearest-even does the rounding.
        const float shifted = std::bit_cast<float>(magnitude) + 0.5f;
        return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(0.5f)));
    }
    const uint32_t odd = (magnitude >> 13) & 1u;
    const uint32_t rebased = magnitude - (112u << 23) + 0xfffu + odd;
    return static_cast<uint16_t>(sign | (rebased >> 13));
}

float bf16_to_fp32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

uint16_t fp32_to_bf16(float f) {
    const uint32_t bits = std::bit_cast<uint32_t>(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 64u);
    return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace cellm::blocks
