// The ARMv8.0 table (every 64-bit ARM core, down to the Cortex-A53 of the cheapest phones): byte products
// through widening multiplies into int16 (at most 128 * 127, no overflow), then pairwise adds into the
// four-element groups SDOT would form.
#include "kernels_arm.hpp"

namespace cellm::openblas {
namespace {

struct WideningProducts {
    static int32x4_t quads(int8x16_t a, int8x16_t b) {
        const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
        const int16x8_t hi = vmull_high_s8(a, b);
        return vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi));
    }
};

constinit const Kernels neon = arm::table<WideningProducts, 2, 2, 2>("neon");

}  // namespace

const Kernels* neon_kernels() { return &neon; }

}  // namespace cellm::openblas
