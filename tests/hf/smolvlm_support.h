// What the SmolVLM suites share (smolvlm_test.cpp on the Hugging Face folder, smolvlm_gguf_test.cpp on llama.cpp's
// GGUF pair): the tiny model's folder and transformers' reference (scripts/hf_reference/smolvlm.py), its files,
// and the comparisons.
#pragma once

#include "test_support.h"

#include "vision/image_prompt.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
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

// A SmolVLM on the backend the test is given, with its image prompter: the suites' fixtures open their model in
// SetUp (the folder, or a text GGUF with its mmproj).
class SmolVlmFixture : public ::testing::TestWithParam<std::string> {
protected:
    void open(const std::filesystem::path& model, const std::filesystem::path& mmproj = {});
    // The prompt of a reference case (its "image" and "prompt"), images and tokens made by the prompter.
    ImagePrompter::Prompt build(const nlohmann::json& c);
    // The logits of every position of `prompt`, run through a fresh sequence in steps of `chunk` tokens.
    std::vector<float> logits(const ImagePrompter::Prompt& prompt, size_t chunk);

    Stack stack_;
    std::unique_ptr<ImagePrompter> prompter_;
    size_t n_vocab_ = 0;
};

}  // namespace cellm::testing
