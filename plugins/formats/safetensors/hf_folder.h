// A Hugging Face model folder (config.json, model.safetensors or shards listed by model.safetensors.index.json, or
// the same as PyTorch checkpoints: pytorch_model.bin, its shards, one .pt state dict; tokenizer.json) presented as
// a GGUF-style model view: GGUF metadata keys and tensor names, weights served from the mapped shards.
#pragma once

#include "folder_mapping.h"
#include "meta_table.h"

#include <cellm/tensor.h>

#include <deque>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cellm::safetensors_plugin {

// True when `folder` looks like a model folder (config.json and weights: model.safetensors, pytorch_model.bin, an
// index of their shards, or a .pt file).
bool is_model_folder(const std::filesystem::path& folder);

class HfFolder {
public:
    // Opens and validates the folder; throws plugin::Failure with a message naming the file at fault.
    explicit HfFolder(const std::filesystem::path& folder);

    const cellm_model_view& view() const { return view_; }

private:
    std::vector<std::string> shard_names(const std::filesystem::path& folder, std::vector<std::pair<std::string, std::string>>& index);

    std::string index_file_;  // the shards' index (model.safetensors.index.json, ...), when there is one
    MetaTable meta_;
    std::unique_ptr<FolderMapping> mapping_;
    std::deque<std::string> names_;  // GGUF tensor names the infos point to
    std::vector<cellm_tensor_info> tensors_;
    cellm_model_view view_{};
};

}  // namespace cellm::safetensors_plugin
