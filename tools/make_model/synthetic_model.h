// Synthetic GGUF models with random weights (deterministic for a seed): the test and benchmark stand-in for a
// real checkpoint, with llama.cpp's tensor names and metadata keys for the llama, qwen2, qwen3 and gemma3 archs.
#pragma once

#include "gguf_writer.h"

#include <cellm/tensor.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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
// differs from n_embd, as in the real Qwen3 models), "gemma3-tiny" (6 layers, so that layer 5 is global
// and the others local with a window of 8 positions; one KV head of 128, like Gemma-3-270M's single KV head),
// "gemma3-tiny-softcap" (the same with Gemma 2 style attention and final logit soft-caps, tight enough to
// bend most scores and logits), and "gemma3-270m" (Gemma-3-270M's exact shape: 18 layers, n_embd 640, 4 query
// heads and 1 KV head of 256, n_ff 2048, a window of 512, and a 262144-token vocabulary, so that token_embd,
// tied to the classifier, holds 168M of the 268M weights; 250 MB with --type q4_k_m).
std::span<const Preset> presets();
// Throws std::invalid_argument listing the known presets.
const Preset& find_preset(std::string_view name);

// Weight types --type accepts: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k.
// parse_weight_type throws std::invalid_argument listing them.
cellm_dtype parse_weight_type(std::string_view name);
std::string_view weight_type_name(cellm_dtype type);

// How 2-D tensors get their types: all in ModelOptions::weight_type, or per tensor as llama.cpp's quantizer
// mixes them for a file type. q4_k_m: Q4_K, but Q6_K for the classifier (output.weight, or token_embd.weight
// when tied) and for attn_v and ffn_down in the layers llama.cpp's use_more_bits picks (the first and last
// eighth, and every third between); then, for rows that are not whole 256-element super-blocks, Q6_K becomes
// Q8_0 and Q4_K becomes Q5_0 (llama.cpp's fallbacks). That gives the real SmolLM2-135M-Instruct and
// Gemma-3-270M Q4_K_M files' type of every tensor.
enum class TypeMix { none, q4_k_m };

struct ModelOptions {
    std::string preset = "tiny";
    cellm_dtype weight_type = CELLM_TYPE_F32;  // of 2-D weights; norms and other 1-D tensors stay F32
    uint64_t seed = 1;
    TypeMix mix = TypeMix::none;  // other than none: per-tensor types, and weight_type is not used
};

// cellm-make-model's --type: a weight type (parse_weight_type) or a mix ("q4_k_m"). Throws
// std::invalid_argument listing both.
void set_type(ModelOptions& options, std::string_view name);

// A tensor as build_model writes it, without its data.
struct TensorSpec {
    std::string name;
    std::vector<int64_t> ne;  // ne[0] innermost
    cellm_dtype type;
};

// Every tensor build_model writes, in file order, with its type. Throws as build_model does.
std::vector<TensorSpec> tensor_specs(const ModelOptions& options);

// The whole model in a writer. Throws std::invalid_argument for an unknown preset or a weight type the
// preset's row lengths cannot hold (K-quants need rows that are a multiple of 256).
gguf::Writer build_model(const ModelOptions& options);

// build_model, then write to `path` (throws std::runtime_error when writing fails).
void write_model(const std::string& path, const ModelOptions& options);

}  // namespace cellm::synthetic
