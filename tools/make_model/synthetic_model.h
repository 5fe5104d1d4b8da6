// Synthetic llama-architecture GGUF models with random weights (deterministic for a seed): the test and
// benchmark stand-in for a real checkpoint, with llama.cpp's tensor names and metadata keys.
#pragma once

#include "gguf_writer.h"

#include <cellm/tensor.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace cellm::synthetic {

struct Preset {
    std::string_view name;
    uint32_t n_vocab, n_embd, n_ff, n_layer, n_head, n_head_kv, n_ctx;
    float rope_theta, rms_eps;
    bool tied_embeddings;  // no output.weight: logits reuse token_embd.weight
};

// "tiny" (n_embd 256, every row a multiple of 256, so K-quants work) and "smollm2-135m" (its exact shape).
std::span<const Preset> presets();
// Throws std::invalid_argument listing the known presets.
const Preset& find_preset(std::string_view name);

// Weight types --type accepts: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k.
// parse_weight_type throws std::invalid_argument listing them.
cellm_dtype parse_weight_type(std::string_view name);
std::string_view weight_type_name(cellm_dtype type);

struct ModelOptions {
    std::string preset = "tiny";
    cellm_dtype weight_type = CELLM_TYPE_F32;  // of 2-D weights; norms and other 1-D tensors stay F32
    uint64_t seed = 1;
};

// The whole model in a writer. Throws std::invalid_argument for an unknown preset or a weight type the
// preset's row lengths cannot hold (K-quants need rows that are a multiple of 256).
gguf::Writer build_model(const ModelOptions& options);

// build_model, then write to `path` (throws std::runtime_error when writing fails).
void write_model(const std::string& path, const ModelOptions& options);

}  // namespace cellm::synthetic
