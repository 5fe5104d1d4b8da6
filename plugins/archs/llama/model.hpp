// A llama-family model bound to a model view: hyperparameters from the metadata and the index of every
// tensor the forward graph reads, each checked for presence and shape at load.
#pragma once

#include "hparams.hpp"
#include "tensors.hpp"

#include <cstdint>
#include <string_view>
#include <vector>

namespace cellm::llama {

using transformer::Hparams;
using transformer::kAbsent;

// Tensor indices into the model view; kAbsent for optional tensors the file does not have.
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
// `arch` is the prefix of its hyperparameter keys ("llama"; "idefics3" for SmolVLM's text model).
Model load_model(const cellm_model_view& view, std::string_view arch = "llama");

}  // namespace cellm::llama
