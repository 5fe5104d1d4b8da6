// The Qwen3.5 forward pass of one engine step, as graph nodes.
#pragma once

#include "graph_builder.hpp"
#include "model.hpp"

namespace cellm::qwen35 {

using transformer::GraphBuilder;

// Appends the step's nodes through `g` and declares the logits, F32 [n_vocab, n_outputs], as its output.
// Throws plugin::Failure for a malformed shape.
void build_forward(const Model& model, const cellm_batch_shape& shape, GraphBuilder& g);

}  // namespace cellm::qwen35
