// Writes Hugging Face model folders for the tests: raw .safetensors files, and whole folders converted from a
// GGUF file the way convert_hf_to_gguf.py would have produced it, in reverse.
#pragma once

#include <cellm/tensor.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace cellm::testing {

struct StTensor {
    std::string name;
    std::string dtype;           // "F32", "F16", "BF16" or anything a test wants to try
    std::vector<int64_t> shape;  // outermost first
    std::vector<uint8_t> data;
};

// The bytes of a .safetensors file holding `tensors` in order (offsets computed here).
std::vector<uint8_t> safetensors_bytes(const std::vector<StTensor>& tensors);
void write_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes);
void write_json(const std::filesystem::path& path, const nlohmann::json& value);
// A fresh folder `dir` holding `config` as config.json and `tensors` as model.safetensors; returns `dir`.
std::filesystem::path write_tensor_folder(const std::filesystem::path& dir, const nlohmann::json& config,
                                          const std::vector<StTensor>& tensors);

struct FolderOptions {
    int shards = 1;          // 1: model.safetensors; more: model-0000i-of-0000n.safetensors and an index
    bool tokenizer = true;   // tokenizer.json and tokenizer_config.json
};

// Converts the GGUF model at `gguf` into a fresh folder `dir`: config.json, safetensors with Hugging Face names
// and layout (Llama's Q/K rows un-permuted), and the tokenizer as tokenizer.json. `transform`, when given, is
// applied to every tensor before it is written (to store it in another dtype, say).
void write_hf_folder(const std::filesystem::path& gguf, const std::filesystem::path& dir, const FolderOptions& options,
                     const std::function<void(StTensor&)>& transform = {});

}  // namespace cellm::testing
