// One .safetensors file: an 8-byte little-endian header length, a JSON header naming each tensor's dtype,
// shape and [begin, end) byte range relative to the end of the header, then the data.
#pragma once

#include <cellm/tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cellm::safetensors_plugin {

struct ShardTensor {
    std::string name;             // Hugging Face's name (model.layers.0.self_attn.q_proj.weight)
    cellm_dtype type;             // F32, F16, BF16, or I32 for U32 (MLX's packed codes)
    std::vector<int64_t> shape;   // outermost first, as PyTorch writes it
    const uint8_t* data;
    uint64_t size;
};

// Validates the header of `file` (`data`, `size`: its mapping) and returns its tensors. Every range is checked
// against the file and every shape against its byte count; throws plugin::Failure (CORRUPT, or UNSUPPORTED
// for a dtype cellm does not run) with a message that starts with `file`.
std::vector<ShardTensor> read_shard(const std::string& file, const uint8_t* data, uint64_t size);

// Writes the `n` elements at `src`, of type BF16 or F16, to `dst` as F32 (n * 4 bytes; neither pointer need be
// aligned). Exact: every BF16 value is the F32 value with the same top 16 bits, every F16 value (subnormals,
// infinities and NaN payloads included) is an F32 value.
void widen_to_f32(cellm_dtype type, const uint8_t* src, uint64_t n, uint8_t* dst);

}  // namespace cellm::safetensors_plugin
