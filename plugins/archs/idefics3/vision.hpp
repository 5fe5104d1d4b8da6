// Idefics3's image encoder as graph nodes: SigLIP over each tile, then the pixel shuffle and projection into the
// text model's embeddings.
#pragma once

#include "graph_builder.hpp"
#include "model.hpp"

namespace cellm::idefics3 {

using transformer::GraphBuilder;

// Appends the graph that encodes n_images tiles (CELLM_INPUT_PIXELS) and declares its output, F32
// [text n_embd, tokens_per_image * n_images]. The model must have a vision encoder.
void build_vision(const Model& model, int32_t n_images, GraphBuilder& g);

}  // namespace cellm::idefics3
