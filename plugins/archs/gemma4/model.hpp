// A Gemma 4 text model bound to a model view: hyperparameters from the "gemma4.*" keys (llama.cpp's, with its
// per-layer arrays) and the index of every tensor the forward graph reads, each checked for presence and shape.
#pragma once

#include "hparams.hpp"
#include "tensors.hpp"

#include <cstdint>
#include <vector>

namespace cellm::gemma4 {

using transformer::Hparams;
using transformer::kAbsent;

// Tensor indices into the model view. Gemma 4's norm gains multiply by the stored w (no 1 + w).
struct Layer {
    int32_t attn_norm = kAbsent;
    int32_t attn_q = kAbsent, attn_k = kAbsent, attn_v = kAbsent, attn_output = kAbsent;
    int32_t attn_q_norm = kAbsent, attn_k_norm = kAbsent;  // [head_dim], applied to each head
    int32_t post_attention_norm = kAbsent;
    int32_t ffn_norm = kAbsent;
    int32_t ffn_gate = kAbsent, ffn_up = kAbsent, ffn_down = kAbsent;
    int32_t post_ffw_norm = kAbsent;
    int32_t inp_gate = kAbsent, proj = kAbsent, post_norm = kAbsent;  // per-layer embedding input, when the model has it
    int32_t layer_output_scale = kAbsent;                              // F32 [1], absent = 1
};

// What differs between layers: local layers see a sliding window with their own head size and RoPE base, global
// ones every earlier position; the last shared_kv_layers layers keep no K/V and read an earlier layer's.
struct LayerShape {
    bool sliding = false;
    int32_t head_dim = 0;
    int32_t n_head_kv = 0;
    int32_t n_ff = 0;
    int32_t kv_source = 0;  // the layer whose pools this one attends over (itself unless it shares)
    bool k_eq_v = false;    // no V projection: V is the K projection, before K's norm and RoPE

    int32_t kv_dim() const { return n_head_kv * head_dim; }
};

struct Model {
    const cellm_model_view* view = nullptr;
    Hparams hp;                    // n_head, n_embd, ... ; head_dim and n_head_kv are the global layers'
    std::vector<LayerShape> shape;  // per layer
    int32_t sliding_window = 0;    // gemma4.attention.sliding_window, in positions
    float rope_base_local = 0.0f;  // gemma4.rope.freq_base_swa
    float final_softcap = 0.0f;    // gemma4.final_logit_softcapping, 0 = none
    int32_t n_embd_per_layer = 0;  // gemma4.embedding_length_per_layer_input, 0 = no per-layer embeddings

    int32_t token_embd = kAbsent;
    int32_t output = kAbsent;      // absent: the embeddings are tied
    int32_t output_norm = kAbsent;
    int32_t rope_freqs = kAbsent;  // F32 [global head_dim / 2]: divisors of the global layers' RoPE frequencies
    int32_t per_layer_token_embd = kAbsent, per_layer_model_proj = kAbsent, per_layer_proj_norm = kAbsent;
    std::vector<Layer> layers;
};

// Reads and validates `view` (borrowed; it must outlive the model), whose general.architecture is "gemma4".
// Throws plugin::Failure naming the missing key or tensor, or the bad value or shape; Mixture-of-Experts models
// are refused (CELLM_ERR_UNSUPPORTED).
Model load_model(const cellm_model_view& view);

}  // namespace cellm::gemma4
