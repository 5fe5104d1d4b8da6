// Synthetic GGUF models with random weights (deterministic for a seed): the test and benchmark stand-in for a
// real checkpoint, with llama.cpp's tensor names and metadata keys for the llama, qwen2, qwen3 and gemma3 archs.
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
    // general.architecture: "llama", "qwen2" (biases on Q, K and V), "qwen3" (RMSNorm of each Q and K head
    // before RoPE, head_dim written as attention.key_length) or "gemma3" (qwen3's head norms plus norms after
    // attention and the feed-forward, and a sliding window on all but every sixth layer).
    std::string_view arch;
    uint32_t n_vocab, n_embd, n_ff, n_layer, n_head, n_head_kv, head_dim, n_ctx;
    float rope_theta, rms_eps;
    bool tied_embeddings;  // no output.weight: logits reuse token_embd.weight
    uint32_t sliding_window = 0;  // gemma3 only: attention.sliding_window
    float attn_softcap = 0.0f, final_softcap = 0.0f;  // gemma3 only, written when not 0: the logit soft-caps
};

// "tiny" (n_embd 256, every row a multiple of 256, so K-quants work), "smollm2-135m" (its exact shape),
// "qwen2-tiny" and "qwen3-tiny" (tiny's shape as those archs; qwen3's heads are 128 wide, so n_head x head_dim
// differs from n_embd, as in the real Qwen3 models), and "gemma3-tiny" (6 layers, so that layer 5 is global
// and the others local with a window of 8 positions; one KV head of 128, like Gemma-3-270M's single KV head),
// and "gemma3-tiny-softcap" (the same with Gemma 2 style attention and final logit soft-caps, tight enough to
// bend most scores and logits).
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
