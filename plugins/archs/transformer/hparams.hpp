// The hyperparameters of a decoder-only transformer (Llama, Qwen, ...), read from the "<arch>.*" keys
// llama.cpp's GGUF files use for every such arch.
#pragma once

#include "metadata.hpp"
#include "tensors.hpp"

#include <cellm/graph.h>

#include <cstdint>
#include <string_view>

namespace cellm::transformer {

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
    cellm_rope_mode rope_mode = CELLM_ROPE_ADJACENT;  // the arch decides: the layout is not a shared key

    int32_t q_dim() const { return n_head * head_dim; }
    int32_t kv_dim() const { return n_head_kv * head_dim; }
};

// Reads "<arch>.embedding_length", ".block_count", ".attention.head_count" and the rest, with llama.cpp's
// defaults for the optional ones; without "<arch>.vocab_size" the vocabulary is token_embd's row count.
// Throws plugin::Failure naming the missing or bad key.
Hparams read_hparams(const Metadata& meta, const Tensors& tensors, std::string_view arch);

}  // namespace cellm::transformer
