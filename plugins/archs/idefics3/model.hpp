// An Idefics3 (SmolVLM) model bound to a model view: a Llama text model and, beside it, a SigLIP vision encoder
// with the pixel-shuffle projector that turns each image into text embeddings. Keys and tensor names are those
// of llama.cpp's mmproj files (clip.vision.*, v.*, mm.*), which the safetensors plugin writes for a Hugging Face
// folder; the text model's keys are idefics3.* there and llama.* in llama.cpp's text GGUF beside its mmproj.
#pragma once

#include "archs/llama/model.hpp"

#include <cstdint>
#include <vector>

namespace cellm::idefics3 {

using transformer::kAbsent;

struct VisionLayer {
    int32_t ln1_w = kAbsent, ln1_b = kAbsent;
    int32_t attn_q = kAbsent, attn_q_b = kAbsent, attn_k = kAbsent, attn_k_b = kAbsent;
    int32_t attn_v = kAbsent, attn_v_b = kAbsent, attn_out = kAbsent, attn_out_b = kAbsent;
    int32_t ln2_w = kAbsent, ln2_b = kAbsent;
    int32_t ffn_up = kAbsent, ffn_up_b = kAbsent, ffn_down = kAbsent, ffn_down_b = kAbsent;
};

struct Vision {
    int32_t image_size = 0;   // side of the square tile the encoder takes, in pixels
    int32_t patch_size = 0;
    int32_t n_embd = 0;       // the encoder's width
    int32_t n_head = 0;
    int32_t n_ff = 0;
    int32_t scale_factor = 0; // the pixel shuffle merges scale_factor^2 neighbouring patches into one token
    float eps = 0.0f;         // its LayerNorms'

    int32_t patch_embd = kAbsent, patch_embd_b = kAbsent, position_embd = kAbsent;
    std::vector<VisionLayer> layers;
    int32_t post_ln_w = kAbsent, post_ln_b = kAbsent;
    int32_t projection = kAbsent;  // [n_embd * scale_factor^2, text n_embd], no bias

    int32_t patches_per_side() const { return image_size / patch_size; }
    int32_t n_patches() const { return patches_per_side() * patches_per_side(); }
    int32_t tokens_per_image() const { return n_patches() / (scale_factor * scale_factor); }
};

// The text model is llama's (view and hp included); `vision` is absent (has_vision false) for a text-only file.
struct Model : llama::Model {
    bool has_vision = false;
    Vision vision;
};

// Throws plugin::Failure naming the missing or bad key or tensor.
Model load_model(const cellm_model_view& view);

}  // namespace cellm::idefics3
