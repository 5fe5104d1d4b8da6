// Idefics3's text step: Llama's decoder over token embeddings with the images' embeddings in place of the image
// tokens.
#pragma once

#include "graph_builder.hpp"
#include "model.hpp"

namespace cellm::idefics3 {

void build_forward(const Model& model, const cellm_batch_shape& shape, transformer::GraphBuilder& g);

}  // namespace cellm::idefics3
