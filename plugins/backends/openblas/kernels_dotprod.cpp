// The dot-product table (ARMv8.2's SDOT, phones from about 2018 on): one instruction sums each group of four
// byte products into its int32 lane, exactly the lanes blocks::dot_q8 defines.
#include "kernels_arm.hpp"

namespace cellm::openblas {
namespace {

struct DotProducts {
    static int32x4_t quads(int8x16_t a, int8x16_t b) { return vdotq_s32(vdupq_n_s32(0), a, b); }
};

constinit const Kernels dotprod = arm::table<DotProducts, 4, 2, 4>("neon-dotprod");

}  // namespace

const Kernels* dotprod_kernels() { return &dotprod; }

}  // namespace cellm::openblas
