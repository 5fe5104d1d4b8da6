// Idefics3 / SmolVLM folders (model_type "idefics3" or "smolvlm"): the Llama text_config under the "idefics3.*"
// keys, the SigLIP vision_config and the projector as the "clip.vision.*" keys of llama.cpp's mmproj files, the
// image processor's settings as "cellm.vision.*" keys, and the tensor names (text as llama's, vision as v.*, the
// projector as mm.model.fc).
#pragma once

#include "hf_config.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>

namespace cellm::safetensors_plugin {

bool is_idefics3(const nlohmann::json& config);

// Adds general.architecture = "idefics3", the text model's and the vision encoder's hyperparameters to `meta`.
// Throws plugin::Failure naming the key: UNSUPPORTED for a text model other than llama or an activation other
// than SigLIP's GELU (tanh), NOT_FOUND or CORRUPT for a missing or bad value.
HfConfig read_idefics3_config(const nlohmann::json& config, const std::string& file, MetaTable& meta);

// The image processor's settings from the folder's preprocessor_config.json (or processor_config.json's
// image_processor): cellm.vision.longest_edge, .tile_size, .do_image_splitting, .rescale_factor, .image_mean,
// .image_std, .image_seq_len (from processor_config.json when it says). Adds nothing when neither file exists:
// the host then refuses images for the model, naming the file.
void read_idefics3_processor(const std::filesystem::path& folder, MetaTable& meta);

// The GGUF name of an Idefics3 tensor; text tensors go through `text_name` (the llama mapping) after their
// "model.text_model." prefix becomes "model.". Throws plugin::Failure (UNSUPPORTED) for a name with no counterpart.
std::optional<std::string> idefics3_tensor_name(const std::string& hf, const std::string& file,
                                                std::optional<std::string> (*text_name)(const std::string&,
                                                                                         const std::string&));

}  // namespace cellm::safetensors_plugin
