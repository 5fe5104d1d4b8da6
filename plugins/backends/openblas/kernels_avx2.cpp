// The AVX2 + FMA + F16C table (x86-64 since Haswell). This file alone is compiled with those instructions
// enabled, and it uses nothing but intrinsics, so no AVX2 code leaks into functions shared with other files.
//
// Quantized dot products follow ggml's scheme: a block's 32 weight codes and 32 activation codes multiply as
// bytes (maddubs: unsigned x signed, with the sign moved onto the activations for signed weights), the
// products sum to eight int32 lanes, and only then meet the block's two scales in float.
#include "kernels.hpp"

#include <immintrin.h>

#include <cstring>

namespace cellm::openblas {
namespace {

float half(const void* p) {
    uint16_t h;
    std::memcpy(&h, p, sizeof h);
    return _cvtsh_ss(h);
}

// a * b + c rounded once (std::fma would be an inline function other files could share; see the top).
float fused(float a, float b, float c) {
    return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

float hsum(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

// 16 bytes of packed 4-bit codes as 32 bytes: element j (low nibble of byte j) in lane j, element j + 16 (high
// nibble) in lane j + 16, GGUF's order.
__m256i unpack_nibbles(const uint8_t* packed) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Sum of products of unsigned bytes u and signed bytes s, pairwise into eight int32 lanes, as floats. The int16
// intermediate cannot saturate: |u| <= 128 and |s| <= 127 for every caller.
__m256 dot_u8_s8(__m256i u, __m256i s) {
    const __m256i pairs = _mm256_maddubs_epi16(u, s);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

// Signed x signed: move x's sign onto y.
__m256 dot_s8_s8(__m256i x, __m256i y) { return dot_u8_s8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x)); }

__m256i load_codes(const int8_t* codes) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes)); }

// Block layouts (GGUF): Q8_0 = fp16 d + 32 int8; Q4_0 = fp16 d + 16 bytes (code - 8); Q4_1 = fp16 d, fp16 m
// + 16 bytes (d code + m). Each format gives its 32 codes as bytes, and whether they are unsigned.
struct Q8_0 {
    static constexpr int64_t bytes = 34;
    static constexpr bool affine = false, is_unsigned = false;
    static __m256i codes(const uint8_t* b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)); }
};
struct Q4_0 {
    static constexpr int64_t bytes = 18;
    static constexpr bool affine = false, is_unsigned = false;
    static __m256i codes(const uint8_t* b) { return _mm256_sub_epi8(unpack_nibbles(b + 2), _mm256_set1_epi8(8)); }
};
struct Q4_1 {
    static constexpr int64_t bytes = 20;
    static constexpr bool affine = true, is_unsigned = true;
    static __m256i codes(const uint8_t* b) { return unpack_nibbles(b + 4); }
};

// R rows against C columns at once: each weight block is decoded once for C columns and each activation block
// loaded once for R rows, and the R*C independent accumulators hide the FMA latency. Every (row, column) pair
// still accumulates in blocks::dot_q8's order, so tiling never changes a bit.
template <class F, int R, int C>
void tile(const uint8_t* rows, uint64_t row_bytes, const Q8Columns& x, float* y, int64_t y_stride) {
    __m256 acc[R][C];
    float mins[R][C];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
            acc[r][c] = _mm256_setzero_ps();
            mins[r][c] = 0.0f;
        }
    for (int64_t i = 0; i < x.n_blocks; ++i) {
        __m256i a[C];
        for (int c = 0; c < C; ++c) a[c] = load_codes(x.codes + (c * x.n_blocks + i) * 32);
        for (int r = 0; r < R; ++r) {
            const uint8_t* b = rows + r * row_bytes + i * F::bytes;
            // The same block of the next tile's row: the rows of a task are one contiguous stream, and asking
            // early keeps enough memory requests in flight to use the bandwidth.
            _mm_prefetch(reinterpret_cast<const char*>(b + R * row_bytes), _MM_HINT_T0);
            const __m256i w = F::codes(b);
            const float dw = half(b);
            for (int c = 0; c < C; ++c) {
                const __m256 d = _mm256_set1_ps(dw * x.scales[c * x.n_blocks + i]);
                const __m256 products = F::is_unsigned ? dot_u8_s8(w, a[c]) : dot_s8_s8(w, a[c]);
                acc[r][c] = _mm256_fmadd_ps(d, products, acc[r][c]);
                if constexpr (F::affine) mins[r][c] = fused(half(b + 2), x.sums[c * x.n_blocks + i], mins[r][c]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) y[c * y_stride + r] = hsum(acc[r][c]) + mins[r][c];
}

template <class F>
void rows_dot(const void* rows, uint64_t row_bytes, int64_t n_rows, const Q8Columns& x, int64_t n_cols, float* y,
              int64_t y_stride) {
    const auto* base = static_cast<const uint8_t*>(rows);
    int64_t c = 0;
    for (; c + 2 <= n_cols; c += 2) {
        const Q8Columns pair{x.codes + c * x.n_blocks * 32, x.scales + c * x.n_blocks, x.sums + c * x.n_blocks, x.n_blocks};
        int64_t r = 0;
        for (; r + 4 <= n_rows; r += 4) tile<F, 4, 2>(base + r * row_bytes, row_bytes, pair, y + c * y_stride + r, y_stride);
        for (; r < n_rows; ++r) tile<F, 1, 2>(base + r * row_bytes, row_bytes, pair, y + c * y_stride + r, y_stride);
    }
    if (c < n_cols) {
        const Q8Columns last{x.codes + c * x.n_blocks * 32, x.scales + c * x.n_blocks, x.sums + c * x.n_blocks, x.n_blocks};
        int64_t r = 0;
        for (; r + 4 <= n_rows; r += 4) tile<F, 4, 1>(base + r * row_bytes, row_bytes, last, y + c * y_stride + r, y_stride);
        for (; r < n_rows; ++r) tile<F, 1, 1>(base + r * row_bytes, row_bytes, last, y + c * y_stride + r, y_stride);
    }
}

// Eight codes of bytes as floats.
__m256 widen(__m128i eight_bytes, bool is_signed) {
    return _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(eight_bytes) : _mm256_cvtepu8_epi32(eight_bytes));
}

void store_block(__m256i codes, bool is_signed, __m256 d, __m256 m, float* out) {
    const __m128i lo = _mm256_castsi256_si128(codes), hi = _mm256_extracti128_si256(codes, 1);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int p = 0; p < 4; ++p) _mm256_storeu_ps(out + 8 * p, _mm256_add_ps(_mm256_mul_ps(widen(parts[p], is_signed), d), m));
}

void dequantize_q8_0(const void* row, float* out, int64_t n_blocks) {
    const auto* b = static_cast<const uint8_t*>(row);
    for (int64_t i = 0; i < n_blocks; ++i, b += Q8_0::bytes, out += 32)
        store_block(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)), true, _mm256_set1_ps(half(b)),
                    _mm256_setzero_ps(), out);
}

void dequantize_q4_0(const void* row, float* out, int64_t n_blocks) {
    const auto* b = static_cast<const uint8_t*>(row);
    for (int64_t i = 0; i < n_blocks; ++i, b += Q4_0::bytes, out += 32)
        store_block(_mm256_sub_epi8(unpack_nibbles(b + 2), _mm256_set1_epi8(8)), true, _mm256_set1_ps(half(b)),
                    _mm256_setzero_ps(), out);
}

void dequantize_q4_1(const void* row, float* out, int64_t n_blocks) {
    const auto* b = static_cast<const uint8_t*>(row);
    for (int64_t i = 0; i < n_blocks; ++i, b += Q4_1::bytes, out += 32)
        store_block(unpack_nibbles(b + 4), false, _mm256_set1_ps(half(b)), _mm256_set1_ps(half(b + 2)), out);
}

__m256 load_f16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

float dot_f32(const float* a, const float* b, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float sum = hsum(acc);
    for (; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

float dot_f16(const float* a, const uint16_t* b, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load_f16(b + i), acc);
    float sum = hsum(acc);
    for (; i < n; ++i) sum += a[i] * _cvtsh_ss(b[i]);
    return sum;
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(va, _mm256_loadu_ps(x + i))));
    for (; i < n; ++i) y[i] += a * x[i];
}

void axpy_f16(float a, const uint16_t* x, float* y, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(va, load_f16(x + i))));
    for (; i < n; ++i) y[i] += a * _cvtsh_ss(x[i]);
}

const Kernels table = {
    "avx2",
    {rows_dot<Q8_0>, rows_dot<Q4_0>, rows_dot<Q4_1>},
    {dequantize_q8_0, dequantize_q4_0, dequantize_q4_1},
    dot_f32,
    dot_f16,
    axpy_f32,
    axpy_f16,
};

}  // namespace

const Kernels* avx2_kernels() { return &table; }

}  // namespace cellm::openblas
