// A Qwen2 / Qwen2.5 or Qwen3 model bound to a model view: hyperparameters from the "qwen2.*" or "qwen3.*" keys
// and the index of every tensor the forward graph reads, each checked for presence and shape at load.
#pragma once

#include "hparams.hpp"
#include "tensors.hpp"

#include <cstdint>
#include <vector>

namespace cellm::qwen {

using transformer::Hparams;
using transformer::kAbsent;

// Tensor indices into the model view. Qwen2 has the Q, K and V biases; Qwen3 has none and instead
// normalises each query and key head (q_norm, k_norm: F32 [head_dim]). The others are kAbsent.
struct Layer {
    int32_t attn_norm = kAbsent;
    int32_t attn_q = kAbsent, attn_k = kAbsent, attn_v = kAbsent, attn_output = kAbsent;
    int32_t attn_q_bias = kAbsent, attn_k_bias = kAbsent, attn_v_bias = kAbsent;
    int32_t attn_q_norm = kAbsent, attn_k_norm = kAbsent;
    int32_t ffn_norm = kAbsent;
    int32_t ffn_gate = kAbsent, ffn_up = kAbsent, ffn_down = kAbsent;
};

struct Model {
    const cellm_model_view* view = nullptr;
    Hparams hp;
    int32_t token_embd = kAbsent;
    int32_t output_norm = kAbsent;
    int32_t output = kAbsent;  // token_embd when the embeddings are tied
    std::vector<Layer> layers;
};

// Reads and validates `view` (borrowed; it must outlive the model), whose general.architecture is "qwen2" or
// "qwen3". Throws plugin::Failure naming the missing key or tensor, or the bad shape.
Model load_model(const cellm_model_view& view);

}  // namespace cellm::qwen
