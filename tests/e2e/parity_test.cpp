// Parity with llama.cpp on the real SmolLM2-135M-Instruct Q4_1: tokenization, teacher-forced logits and greedy
// generations against tests/data/parity/smollm2-135m-q4_1.json (made by scripts/make_parity_reference.py).
// Every built backend must pass the same bars.
#include "test_support.h"

#include "generator.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

namespace cellm::testing {
namespace {

const nlohmann::json& reference() {
    static const nlohmann::json j = [] {
        std::ifstream in(source_dir() / "tests/data/parity/smollm2-135m-q4_1.json");
        return nlohmann::json::parse(in);
    }();
    return j;
}

std::vector<std::string> built_backends() {
    std::vector<std::string> names;
    for (const Plugin* p : registry().plugins(CELLM_PLUGIN_BACKEND)) names.emplace_back(p->name());
    return names;
}

class Parity : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        ASSERT_TRUE(std::filesystem::exists(smollm2_path()))
            << smollm2_path() << " is missing: run scripts/fetch_models.sh (the README's test command does)";
        EngineOptions options;
        options.context_length = 512;
        stack_ = make_stack(smollm2_path(), GetParam(), options);
    }
    Stack stack_;
};

TEST_P(Parity, TokenizerMatchesLlamaCpp) {
    const Tokenizer& tok = stack_.model->tokenizer();
    for (const auto& p : reference()["prompts"]) {
        const std::string text = p["chat"].get<bool>() ? p["rendered"].get<std::string>() : p["text"].get<std::string>();
        EXPECT_EQ(tok.encode(text, tok.add_bos(), true), p["prompt_ids"].get<std::vector<int32_t>>()) << text;
    }
}

TEST_P(Parity, TeacherForcedLogitsMatchLlamaCpp) {
    const size_t n_vocab = static_cast<size_t>(stack_.engine->n_vocab());
    size_t positions = 0, top1_agree = 0;
    double worst_cosine = 1.0;
    for (const auto& p : reference()["prompts"]) {
        std::vector<int32_t> tokens = p["prompt_ids"].get<std::vector<int32_t>>();
        const auto greedy = p["greedy_ids"].get<std::vector<int32_t>>();
        tokens.insert(tokens.end(), greedy.begin(), greedy.end());
        const auto& top20 = p["top20"];
        ASSERT_EQ(top20.size(), tokens.size());

        const int32_t seq = stack_.engine->create_sequence();
        std::vector<float> logits;
        const Engine::Work work{seq, tokens, LogitsWanted::All};
        stack_.engine->step({&work, 1}, logits);
        stack_.engine->release_sequence(seq);

        for (size_t pos = 0; pos < tokens.size(); ++pos) {
            const float* ours = logits.data() + pos * n_vocab;
            std::vector<float> expected, got;
            for (const auto& entry : top20[pos]) {
                got.push_back(ours[entry[0].get<size_t>()]);
                expected.push_back(entry[1].get<float>());
            }
            const double c = cosine(got.data(), expected.data(), got.size());
            worst_cosine = std::min(worst_cosine, c);
            EXPECT_GE(c, 0.999) << "prompt '" << p["text"].get<std::string>() << "' position " << pos;
            const auto best = static_cast<int32_t>(std::max_element(ours, ours + n_vocab) - ours);
            top1_agree += best == top20[pos][0][0].get<int32_t>() ? 1 : 0;
            ++positions;
        }
    }
    const double agreement = static_cast<double>(top1_agree) / static_cast<double>(positions);
    RecordProperty("worst_cosine", std::to_string(worst_cosine));
    RecordProperty("top1_agreement", std::to_string(agreement));
    std::printf("%s: %zu positions, worst top-20 cosine %.6f, top-1 agreement %.4f\n", GetParam().c_str(), positions,
                worst_cosine, agreement);
    EXPECT_GE(agreement, 0.98);
}

TEST_P(Parity, GreedyGenerationsMatchLlamaCpp) {
    int identical = 0, total = 0;
    for (const auto& p : reference()["prompts"]) {
        Generator generator(*stack_.engine, stack_.model->tokenizer());
        GenerationRequest request;
        request.prompt = p["prompt_ids"].get<std::vector<int32_t>>();
        request.sampling.temperature = 0;
        request.max_tokens = static_cast<int32_t>(reference()["generator"]["greedy_tokens"].get<int>());
        std::vector<int32_t> expected = p["greedy_ids"].get<std::vector<int32_t>>();
        // Our generator does not return the end-of-generation token; llama.cpp's list may end with it.
        const Tokenizer& tok = stack_.model->tokenizer();
        if (const auto eog = std::find_if(expected.begin(), expected.end(), [&](int32_t t) { return tok.is_end_of_generation(t); });
            eog != expected.end()) {
            expected.erase(eog, expected.end());
        }
        const auto got = generator.generate(request, nullptr).tokens;
        ++total;
        if (got == expected) {
            ++identical;
        } else {
            // The bar allows one divergence in six; each is printed so a drift is visible before it fails.
            std::printf("diverges: prompt '%s'\n  ours:      %s\n  llama.cpp: %s\n", p["text"].get<std::string>().c_str(),
                        tok.decode(got).c_str(), tok.decode(expected).c_str());
        }
    }
    std::printf("%s: %d of %d greedy generations identical\n", GetParam().c_str(), identical, total);
    EXPECT_GE(identical, 5);
}

INSTANTIATE_TEST_SUITE_P(EveryBackend, Parity, ::testing::ValuesIn(built_backends()),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace cellm::testing
