// A Gemma 3 text model bound to a model view: hyperparameters from the "gemma3.*" keys and the index of every
// tensor the forward graph reads, each checked for presence and shape at load.
#pragma once

#include "hparams.hpp"
#include "tensors.hpp"

#include <cstdint>
#include <vector>

namespace cellm::gemma3 {

using transformer::Hparams;
using transformer::kAbsent;

// Tensor indices into the model view. Every norm gain is F32 and already holds Gemma's (1 + w): llama.cpp's
// converter adds the 1 when it writes the file.
struct Layer {
    int32_t attn_norm = kAbsent;
    int32_t attn_q = kAbsent, attn_k = kAbsent, attn_v = kAbsent, attn_output = kAbsent;
    int32_t attn_q_norm = kAbsent, attn_k_norm = kAbsent;  // [head_dim], applied to each head
    int32_t post_attention_norm = kAbsent;
    int32_t ffn_norm = kAbsent;
    int32_t ffn_gate = kAbsent, ffn_up = kAbsent, ffn_down = kAbsent;
    int32_t post_ffw_norm = kAbsent;
};

// What a layer's attention sees: local layers a sliding window with their own RoPE base, global layers every
// earlier position with the file's base and scaling.
struct LayerAttention {
    int32_t window;  // 0 = unlimited
    float rope_freq_base, rope_freq_scale;
};

struct Model {
    const cellm_model_view* view = nullptr;
    Hparams hp;
    int32_t sliding_window = 0;    // gemma3.attention.sliding_window, in positions
    float attention_scale = 0.0f;  // applied to q.k
    float attn_softcap = 0.0f;     // gemma3.attn_logit_softcapping, 0 = none
    float final_softcap = 0.0f;    // gemma3.final_logit_softcapping, 0 = none
    int32_t token_embd = kAbsent;  // also the classifier: Gemma ties its embeddings
    int32_t output_norm = kAbsent;
    std::vector<Layer> layers;

    LayerAttention attention(int32_t layer) const;
};

// Reads and validates `view` (borrowed; it must outlive the model), whose general.architecture is "gemma3".
// Throws plugin::Failure naming the missing key or tensor, or the bad value or shape.
Model load_model(const cellm_model_view& view);

}  // namespace cellm::gemma3
