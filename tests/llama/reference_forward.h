// A deliberately naive llama forward in plain float math, independent of the graph, the arch plugin and every
// backend: the yardstick the end-to-end tests compare the engine's logits with.
#pragma once

#include <cellm/tensor.h>

#include <cstdint>
#include <span>
#include <vector>

namespace cellm::testing {

// Logits of every position of one sequence (row p: the logits after tokens[0..p]), computed with full causal
// attention from position 0. Reads the llama.* metadata and the GGUF tensor names of `model`, dequantizes
// weights with cellm::blocks, and handles GQA, tied embeddings, rope_freqs, linear rope scaling and both
// rope layouts (GGUF's adjacent pairs, or "halves" when cellm.rope.layout says so).
// Throws std::runtime_error for a missing key or tensor and std::out_of_range for a token outside the vocab.
// Float: every product in float. LikeLlamaCpp: MATMUL's definition, activations quantized for the weight type.
enum class Arithmetic { Float, LikeLlamaCpp };
std::vector<std::vector<float>> reference_logits(const cellm_model_view& model, std::span<const int32_t> tokens,
                                                 Arithmetic arithmetic = Arithmetic::LikeLlamaCpp);

}  // namespace cellm::testing
