// The AVX-512 VNNI table: vpdpbusd sums four byte products into each int32 lane in one instruction. It runs at
// 256-bit width (AVX-512VL), which keeps ggml's eight-lane order, and uses the 32 vector registers for tiles of
// 4 rows x 4 columns.
#include "kernels_x86.hpp"

namespace cellm::openblas {
namespace {

struct VnniProducts {
    static __m256i lanes(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
};

const Kernels avx512 = x86::table<VnniProducts, 4, 4>("avx512-vnni");

}  // namespace

const Kernels* avx512_kernels() { return &avx512; }

}  // namespace cellm::openblas
