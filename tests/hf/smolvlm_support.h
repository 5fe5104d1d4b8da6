// What the SmolVLM suites share (smolvlm_test.cpp on the Hugging Face folder, smolvlm_gguf_test.cpp on llama.cpp's
// GGUF pair): the tiny model's folder and transformers' reference (scripts/hf_reference/smolvlm.py), its files,
// and the comparisons.
#pragma once

#include "test_support.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace cellm::testing {

// The bar on f32 weights.
constexpr double kSmolVlmMinCosine = 0.9999;

std::filesystem::path smolvlm_folder();  // tests/data/hf/smolvlm-tiny
const nlohmann::json& smolvlm_reference();  // its reference.json
nlohmann::json read_json(const std::filesystem::path& path);
// A raw little-endian float32 file, by default one of the folder's.
std::vector<float> floats_of(const std::string& file, const std::filesystem::path& dir = smolvlm_folder());
// A file's bytes, `name` relative to the source tree.
std::vector<uint8_t> image_bytes(const std::string& name);
// The worst cosine over rows of `n` values (and a failure when the sizes differ).
double worst_cosine(const std::vector<float>& got, const std::vector<float>& want, size_t n);
// Every backend plugin's name.
std::vector<std::string> all_backends();

}  // namespace cellm::testing
