// The llama forward pass of one engine step, as graph nodes.
#pragma once

#include "graph_builder.hpp"
#include "model.hpp"

namespace cellm::llama {

using transformer::GraphBuilder;

// Appends the step's nodes through `g` and declares the logits, F32 [n_vocab, n_outputs], as its output.
// Throws plugin::Failure for a malformed shape.
void build_forward(const Model& model, const cellm_batch_shape& shape, GraphBuilder& g);

// The layers and the classifier over the step's input embeddings x [n_embd, n_tokens]: build_forward after the
// token embedding lookup, for archs that feed the decoder other embeddings too (Idefics3's images).
void build_decoder(const Model& model, const cellm_batch_shape& shape, const GraphBuilder::StepInputs& in,
                   int32_t x, GraphBuilder& g);

}  // namespace cellm::llama
