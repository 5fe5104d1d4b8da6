#include "smolvlm_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

namespace cellm::testing {

std::filesystem::path smolvlm_folder() { return source_dir() / "tests/data/hf/smolvlm-tiny"; }

nlohmann::json read_json(const std::filesystem::path& path) {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
}

const nlohmann::json& smolvlm_reference() {
    static const nlohmann::json j = read_json(smolvlm_folder() / "reference.json");
    return j;
}

std::vector<float> floats_of(const std::string& file, const std::filesystem::path& dir) {
    std::ifstream in(dir / file, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<float> out(bytes.size() / sizeof(float));
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
    return out;
}

std::vector<uint8_t> image_bytes(const std::string& name) {
    std::ifstream in(source_dir() / name, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

double worst_cosine(const std::vector<float>& got, const std::vector<float>& want, size_t n) {
    EXPECT_EQ(got.size(), want.size());
    double worst = 1.0;
    for (size_t r = 0; r * n < std::min(got.size(), want.size()); ++r) {
        worst = std::min(worst, cosine(got.data() + r * n, want.data() + r * n, n));
    }
    return worst;
}

std::vector<std::string> all_backends() {
    std::vector<std::string> out;
    for (const Plugin* p : registry().plugins(CELLM_PLUGIN_BACKEND)) out.emplace_back(p->name());
    return out;
}

void SmolVlmFixture::open(const std::filesystem::path& model, const std::filesystem::path& mmproj) {
    EngineOptions options;
    options.context_length = 128;
    options.max_sequences = 2;
    options.kv_type = CELLM_TYPE_F32;
    stack_ = make_stack(model, GetParam(), options, mmproj);
    prompter_ = std::make_unique<ImagePrompter>(*stack_.model, *stack_.backend, stack_.engine->weights());
    n_vocab_ = smolvlm_reference().at("n_vocab").get<size_t>();
}

ImagePrompter::Prompt SmolVlmFixture::build(const nlohmann::json& c) {
    const std::vector<uint8_t> bytes = image_bytes(c.at("image").get<std::string>());
    const std::span<const uint8_t> images[] = {bytes};
    return prompter_->build(c.at("prompt").get<std::string>(), images, false);
}

std::vector<float> SmolVlmFixture::logits(const ImagePrompter::Prompt& prompt, size_t chunk) {
    Engine& engine = *stack_.engine;
    const int32_t seq = engine.create_sequence();
    const auto n_embd = static_cast<size_t>(engine.model().info().n_embd);
    std::vector<float> all, step;
    for (size_t from = 0; from < prompt.tokens.size(); from += chunk) {
        const size_t n = std::min(chunk, prompt.tokens.size() - from);
        std::vector<Engine::EmbeddedRow> rows;
        if (prompt.embeddings != nullptr) {
            const auto& at = prompt.embeddings->positions;
            for (size_t i = 0; i < at.size(); ++i) {
                if (at[i] >= static_cast<int32_t>(from) && at[i] < static_cast<int32_t>(from + n)) {
                    rows.push_back({at[i] - static_cast<int32_t>(from), prompt.embeddings->values.data() + i * n_embd});
                }
            }
        }
        const Engine::Work work{seq, std::span(prompt.tokens).subspan(from, n), LogitsWanted::All, rows};
        engine.step(std::span(&work, 1), step);
        all.insert(all.end(), step.begin(), step.end());
    }
    engine.release_sequence(seq);
    return all;
}

}  // namespace cellm::testing
