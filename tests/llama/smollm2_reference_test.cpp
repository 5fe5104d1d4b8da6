// The reference forward on the real SmolLM2-135M-Instruct file, against logits from an independent numpy forward
// (make_smollm2_logits.py: gguf-py dequantization, Hugging Face rope layout). Skipped when the model has not
// been fetched (scripts/fetch_models.sh) or the gguf plugin is not built.
#include "host_api.h"
#include "plugin_library.hpp"
#include "reference_forward.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>

namespace cellm::testing {
namespace {

namespace fs = std::filesystem;

fs::path models_dir() {
    if (const char* dir = std::getenv("CELLM_MODELS")) return dir;
    const char* home = std::getenv("HOME");
    return fs::path(home != nullptr ? home : "") / ".cache/cellm/models";
}

TEST(ReferenceForwardSmolLM2, MatchesIndependentNumpyForward) {
    std::ifstream data(fs::path(CELLM_LLAMA_TEST_DATA) / "smollm2_reference_logits.json");
    ASSERT_TRUE(data) << "missing test data";
    const nlohmann::json expected = nlohmann::json::parse(data);
    const fs::path model_path = models_dir() / expected.at("model").get<std::string>();
    if (!fs::exists(model_path)) GTEST_SKIP() << model_path << " not fetched";
    if (!fs::exists(fs::path(CELLM_PLUGIN_DIR) / "cellm-gguf.so")) GTEST_SKIP() << "gguf plugin not built";

    const PluginLibrary gguf("gguf");
    cellm_model_file* file = nullptr;
    ASSERT_EQ(outcome(gguf.format().open(model_path.c_str(), &file)).message, "");
    const std::unique_ptr<cellm_model_file, void (*)(cellm_model_file*)> owned(file, gguf.format().close);
    cellm_model_view view{};
    view.struct_size = sizeof(view);
    ASSERT_EQ(outcome(gguf.format().get_view(file, &view)).message, "");

    const auto tokens = expected.at("tokens").get<std::vector<int32_t>>();
    const std::vector<std::vector<float>> logits = reference_logits(view, tokens);
    ASSERT_EQ(logits.size(), tokens.size());
    for (size_t p = 0; p < tokens.size(); ++p) {
        const nlohmann::json& row = expected.at("positions").at(p);
        const auto ids = row.at("ids").get<std::vector<size_t>>();
        const auto values = row.at("logits").get<std::vector<float>>();
        ASSERT_EQ(logits[p].size(), 49152u);
        const auto argmax = static_cast<size_t>(std::max_element(logits[p].begin(), logits[p].end()) - logits[p].begin());
        EXPECT_EQ(argmax, ids.at(0)) << "position " << p;
        for (size_t i = 0; i < ids.size(); ++i) {
            EXPECT_NEAR(logits[p].at(ids[i]), values[i], 1e-3) << "position " << p << " token " << ids[i];
        }
    }
}

}  // namespace
}  // namespace cellm::testing
