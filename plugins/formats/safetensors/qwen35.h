// Qwen3.5 text folders (model_type "qwen3_5_text", Qwen3_5ForCausalLM): config.json as the "qwen35.*" keys of
// llama.cpp's GGUF files, the tensor names, and the values llama.cpp's converter rewrites: Qwen3.5's RMSNorm
// gains are used as 1 + w, which GGUF stores baked in (all but the DeltaNet's output norm), and A_log is stored
// as -exp(A_log). The DeltaNet's value heads stay in Hugging Face's grouped order, which the metadata says.
#pragma once

#include "hf_config.h"
#include "shard.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace cellm::safetensors_plugin {

// Whether `config` is a Qwen3.5 text one, by model_type or by its first architectures entry.
bool is_qwen35(const nlohmann::json& config);

// Adds general.architecture = "qwen35" and the hyperparameters to `meta`. Throws plugin::Failure naming the key:
// UNSUPPORTED for what the qwen35 arch does not run (attention biases, another activation or RoPE type, a
// layer_types list that is not every n-th layer full attention), NOT_FOUND or CORRUPT for a missing or bad value.
HfConfig read_qwen35_config(const nlohmann::json& config, const std::string& file, MetaTable& meta);

// The GGUF name of a Qwen3.5 tensor (llama.cpp's for qwen35); nullopt for the multi-token-prediction head,
// which transformers does not load either. Throws plugin::Failure (UNSUPPORTED) for a name with no counterpart.
std::optional<std::string> qwen35_tensor_name(const std::string& hf, const std::string& file);

// Whether the tensor named `gguf` is stored rewritten (a norm gain or ssm_a), and the rewrite of `t` into
// `out` (t.size bytes). Only F32 sources are rewritten: others throw plugin::Failure (UNSUPPORTED) naming the
// tensor, as the arch reads these small vectors as F32 only.
bool qwen35_rewrites(const std::string& gguf);
void qwen35_rewrite(const std::string& gguf, const ShardTensor& t, uint8_t* out, const std::string& file);

}  // namespace cellm::safetensors_plugin
