// The llama plugin and the reference forward on the real SmolLM2-135M-Instruct file, the latter against
// logits from an independent numpy forward (make_smollm2_logits.py: gguf-py dequantization, Hugging Face rope
// layout). Skipped when the model has not been fetched (scripts/fetch_models.sh) or the gguf plugin is not built.
#include "plugin/host_api.h"
#include "plugin_library.hpp"
#include "reference_forward.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>

namespace cellm::testing {
namespace {

namespace fs = std::filesystem;

fs::path models_dir() {
    if (const char* dir = std::getenv("CELLM_MODELS")) return dir;
    const char* home = std::getenv("HOME");
    return fs::path(home != nullptr ? home : "") / ".cache/cellm/models";
}

nlohmann::json expected_logits() {
    std::ifstream data(fs::path(CELLM_LLAMA_TEST_DATA) / "smollm2_reference_logits.json");
    if (!data) throw std::runtime_error("missing smollm2_reference_logits.json");
    return nlohmann::json::parse(data);
}

// The SmolLM2 file opened through the gguf plugin; skips the test when either is missing.
class SmolLM2 : public ::testing::Test {
protected:
    void SetUp() override {
        const fs::path path = models_dir() / expected.at("model").get<std::string>();
        if (!fs::exists(path)) GTEST_SKIP() << path << " not fetched";
        if (!fs::exists(fs::path(CELLM_PLUGIN_DIR) / "cellm-gguf.so")) GTEST_SKIP() << "gguf plugin not built";
        gguf = std::make_unique<PluginLibrary>("gguf");
        ASSERT_EQ(outcome(gguf->format().open(path.c_str(), &file)).message, "");
        view.struct_size = sizeof(view);
        ASSERT_EQ(outcome(gguf->format().get_view(file, &view)).message, "");
    }
    void TearDown() override {
        if (file != nullptr) gguf->format().close(file);
    }

    const nlohmann::json expected = expected_logits();
    std::unique_ptr<PluginLibrary> gguf;
    cellm_model_file* file = nullptr;
    cellm_model_view view{};
};

TEST_F(SmolLM2, LlamaPluginReadsTheFile) {
    const PluginLibrary llama("llama");
    cellm_arch_model* model = nullptr;
    ASSERT_EQ(outcome(llama.arch().load(&view, &model)).message, "");
    cellm_arch_info info{};
    info.struct_size = sizeof(info);
    EXPECT_EQ(outcome(llama.arch().get_info(model, &info)).code, CELLM_OK);
    llama.arch().destroy(model);
    EXPECT_EQ(info.n_layer, 30);
    EXPECT_EQ(info.n_vocab, 49152);
    EXPECT_EQ(info.n_embd, 576);
    EXPECT_EQ(info.kv_dim, 192);  // 3 KV heads of 64
    EXPECT_EQ(info.n_ctx_train, 8192);
}

TEST_F(SmolLM2, ReferenceMatchesIndependentNumpyForward) {
    const auto tokens = expected.at("tokens").get<std::vector<int32_t>>();
    const std::vector<std::vector<float>> logits = reference_logits(view, tokens, Arithmetic::Float);
    ASSERT_EQ(logits.size(), tokens.size());
    for (size_t p = 0; p < tokens.size(); ++p) {
        const nlohmann::json& row = expected.at("positions").at(p);
        const auto ids = row.at("ids").get<std::vector<size_t>>();
        const auto values = row.at("logits").get<std::vector<float>>();
        ASSERT_EQ(logits[p].size(), 49152u);
        const auto top = std::max_element(logits[p].begin(), logits[p].end());
        const auto argmax = static_cast<size_t>(top - logits[p].begin());
        EXPECT_EQ(argmax, ids.at(0)) << "position " << p;
        for (size_t i = 0; i < ids.size(); ++i) {
            EXPECT_NEAR(logits[p].at(ids[i]), values[i], 1e-3) << "position " << p << " token " << ids[i];
        }
    }
}

}  // namespace
}  // namespace cellm::testing
