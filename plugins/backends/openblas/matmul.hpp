// MATMUL (y = W x) on the CPU, fast, with weight rows split across threads.
// - Weight types with a Q8 dot product (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), at any number of columns: each column is
//   quantized once to Q8 blocks and meets tiles of weight rows block by block as integers. Bit-equal to the
//   reference, and as fast at prefill as expanding the weights for SGEMM (bench/kernels_bench measures both).
// - Fast precision: the block formats' rows repacked sixteen to a register, one float step per block
//   (repacked.hpp); not bit-equal, bounded as docs/benchmarks.md writes.
// - K-quants (Q4_K, Q5_K, Q6_K): the same with Q8_K blocks of 256 (blocks::dot_q8_k); bit-equal too.
// - Both lay the quantized columns out once per product for the kernel table (pack_columns, pack_k_columns),
//   the threads sharing that work; from 16 columns on the AVX-512 table reads them sixteen to a register.
// - Float types (F32, F16, BF16) with many columns: the activations are rounded as MATMUL defines,
//   each thread expands a panel of weight rows to floats and multiplies it with OpenBLAS SGEMM; with few
//   columns each expanded row meets the columns directly. Equal to the reference up to summation order.
#pragma once

#include "plan.hpp"
#include "repacked.hpp"
#include "thread_pool.hpp"

#include <span>
#include <vector>

namespace cellm::openblas {

// Columns from which SGEMM beats expanded rows meeting each column (bench/kernels_bench).
inline constexpr int64_t blas_min_columns = 8;
// Columns from which an F32 product goes in column blocks of this width (matmul_sgemm).
inline constexpr int64_t wide_columns = 1024;

// Memory the matmuls of one backend instance reuse from step to step.
struct MatmulScratch {
    std::vector<int8_t> codes;          // Q8 activations, column after column
    std::vector<float> scales, sums;    // per block of 32, column after column
    std::vector<int32_t> offsets;       // 8 per block of 32 (Q8Columns)
    std::vector<int32_t> starts;        // fast precision: -bias * code sum per block of 32 (RepackedDot)
    // Fast precision: each product of one dispatch (matmul_repacked), its rows and where its tasks begin.
    struct RepackedPart {
        const RepackedWeight* rows;
        float* y;
        int64_t per_task, first_task;
    };
    std::vector<RepackedPart> parts;
    // The plan node whose quantization the Q8 arrays above hold (-1: none or unknown): products of one input
    // (Q, K and V; gate and up) quantize it once. The executor resets it for every plan it runs.
    int32_t q8_input = -1;
    int32_t q8k_input = -1;             // the same for Q8_K blocks
    std::vector<int16_t> k_sums;        // Q8_K: 16 per block of 256, column after column
    std::vector<std::byte> packed;      // the columns as the kernel table's pack_columns lays them out
    std::vector<float> rounded;         // activations as the weight type's dot product sees them
    std::vector<std::vector<float>> panels;  // per thread: expanded weight rows
};

// How the products of a weight type read their input: as floats, or quantized once per input to Q8 blocks of 32
// or Q8_K blocks of 256 (MatmulScratch::q8_input, q8k_input).
enum class ColumnForm { floats, q8, q8k };
ColumnForm column_form(cellm_dtype weight);

// Quantizing an input in the scratch, column by column, as the products would: the op that makes the input can do
// it while each column is in cache, and the products then skip their own pass (and its hand-off to the pool).
// - prepare_columns sizes the arrays for n columns of k values; call it before any quantize_column.
// - quantize_column quantizes the k floats at x as column c; calls for different columns may run at once.
// - columns_hold records that the arrays now hold plan node x_index in that form, once every column is done.
void prepare_columns(MatmulScratch& scratch, ColumnForm form, int64_t n, int64_t k);
void quantize_column(MatmulScratch& scratch, ColumnForm form, const float* x, int64_t c, int64_t k);
void columns_hold(MatmulScratch& scratch, ColumnForm form, int32_t x_index);

// One product y = W x of several that share x.
struct Product {
    const cpu::Node* w;
    const cpu::Node* y;
};

// Fast precision's repacked products of one x (Q, K and V; gate and up) in one dispatch to the pool, x quantized
// once. False, having done nothing, unless every weight has the same repacked block format and is read-only.
bool matmul_repacked(std::span<const Product> products, const cpu::Node& x, ThreadPool& pool, MatmulScratch& scratch,
                     RepackedWeights& repacked, int32_t x_index);

// `repacked` is nullptr in exact precision; in fast precision the block formats go through it (repacked.hpp)
// where this CPU has the kernel.
// `x_index` is x's node in the plan being run (-1: unknown, always quantize).
void matmul(const cpu::Node& w, const cpu::Node& x, const cpu::Node& y, ThreadPool& pool, MatmulScratch& scratch,
            RepackedWeights* repacked = nullptr, int32_t x_index = -1);

// The SGEMM path for any weight type: Y^T (n x m) = X (n x k) W^T with X rounded by blocks::round_activations
// and W expanded panel by panel. MATMUL uses it for the float types; for the block formats it is only
// the yardstick bench/kernels_bench compares the integer tiles with (there it uses exact block sums, where
// MATMUL defines Q4_1/Q5_1 with the fp16 sums ggml stores).
void matmul_sgemm(const cpu::Node& w, const cpu::Node& x, const cpu::Node& y, ThreadPool& pool, MatmulScratch& scratch);

}  // namespace cellm::openblas
