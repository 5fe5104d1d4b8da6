// A llama-family model bound to a model view: hyperparameters from the metadata and the index of every
// tensor the forward graph reads, each checked for presence and shape at load.
#pragma once

#include <cellm/graph.h>

#include <cstdint>
#include <vector>

namespace cellm::llama {

struct Hparams {
    int32_t n_vocab = 0;
    int32_t n_embd = 0;
    int32_t n_layer = 0;
    int32_t n_ff = 0;
    int32_t n_head = 0;
    int32_t n_head_kv = 0;
    int32_t head_dim = 0;
    int32_t n_rot = 0; // leading dims of each head that rotate
    int32_t n_ctx_train = 0;
    float rms_eps = 0.0f;
    float rope_freq_base = 10000.0f;
    float rope_freq_scale = 1.0f;
    cellm_rope_mode rope_mode = CELLM_ROPE_ADJACENT;

    int32_t q_dim() const { return n_head * head_dim; }
    int32_t kv_dim() const { return n_head_kv * head_dim; }
};

// Tensor indices into the model view; kAbsent for optional tensors the file does not have.
constexpr int32_t kAbsent = -1;

struct Layer {
    int32_t attn_norm = kAbsent;
    int32_t attn_q = kAbsent, attn_k = kAbsent, attn_v = kAbsent, attn_output = kAbsent;
    int32_t attn_q_bias = kAbsent, attn_k_bias = kAbsent, attn_v_bias = kAbsent, attn_output_bias = kAbsent;
    int32_t ffn_norm = kAbsent;
    int32_t ffn_gate = kAbsent, ffn_up = kAbsent, ffn_down = kAbsent;
};

struct Model {
    const cellm_model_view* view = nullptr;
    Hparams hp;
    int32_t token_embd = kAbsent;
    int32_t output_norm = kAbsent;
    int32_t output = kAbsent; // token_embd when the embeddings are tied
    int32_t rope_freqs = kAbsent;
    std::vector<Layer> layers;
};

// Reads and validates `view` (borrowed; it must outlive the model). Throws plugin::Failure naming the
// missing key or tensor, or the bad shape.
Model load_model(const cellm_model_view& view);

}  // namespace cellm::llama
