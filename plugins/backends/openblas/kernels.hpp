// The inner loops where a step spends its time, one table per instruction set, chosen once at load by CPU
// feature detection. Each entry computes what the reference kernels compute (up to float summation order), so
// any table can be tested against the scalar backend. A new instruction set is one more file filling this table
// (kernels_x86.hpp and kernels_arm.hpp write theirs once for several feature levels).
#pragma once

#include <cellm/tensor.h>

#include <cstdint>
#include <vector>

namespace cellm::openblas {

// Columns of activations quantized by blocks::quantize_q8: column c's codes start at codes + c * 32 * n_blocks,
// its scales and block sums at scales + c * n_blocks and sums + c * n_blocks. `offsets` (column c's at
// offsets + c * 8 * n_blocks) holds, for every block, -128 times the sum of each group of four codes: what a
// kernel adds to byte products taken with signed weights moved to unsigned bytes (w + 128), so it needs no sign
// trick per product.
struct Q8Columns {
    const int8_t* codes;
    const float* scales;
    const float* sums;
    const int32_t* offsets;
    int64_t n_blocks;
    // The same columns as the table's pack_columns laid them out, or nullptr when the table has none.
    const void* packed = nullptr;
};

// Lays n_cols quantized columns out as the table's dot_q8[slot] reads them best, into `out` (which holds at
// least the bytes it returns for out == nullptr). Done once per product, shared by every thread: call p of
// `parts` (p = 0 .. parts - 1, in any order or at once) writes its share of the layout.
using PackColumns = size_t (*)(const Q8Columns& x, int64_t n_cols, int slot, void* out, int64_t part, int64_t parts);

// Quantizes n floats (a multiple of 32) as blocks::quantize_q8 does, bit for bit, and fills the offsets above.
using QuantizeQ8 = void (*)(const float* x, int64_t n, int8_t* codes, float* scales, float* sums, int32_t* offsets);

// y[c * y_stride + r] = row r . column c for rows [0, n_rows) (stored row_bytes apart, starting at `rows`) and
// columns [0, n_cols): each result bit-equal to blocks::dot_q8.
using RowsDotQ8 = void (*)(const void* rows, uint64_t row_bytes, int64_t n_rows, const Q8Columns& x, int64_t n_cols,
                           float* y, int64_t y_stride);
// Columns of activations quantized by blocks::quantize_q8_k for the K-quants: column c's codes start at
// codes + c * 256 * n_blocks, its scales at scales + c * n_blocks and its sums of 16 codes at
// sums + c * 16 * n_blocks.
struct Q8KColumns {
    const int8_t* codes;
    const float* scales;
    const int16_t* sums;
    int64_t n_blocks;
    // The same columns as the table's pack_k_columns laid them out, or nullptr when the table has none.
    const void* packed = nullptr;
};

// As PackColumns, for Q8_K columns and dot_q8k.
using PackKColumns = size_t (*)(const Q8KColumns& x, int64_t n_cols, void* out, int64_t part, int64_t parts);

// Quantizes n floats (a multiple of 256) to Q8_K blocks as blocks::quantize_q8_k does, bit for bit.
using QuantizeQ8K = void (*)(const float* x, int64_t n, int8_t* codes, float* scales, int16_t* sums);

// As RowsDotQ8 for K-quant rows against Q8_K columns: each result bit-equal to blocks::dot_q8_k.
using RowsDotQ8K = void (*)(const void* rows, uint64_t row_bytes, int64_t n_rows, const Q8KColumns& x,
                            int64_t n_cols, float* y, int64_t y_stride);

// Expands `n_blocks` blocks of one stored row into floats, as blocks::dequantize_row does.
using RowDequantize = void (*)(const void* row, float* out, int64_t n_blocks);

struct Kernels {
    const char* isa;  // "avx512-vnni", "avx2", "neon-i8mm", "neon-dotprod", "neon", "portable"
    QuantizeQ8 quantize_q8;
    // Indexed by Slot below; nullptr where this table has no specialised loop (callers use blocks::).
    RowsDotQ8 dot_q8[5];
    RowDequantize dequantize[5];
    PackColumns pack_columns;  // nullptr: dot_q8 reads Q8Columns directly
    QuantizeQ8K quantize_q8k;
    RowsDotQ8K dot_q8k[3];     // indexed by k_slot below; nullptr: callers use blocks::dot_q8_k
    // Attention's loops, bit-equal to the reference kernels: dots in eight fused lanes (reference_kernels.cpp
    // gives the order), y += a x as a multiply then an add.
    float (*dot_f32)(const float* a, const float* b, int64_t n);
    float (*dot_f16)(const float* a, const uint16_t* b, int64_t n);  // b holds fp16 values
    void (*axpy_f32)(float a, const float* x, float* y, int64_t n);
    void (*axpy_f16)(float a, const uint16_t* x, float* y, int64_t n);
    // y = x rounded to fp16 and back, as blocks::fp32_to_fp16 rounds finite values (to nearest, ties to even).
    void (*round_f16)(const float* x, float* y, int64_t n);
    // y = x as fp16 bits, each as blocks::fp32_to_fp16 converts it (NaN included): KV_STORE into F16 pools.
    void (*to_f16)(const float* x, uint16_t* y, int64_t n);
    // y = std::exp(x) for each element, as glibc computes expf (nullptr: none). Use it through libm_exp(),
    // which checks that this process's libm is that one.
    void (*exp_f32)(const float* x, float* y, int64_t n);
    // Attention over an F16 pool for `heads` query heads that share one KV head, rows picked by element offsets
    // from `base` (nullptr: the loops above, row by row and head by head). Each K or V row is converted once for
    // all the heads. dots_f16: scores[g * count + j] = dot_f16(q + g * n, base + rows[j], n). weighted_sum_f16:
    // head g's output (out + g * n) starts at 0, then axpy_f16(weights[g * count + j], base + rows[j], out + g * n,
    // n) for every j in order.
    void (*dots_f16)(const float* q, int64_t heads, const uint16_t* base, const int64_t* rows, int64_t count,
                     int64_t n, float* scores);
    void (*weighted_sum_f16)(const float* weights, int64_t heads, const uint16_t* base, const int64_t* rows,
                             int64_t count, int64_t n, float* out);
    PackKColumns pack_k_columns = nullptr;  // nullptr: dot_q8k reads Q8KColumns directly
};

// Which entry of dot_q8/dequantize serves a weight type, or -1.
inline int slot(cellm_dtype type) {
    switch (type) {
    case CELLM_TYPE_Q8_0: return 0;
    case CELLM_TYPE_Q4_0: return 1;
    case CELLM_TYPE_Q4_1: return 2;
    case CELLM_TYPE_Q5_0: return 3;
    case CELLM_TYPE_Q5_1: return 4;
    default: return -1;
    }
}

// Which entry of dot_q8k serves a K-quant weight type, or -1.
inline int k_slot(cellm_dtype type) {
    switch (type) {
    case CELLM_TYPE_Q4_K: return 0;
    case CELLM_TYPE_Q5_K: return 1;
    case CELLM_TYPE_Q6_K: return 2;
    default: return -1;
    }
}

const Kernels& portable_kernels();
// nullptr when not compiled in (builds for another instruction set).
const Kernels* avx2_kernels();
const Kernels* avx512_kernels();
const Kernels* neon_kernels();     // ARMv8.0 Advanced SIMD
const Kernels* dotprod_kernels();  // and SDOT
const Kernels* i8mm_kernels();     // and SMMLA

// Whether this CPU (and OS) runs the AVX-512 VNNI code: F, BW, DQ and VL, and VNNI, read from CPUID because
// clang's __builtin_cpu_supports does not know "avx512vnni".
bool has_avx512_vnni();

// Every table this CPU can run, best first (tests check them all).
const std::vector<const Kernels*>& runnable_kernels();

// The best table this CPU can run.
inline const Kernels& kernels() { return *runnable_kernels().front(); }

// The best table's exp_f32 where it agrees with this process's std::exp on a probe of values across expf's
// range, else nullptr (another libm, which the reference kernels would follow instead).
using ExpF32 = void (*)(const float* x, float* y, int64_t n);
ExpF32 libm_exp();

}  // namespace cellm::openblas
