// The coded KV pool types (graph.h, "Coded pools"): R4 and R3 rows of table indices with one F16 scale per
// group, and the Walsh-Hadamard rotation (HADAMARD) that the host puts in front of them. The definitions every
// backend reproduces: exact precision is bit-equal to these.
#pragma once

#include <cellm/tensor.h>

#include <cstdint>

namespace cellm::cpu {

// Whether `type` is one of the coded KV types.
bool coded_kv(cellm_dtype type);

// Codes one pool row of n floats (x) in groups of `width`: the indices into `codes` (the row's bytes) and one
// F16 scale per group into `scales`.
void code_row(cellm_dtype type, const float* x, int64_t n, int64_t width, uint8_t* codes, uint16_t* scales);

// Values [offset, offset + n) of a coded row as floats: scale * level, each value with its group's scale.
void expand_coded(cellm_dtype type, const uint8_t* codes, const uint16_t* scales, int64_t width, int64_t offset,
                  int64_t n, float* out);

// One run of d values (d a power of two), from x to y (which may be x): HADAMARD's forward rotation
// c * H (signs * x), or its inverse signs * (c * H x).
void hadamard(const float* x, float* y, int64_t d, const float* signs, float c, bool inverse);

}  // namespace cellm::cpu
