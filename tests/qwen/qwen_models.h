// Synthetic Qwen models on disk for the qwen tests, and byte-level edits of them for the bad-input cases.
#pragma once

#include <cellm/tensor.h>

#include <cstdint>
#include <filesystem>
#include <string>

namespace cellm::testing {

// Writes (once per process) cellm-make-model's `preset` ("qwen2-tiny", "qwen3-tiny", "tiny") with 2-D
// weights of `type` into temp_dir().
std::filesystem::path qwen_model(const std::string& preset, cellm_dtype type);

// The preset written with one edit, as `file_name` in temp_dir(): a tensor or metadata key renamed (its last
// character replaced, so a reader no longer finds it), or a tensor's ne[0] changed (to a smaller value, so its
// data still lies inside the file).
std::filesystem::path model_with_renamed_tensor(const std::string& preset, const std::string& tensor,
                                                const std::string& file_name);
std::filesystem::path model_with_renamed_key(const std::string& preset, const std::string& key,
                                             const std::string& file_name);
std::filesystem::path model_with_ne0(const std::string& preset, const std::string& tensor, int64_t ne0,
                                     const std::string& file_name);

}  // namespace cellm::testing
