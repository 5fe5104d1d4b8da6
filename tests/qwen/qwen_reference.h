// A deliberately naive Qwen2 / Qwen3 forward in plain float loops, written from the models' definitions
// (Hugging Face's modeling_qwen2.py and modeling_qwen3.py) and sharing no code with the graph, the arch
// plugins, the backends or llama's reference forward: the yardstick the qwen tests compare the engine with.
#pragma once

#include <cellm/tensor.h>

#include <cstdint>
#include <span>
#include <vector>

namespace cellm::testing {

// Logits of every position of one sequence (row p: the logits after tokens[0..p]), with full causal attention
// from position 0. Reads general.architecture ("qwen2" or "qwen3"), the <arch>.* keys and llama.cpp's tensor
// names; weights are dequantized to float (cellm::blocks) and every product is taken in float, sums in double.
// Throws std::runtime_error for a missing key or tensor, or another arch.
std::vector<std::vector<float>> qwen_reference_logits(const cellm_model_view& model, std::span<const int32_t> tokens);

}  // namespace cellm::testing
