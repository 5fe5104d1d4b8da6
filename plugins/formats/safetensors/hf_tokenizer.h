// tokenizer.json (a byte-level BPE) and tokenizer_config.json translated into GGUF's tokenizer.ggml.* keys,
// so the host's tokenizer reads a model folder as it reads a GGUF file.
#pragma once

#include "hf_config.h"
#include "meta_table.h"

#include <filesystem>

namespace cellm::safetensors_plugin {

// Adds the tokenizer keys to `meta` when `folder` has a tokenizer.json; without one the model has no tokenizer,
// like a GGUF file without tokenizer.ggml.*. Throws plugin::Failure naming the file and field: CORRUPT for
// malformed data, UNSUPPORTED for a tokenizer kind or pre-tokenizer cellm does not implement.
void read_tokenizer(const std::filesystem::path& folder, const HfConfig& config, MetaTable& meta);

}  // namespace cellm::safetensors_plugin
