// A Qwen3.5 (text) model bound to a model view: hyperparameters from the "qwen35.*" keys llama.cpp writes, and
// the index of every tensor the forward graph reads, each checked for presence and shape at load. Layers are
// either gated DeltaNet (linear attention, a recurrent state per sequence) or gated full attention (the paged
// KV cache); every full_attention_interval-th layer is the latter.
#pragma once

#include "hparams.hpp"
#include "tensors.hpp"

#include <cstdint>
#include <vector>

namespace cellm::qwen35 {

using transformer::Hparams;
using transformer::kAbsent;

// The gated DeltaNet's geometry: n_k key heads of d_k and n_v value heads of d_v (n_v a multiple of n_k),
// and the causal convolution's kernel over the concatenated q, k, v channels.
struct DeltaNetShape {
    int32_t conv_kernel = 0;
    int32_t d_k = 0, n_k = 0;
    int32_t d_v = 0, n_v = 0;
    // Which key head a value head reads (DELTA_NET's iparams[0]): 1 for llama.cpp's GGUF files, which store the
    // value heads tiled over the key heads; 0 for Hugging Face's grouped order (the safetensors plugin says so).
    int32_t head_order = 1;

    int32_t key_dim() const { return n_k * d_k; }
    int32_t value_dim() const { return n_v * d_v; }
    int32_t conv_channels() const { return 2 * key_dim() + value_dim(); }
    int64_t conv_state() const { return int64_t{conv_kernel - 1} * conv_channels(); }
    int64_t recurrent_state() const { return int64_t{n_v} * d_k * d_v; }
};

// Tensor indices into the model view. Norm gains are stored as used (llama.cpp's converter bakes in Qwen3.5's
// 1 + w, except for ssm_norm, which is used as w), and ssm_a is -exp(A_log).
struct Layer {
    bool recurrent = false;
    int32_t attn_norm = kAbsent, post_attention_norm = kAbsent;
    // Full attention: attn_q yields each head's query followed by its output gate.
    int32_t attn_q = kAbsent, attn_k = kAbsent, attn_v = kAbsent, attn_output = kAbsent;
    int32_t attn_q_norm = kAbsent, attn_k_norm = kAbsent;
    // Gated DeltaNet.
    int32_t attn_qkv = kAbsent, attn_gate = kAbsent, ssm_beta = kAbsent, ssm_alpha = kAbsent;
    int32_t ssm_conv1d = kAbsent, ssm_dt_bias = kAbsent, ssm_a = kAbsent, ssm_norm = kAbsent, ssm_out = kAbsent;
    int32_t ffn_gate = kAbsent, ffn_up = kAbsent, ffn_down = kAbsent;
};

struct Model {
    const cellm_model_view* view = nullptr;
    Hparams hp;
    DeltaNetShape ssm;
    int32_t token_embd = kAbsent;
    int32_t output_norm = kAbsent;
    int32_t output = kAbsent;  // token_embd when the embeddings are tied
    std::vector<Layer> layers;
};

// Reads and validates `view` (borrowed; it must outlive the model), whose general.architecture is "qwen35".
// Throws plugin::Failure naming the missing key or tensor, or the bad shape.
Model load_model(const cellm_model_view& view);

}  // namespace cellm::qwen35
