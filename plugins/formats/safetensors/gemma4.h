// Gemma 4 folders (model_type "gemma4_text", Gemma4ForCausalLM, and the text stack of "gemma4"
// Gemma4ForConditionalGeneration): config.json as the "gemma4.*" keys of llama.cpp's GGUF files, and the
// tensor names. Its layers differ (head size, KV heads, feed-forward width), which llama.cpp writes as
// per-layer arrays.
#pragma once

#include "hf_config.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace cellm::safetensors_plugin {

// Whether `config` is a Gemma 4 one, by model_type or by its first architectures entry.
bool is_gemma4(const nlohmann::json& config);

// Adds general.architecture = "gemma4" and the hyperparameters to `meta`; out.rope_freqs gets the divisors of
// the global layers' proportional RoPE. Throws plugin::Failure naming the key: UNSUPPORTED for what the gemma4
// arch does not run (Mixture of Experts, bidirectional attention, biases, another activation or RoPE type),
// NOT_FOUND or CORRUPT for a missing or bad value.
HfConfig read_gemma4_config(const nlohmann::json& config, const std::string& file, MetaTable& meta);

// The GGUF name of a Gemma 4 tensor (llama.cpp's for gemma4); nullopt for the vision and audio towers, which
// the text model does not use. Throws plugin::Failure (UNSUPPORTED) for a name with no counterpart.
std::optional<std::string> gemma4_tensor_name(const std::string& hf, const std::string& file);

}  // namespace cellm::safetensors_plugin
