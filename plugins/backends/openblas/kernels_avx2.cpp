// The AVX2 + FMA + F16C table: byte products through maddubs (pairs into int16) and madd (pairs into int32);
// the int16 step cannot saturate since |unsigned| <= 128 and |signed| <= 127. 16 vector registers hold a tile
// of 4 rows x 2 columns.
#include "kernels_x86.hpp"

namespace cellm::openblas {
namespace {

struct MaddubsProducts {
    static __m256i lanes(__m256i u, __m256i s) {
        return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
    }
    // w + 128 would overflow maddubs' int16 pairs, so the weight's sign moves onto the activations instead.
    static __m256i signed_lanes(__m256i w, __m256i a, const int32_t*) {
        return lanes(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
    }
    // acc + the int16 pairs of u . a, each multiplied by its int16 scale, summed in pairs into int32 lanes.
    static __m256i scaled(__m256i acc, __m256i u, __m256i a, __m256i scales) {
        return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), scales));
    }
};

constinit const Kernels avx2 = x86::table<MaddubsProducts, 4, 2, 16>("avx2");

}  // namespace

const Kernels* avx2_kernels() { return &avx2; }

}  // namespace cellm::openblas
