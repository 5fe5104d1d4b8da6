// The AVX-512 VNNI table: vpdpbusd sums four byte products into each int32 lane in one instruction. It runs at
// 256-bit width (AVX-512VL), which keeps ggml's eight-lane order, and uses the 32 vector registers for tiles of
// 4 rows x 4 columns.
#include "kernels_x86.hpp"

namespace cellm::openblas {
namespace {

struct VnniProducts {
    static __m256i lanes(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
    // (w + 128) . a - 128 * sum(a) in each lane: one instruction per product, the offsets loaded from memory.
    static __m256i signed_lanes(__m256i w, __m256i a, const int32_t* offsets) {
        const __m256i start = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(offsets));
        return _mm256_dpbusd_epi32(start, _mm256_xor_si256(w, _mm256_set1_epi8(-128)), a);
    }
};

const Kernels avx512 = x86::table<VnniProducts, 4, 4>("avx512-vnni");

}  // namespace

const Kernels* avx512_kernels() { return &avx512; }

}  // namespace cellm::openblas
