// Quantized block formats (GGUF's layouts) on the CPU: conversion between float rows and stored rows.
// The scalar backend defines the meaning of every weight type through these functions; faster CPU
// backends and the synthetic-model generator reuse them.
#pragma once

#include <cellm/tensor.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cellm::blocks {

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);  // round to nearest even
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);  // round to nearest even

// True for the types dequantize_row and quantize_row handle: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
// Q4_K, Q5_K, Q6_K, and cellm's own I8S_G*, I4S_G*, Q4A_G* (group sizes 32, 64, 128).
bool supported(cellm_dtype type);

// Elements per block of a supported type (1 for F32/F16/BF16); 0 for an unsupported one.
int64_t block_size(cellm_dtype type);

// Bytes that `n` elements of `type` occupy; 0 when the type is unsupported or n is not a multiple of its
// block size.
uint64_t row_bytes(cellm_dtype type, int64_t n);

// Expands `n` stored elements (n a multiple of the block size) into floats, bit-exact with ggml.
// Throws std::invalid_argument for an unsupported type or a bad n.
void dequantize_row(cellm_dtype type, const void* src, float* dst, int64_t n);

// Stores `n` floats as `type`. A reference quantizer (round to nearest on per-block scales), not the
// error-minimising search llama.cpp's quantize tool runs; good enough for synthetic models and tests.
// Throws std::invalid_argument for an unsupported type or a bad n.
void quantize_row(cellm_dtype type, const float* src, void* dst, int64_t n);

}  // namespace cellm::blocks

namespace cellm::blocks {

// llama.cpp's CPU kernels never multiply quantized weights with floats: they first quantize the activations,
// to Q8_0 blocks (32 codes, fp16 scale amax/127) for Q4_0/Q5_0/Q8_0, to Q8_1 blocks (the same plus the block's
// fp16 sum) for Q4_1/Q5_1, to Q8_K blocks (256 codes, float scale) for the K-quants, or to the weight's half
// type (F16, BF16). MATMUL is defined with that rounding, so every cellm backend computes what llama.cpp
// computes up to float summation order, and an int8 SIMD backend can match the reference. Small models are
// sensitive to it: on SmolLM2-135M the fp16 block sums of Q8_1 alone move logits by up to 0.8.

// Writes to y the values x[0..n) takes on as the activation side of a `weight_type` dot product (n a multiple
// of the weight's block size; x and y may alias). Exact for the float and K-quant formats.
void round_activations(cellm_dtype weight_type, const float* x, float* y, int64_t n);

// Activations as ggml's quantize_row_q8_0/q8_1 store them, per block of 32 (n a multiple of 32): codes
// x * 127/amax rounded to nearest even, the scale amax/127 and the block sum scale * sum(codes), both rounded
// to fp16 (and returned as floats).
void quantize_q8(const float* x, int64_t n, int8_t* codes, float* scales, float* sums);

// True for the 32-element block formats, whose dot product needs the quantized activations themselves.
bool has_q8_dot(cellm_dtype weight_type);
// Sum over blocks of d_w * scale * sum(q_w * code) (+ m_w * sum for Q4_1/Q5_1): one stored row against
// activations quantized by quantize_activations. n is the row length.
float dot_q8(cellm_dtype weight_type, const void* row, const int8_t* codes, const float* scales, const float* sums,
             int64_t n);

// The K-quants (Q4_K, Q5_K, Q6_K) meet Q8_K activation blocks, as ggml's quantize_row_q8_K stores them: per
// block of 256 (n a multiple of 256) the codes x * (-127 / max) rounded to nearest even and capped at 127
// (max: the element of largest magnitude, sign kept), the float scale 1 / that factor, and the sum of each run of
// 16 codes (16 sums per block). A block of zeros has scale 0 and codes 0.
void quantize_q8_k(const float* x, int64_t n, int8_t* codes, float* scales, int16_t* sums);

// True for the K-quants.
bool has_q8k_dot(cellm_dtype weight_type);
// One stored row against Q8_K activations: per block an exact integer sum of scaled code products (and of mins
// times activation sums), then float: see blocks.cpp's dot_q8k_row for the order. n is the row length.
float dot_q8_k(cellm_dtype weight_type, const void* row, const int8_t* codes, const float* scales,
               const int16_t* sums, int64_t n);

// Activations of one column prepared for dot products with rows of one weight type.
class Activations {
public:
    void prepare(cellm_dtype weight_type, const float* x, int64_t n);
    // The dot product with one stored row. `expanded` is that row dequantized: the formats without a Q8 or Q8_K
    // dot use it (callers expand each row once for all columns); the block formats read `row` itself.
    float dot(const void* row, const float* expanded) const;

private:
    cellm_dtype type_ = CELLM_TYPE_F32;
    int64_t n_ = 0;
    std::vector<float> values_;   // rounded activations (formats without a Q8 dot)
    std::vector<int8_t> codes_;   // Q8 or Q8_K codes, scales and block sums (formats with either dot)
    std::vector<float> scales_, sums_;
    std::vector<int16_t> k_sums_;  // Q8_K's sums of 16 codes
};

}  // namespace cellm::blocks
