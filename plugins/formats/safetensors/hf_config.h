// config.json of a Hugging Face model folder, translated into GGUF's "<arch>.*" hyperparameter keys.
#pragma once

#include "meta_table.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellm::safetensors_plugin {

// Parses a JSON file; throws plugin::Failure: NOT_FOUND when it is missing, CORRUPT naming the file when it
// is not valid JSON.
nlohmann::json read_json_file(const std::filesystem::path& path);

struct HfConfig {
    std::string arch;  // cellm's arch name: llama, qwen2, qwen3
    uint32_t n_head = 0;
    uint32_t n_head_kv = 0;
    std::optional<int64_t> bos_token_id, eos_token_id;
    std::vector<float> rope_freqs;  // a rope_freqs.weight the folder lacks and the arch needs (Gemma 4), or empty
};

// Reads `config` (from `file`, for messages) and adds general.architecture and the arch's hyperparameters to
// `meta`. Throws plugin::Failure naming the key: UNSUPPORTED for an unknown model_type or rope scaling,
// CORRUPT for a missing or mistyped value.
// `as_arch`, when given, reads a llama text config (a multimodal model's text_config) under that arch's keys.
HfConfig read_config(const nlohmann::json& config, const std::string& file, MetaTable& meta,
                     std::string_view as_arch = {});

}  // namespace cellm::safetensors_plugin
