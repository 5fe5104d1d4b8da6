// A deliberately naive Gemma 3 forward in plain float loops, written from the model's definition (Hugging Face's
// modeling_gemma3.py, with llama.cpp's file conventions) and sharing no code with the graph, the arch plugins,
// the backends or the other reference forwards: the yardstick the gemma3 tests compare the engine with.
#pragma once

#include <cellm/tensor.h>

#include <cstdint>
#include <span>
#include <vector>

namespace cellm::testing {

// Logits of every position of one sequence (row p: the logits after tokens[0..p]). Reads the gemma3.* keys and
// llama.cpp's tensor names; weights are dequantized to float (cellm::blocks), every product is taken in float
// and sums in double. Throws std::runtime_error for a missing key or tensor, or another arch.
std::vector<std::vector<float>> gemma3_reference_logits(const cellm_model_view& model, std::span<const int32_t> tokens);

}  // namespace cellm::testing
