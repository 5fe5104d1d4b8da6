// The real SmolLM2-135M (Q4_1) converted to .cellm gives bit-identical logits and identical token ids; quantized
// by cellm-host convert, SmolLM2 and Gemma-3-270M stay within a looser bar of their unquantized files.
// Skipped when scripts/fetch_models.sh has not fetched the models.
#include "test_support.h"

#include "model/cellm_writer.h"
#include "tokenize/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

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

struct QuantizedCase {
    const char* model;      // file in the models folder
    const char* reference;  // parity data under tests/data/parity: its prompts and llama.cpp's greedy tokens
    const char* scheme;
    double min_mean_cosine, min_top1;
};

// Teacher-forced over the parity prompts followed by llama.cpp's greedy continuations, on openblas: the mean
// cosine of the logits against the unquantized file, and how often the top token agrees. The bars sit below the
// measured values (printed) with a margin; int4 symmetric is reported by convert but has no bar here: on these
// already 4-bit files it drifts far (SmolLM2 mean cosine 0.79).
class QuantizedRealModel : public ::testing::TestWithParam<QuantizedCase> {};

TEST_P(QuantizedRealModel, StaysWithinItsBar) {
    const QuantizedCase c = GetParam();
    const fs::path source = models_dir() / c.model;
    if (!fs::exists(source)) GTEST_SKIP() << source << " not present (scripts/fetch_models.sh)";
    const fs::path output = temp_dir() / (std::string(c.scheme) + "-" + c.model + ".cellm");
    const CommandResult r = run_host("convert --input " + shell_quote(source.string()) + " --output " +
                                     shell_quote(output.string()) + " --quantize " + c.scheme + " --group-size 32");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::ifstream in(source_dir() / "tests/data/parity" / c.reference);
    const nlohmann::json reference = nlohmann::json::parse(in);
    EngineOptions options;
    options.context_length = 512;
    Stack a = make_stack(source, "openblas", options), b = make_stack(output, "openblas", options);
    const size_t v = static_cast<size_t>(a.engine->n_vocab());
    double cosine_sum = 0.0, worst = 1.0;
    size_t positions = 0, agree = 0;
    for (const auto& p : reference["prompts"]) {
        std::vector<int32_t> tokens = p["prompt_ids"].get<std::vector<int32_t>>();
        const auto greedy = p["greedy_ids"].get<std::vector<int32_t>>();
        tokens.insert(tokens.end(), greedy.begin(), greedy.end());
        std::vector<float> la, lb;
        for (auto [s, out] : {std::pair{&a, &la}, std::pair{&b, &lb}}) {
            const int32_t seq = s->engine->create_sequence();
            const Engine::Work work{seq, tokens, LogitsWanted::All};
            s->engine->step({&work, 1}, *out);
            s->engine->release_sequence(seq);
        }
        for (size_t at = 0; at + v <= la.size(); at += v) {
            const double cs = cosine(la.data() + at, lb.data() + at, v);
            cosine_sum += cs;
            worst = std::min(worst, cs);
            agree += std::max_element(la.begin() + static_cast<ptrdiff_t>(at), la.begin() + static_cast<ptrdiff_t>(at + v)) - la.begin() ==
                             std::max_element(lb.begin() + static_cast<ptrdiff_t>(at), lb.begin() + static_cast<ptrdiff_t>(at + v)) - lb.begin()
                         ? 1 : 0;
            ++positions;
        }
    }
    const double mean = cosine_sum / static_cast<double>(positions), top1 = static_cast<double>(agree) / static_cast<double>(positions);
    std::printf("%s %s g32: %zu positions, cosine mean %.6f worst %.6f, top-1 %.3f\n", c.model, c.scheme, positions, mean, worst, top1);
    EXPECT_GE(mean, c.min_mean_cosine);
    EXPECT_GE(top1, c.min_top1);
}

INSTANTIATE_TEST_SUITE_P(
    Models, QuantizedRealModel,
    ::testing::Values(QuantizedCase{"SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m-q4_1.json", "int8", 0.99, 0.9},
                      QuantizedCase{"SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m-q4_1.json", "q4-affine", 0.97, 0.7},
                      QuantizedCase{"gemma-3-270m-q4_k_m.gguf", "gemma3-270m-q4_k_m.json", "int8", 0.995, 0.9},
                      QuantizedCase{"gemma-3-270m-q4_k_m.gguf", "gemma3-270m-q4_k_m.json", "q4-affine", 0.95, 0.65}),
    [](const auto& test) {
        return std::string(test.param.model[0] == 'S' ? "SmolLM2_" : "Gemma3_") +
               (test.param.scheme[0] == 'i' ? "int8" : "q4_affine");
    });

}  // namespace
}  // namespace cellm::testing
