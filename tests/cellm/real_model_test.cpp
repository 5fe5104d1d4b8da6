// The real SmolLM2-135M (Q4_1) converted to .cellm gives bit-identical logits and identical token ids.
// Skipped when scripts/fetch_models.sh has not fetched the model.
#include "test_support.h"

#include "cellm_writer.h"
#include "tokenizer.h"

#include <gtest/gtest.h>

#include <cstring>

namespace fs = std::filesystem;

namespace cellm::testing {
namespace {

std::vector<float> logits_of(const fs::path& model, const std::vector<int32_t>& tokens) {
    Stack s = make_stack(model);
    const Engine::Work work{s.engine->create_sequence(), tokens, LogitsWanted::All};
    std::vector<float> logits;
    s.engine->step({&work, 1}, logits);
    return logits;
}

TEST(RealModel, SmolLM2ConvertsWithIdenticalLogitsAndTokens) {
    const fs::path gguf = smollm2_path();
    if (!fs::exists(gguf)) GTEST_SKIP() << gguf << " not present (scripts/fetch_models.sh)";
    const fs::path cellm = temp_dir() / "smollm2.cellm";
    auto a = ModelFile::open(registry(), gguf);
    std::vector<std::string> skipped;
    CellmWriter::from_view(a->view(), skipped).write(cellm);
    EXPECT_TRUE(skipped.empty());
    auto b = ModelFile::open(registry(), cellm);

    auto ta = Tokenizer::from_model(a->view());
    auto tb = Tokenizer::from_model(b->view());
    EXPECT_EQ(ta->chat_template(), tb->chat_template());
    const char* texts[] = {"The capital of France is", "Hello, world! 12345 ünïcödé", "<|im_start|>user\nhi<|im_end|>"};
    for (const char* text : texts) EXPECT_EQ(ta->encode(text, true, true), tb->encode(text, true, true)) << text;

    const std::vector<int32_t> tokens = ta->encode(texts[0], true, true);
    const std::vector<float> expected = logits_of(gguf, tokens);
    const std::vector<float> got = logits_of(cellm, tokens);
    ASSERT_EQ(got.size(), expected.size());
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0) << "logits differ";
}

}  // namespace
}  // namespace cellm::testing
