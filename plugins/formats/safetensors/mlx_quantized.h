// Folders written by mlx-lm with quantization (config.json's "quantization": {"group_size", "bits", "mode"}):
// each quantized Linear or Embedding stores `<name>.weight` as uint32 words of packed codes (code i of a row at
// bits (i * bits) % 32 of word i * bits / 32, low bits first), with `<name>.scales` and `<name>.biases` holding
// one value per group of `group_size` consecutive elements of a row: w = scale * code + bias.
#pragma once

#include "shard.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace cellm::safetensors_plugin {

struct MlxQuantization {
    uint32_t group_size = 0;  // 32, 64 or 128
    uint32_t bits = 0;        // 4 or 8
};

// The folder's quantization, or nullopt when config.json has none. Throws plugin::Failure naming `file`:
// UNSUPPORTED for a mode other than affine, widths other than 4 and 8, group sizes other than 32, 64, 128 and
// per-layer settings; CORRUPT for mistyped values.
std::optional<MlxQuantization> read_mlx_quantization(const nlohmann::json& config, const std::string& file);

// The type a packed weight is served as: 4 bits as cellm's Q4A_G<group> (the same arithmetic: f16 scale, f16
// bias, the codes two per byte), 8 bits widened to F32 (cellm has no 8-bit affine type).
cellm_dtype mlx_served_type(const MlxQuantization& q);

// A packed weight and its companions, checked against each other: the weight U32 [rows, words] (shard.h reads
// U32 as I32), scales and biases F16, BF16 or F32 [rows, columns / group]. Throws plugin::Failure (CORRUPT)
// naming `file` and the tensor for a wrong type or shape.
struct MlxWeight {
    const ShardTensor* weight;
    const ShardTensor* scales;
    const ShardTensor* biases;
    uint64_t rows = 0, columns = 0;  // of the unpacked matrix
};
MlxWeight check_mlx_weight(const MlxQuantization& q, const ShardTensor& weight, const ShardTensor* scales,
                           const ShardTensor* biases, const std::string& file);

// Bytes of the served tensor.
uint64_t mlx_served_bytes(const MlxQuantization& q, const MlxWeight& w);

// Writes the served tensor to `out` (mlx_served_bytes of it, no alignment needed). Returns how many scales and
// biases f16 could not hold exactly (Q4A stores them as f16; BF16 or F32 ones outside f16's range or precision
// are rounded to nearest); 0 for F32 output, which is exact.
uint64_t write_mlx_weight(const MlxQuantization& q, const MlxWeight& w, uint8_t* out);

}  // namespace cellm::safetensors_plugin
