// Quantized block formats (GGUF's layouts) on the CPU: conversion between float rows and stored rows.
// The scalar backend defines the meaning of every weight type through these functions; faster CPU
// backends and the synthetic-model generator reuse them.
#pragma once

#include <cellm/tensor.h>

#include <cstddef>
#include <cstdint>

namespace cellm::blocks {

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);  // round to nearest even
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);  // round to nearest even

// True for the types dequantize_row and quantize_row handle: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
// Q4_K, Q5_K, Q6_K.
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

// What the activation side of a dot product with a `weight_type` row looks like. llama.cpp's CPU kernels do
// not multiply quantized weights with floats: they first round the activations to an 8-bit block format
// (blocks of 32 with an fp16 scale amax/127 for Q4_0..Q8_0, blocks of 256 with a float scale for the
// K-quants) or to the weight's half type (F16, BF16). MATMUL is defined with that rounding, so every cellm
// backend computes what llama.cpp computes up to float summation order, and an int8 SIMD backend can match
// the reference exactly. Writes the rounded values of x[0..n) to y (n a multiple of the weight's block size;
// x and y may alias).
void round_activations(cellm_dtype weight_type, const float* x, float* y, int64_t n);

}  // namespace cellm::blocks
