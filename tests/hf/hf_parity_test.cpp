// Every folder under tests/data/hf holds a tiny random-weight model that transformers saved, and
// reference.json: transformers' logits for fixed tokens (scripts/hf_reference). cellm must load the folder
// through the safetensors plugin and give the same logits on every backend, however the tokens arrive: all at
// once, in chunks and then one at a time, in a step shared with another sequence, and after a fork.
//
// The bar is the issue's: cosine >= 0.9999 at every position, on f32 weights. transformers computes in float32
// with its own summation order, so bit equality is not expected.
#include "test_support.h"

#include "error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <span>

namespace fs = std::filesystem;

namespace cellm::testing {
namespace {

constexpr double kMinCosine = 0.9999;

struct Reference {
    std::vector<int32_t> tokens;
    size_t n_vocab = 0;
    std::vector<float> logits;  // n_vocab per position
    nlohmann::json skip;        // backend -> why it cannot run this model (an op it declines)
};

const Reference& reference(const std::string& folder) {
    static std::map<std::string, Reference> cache;
    auto [it, fresh] = cache.try_emplace(folder);
    if (fresh) {
        std::ifstream in(source_dir() / "tests/data/hf" / folder / "reference.json");
        const nlohmann::json j = nlohmann::json::parse(in);
        Reference& r = it->second;
        r.tokens = j.at("tokens").get<std::vector<int32_t>>();
        r.n_vocab = j.at("n_vocab").get<size_t>();
        for (const auto& row : j.at("logits")) {
            for (const auto& v : row) r.logits.push_back(v.get<float>());
        }
        r.skip = j.value("skip_backends", nlohmann::json::object());
    }
    return it->second;
}

struct Case {
    std::string folder, backend;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.folder << " on " << c.backend; }

std::vector<Case> cases() {
    std::vector<std::string> folders;
    for (const auto& entry : fs::directory_iterator(source_dir() / "tests/data/hf")) {
        // Folders of another kind of reference (smolvlm-tiny's cases with images: smolvlm_test.cpp) have no "tokens".
        if (!fs::exists(entry.path() / "reference.json")) continue;
        std::ifstream in(entry.path() / "reference.json");
        if (nlohmann::json::parse(in).contains("tokens")) folders.push_back(entry.path().filename().string());
    }
    std::sort(folders.begin(), folders.end());
    std::vector<Case> out;
    for (const std::string& folder : folders) {
        for (const Plugin* p : registry().plugins(CELLM_PLUGIN_BACKEND)) out.push_back({folder, p->name()});
    }
    return out;
}

class HfParity : public ::testing::TestWithParam<Case> {
protected:
    void SetUp() override {
        const Case& c = GetParam();
        ref_ = &reference(c.folder);
        if (ref_->skip.contains(c.backend)) GTEST_SKIP() << ref_->skip[c.backend].get<std::string>();
        EngineOptions options;
        options.context_length = 64;
        options.max_sequences = 4;
        options.kv_type = CELLM_TYPE_F32;
        options.prefix_cache = false;
        stack_ = make_stack(source_dir() / "tests/data/hf" / c.folder, c.backend, options);
        ASSERT_EQ(static_cast<size_t>(stack_.model->info().n_vocab), ref_->n_vocab);
    }

    // Tokens [from, to) of the reference prompt, which outlives every step.
    std::span<const int32_t> tokens(size_t from, size_t to) const {
        return std::span<const int32_t>(ref_->tokens).subspan(from, to - from);
    }

    // Checks `logits` (n_vocab per row) against the reference rows from position `first` on.
    void expect_close(const std::vector<float>& logits, size_t first, const std::string& how) {
        const size_t n = ref_->n_vocab;
        ASSERT_EQ(logits.size() % n, 0u);
        double worst = 1.0;
        for (size_t row = 0; row < logits.size() / n; ++row) {
            const double c = cosine(logits.data() + row * n, ref_->logits.data() + (first + row) * n, n);
            worst = std::min(worst, c);
            EXPECT_GE(c, kMinCosine) << how << ", position " << first + row;
        }
        char text[32];
        std::snprintf(text, sizeof text, "%.9f", worst);
        RecordProperty(how + "_worst_cosine", text);
    }

    const Reference* ref_ = nullptr;
    Stack stack_;
};

TEST_P(HfParity, PrefillMatchesTransformers) {
    std::vector<float> logits;
    const Engine::Work work{stack_.engine->create_sequence(), ref_->tokens, LogitsWanted::All};
    stack_.engine->step({&work, 1}, logits);
    expect_close(logits, 0, "prefill");
}

// A chunk, a second chunk, then one token per step: whatever a layer carries between steps (its KV pages, a
// recurrent state) must pick up exactly where the last step left it.
TEST_P(HfParity, ChunksThenDecodeStepsMatchTransformers) {
    Engine& engine = *stack_.engine;
    const int32_t seq = engine.create_sequence();
    std::vector<float> all, logits;
    const size_t first_chunk = 5, second_chunk = 13;
    for (auto [from, to] : {std::pair{size_t{0}, first_chunk}, std::pair{first_chunk, second_chunk}}) {
        const Engine::Work work{seq, tokens(from, to), LogitsWanted::All};
        engine.step({&work, 1}, logits);
        all.insert(all.end(), logits.begin(), logits.end());
    }
    for (size_t t = second_chunk; t < ref_->tokens.size(); ++t) {
        const Engine::Work work{seq, tokens(t, t + 1), LogitsWanted::Last};
        engine.step({&work, 1}, logits);
        all.insert(all.end(), logits.begin(), logits.end());
    }
    expect_close(all, 0, "chunked");
}

// Two sequences in one step, one prefilling and one decoding, must not see each other.
TEST_P(HfParity, SequencesSharingAStepStayApart) {
    Engine& engine = *stack_.engine;
    const int32_t a = engine.create_sequence(), b = engine.create_sequence();
    std::vector<float> logits;
    const size_t head = 9;
    const Engine::Work start{a, tokens(0, head), LogitsWanted::None};
    engine.step({&start, 1}, logits);
    std::vector<float> got_a, got_b;
    for (size_t t = head; t < ref_->tokens.size(); ++t) {
        // b prefills the whole prompt in the first shared step, then both decode side by side.
        const Engine::Work work[2] = {{a, tokens(t, t + 1), LogitsWanted::Last},
                                      {b, t == head ? tokens(0, head + 1) : tokens(t, t + 1), LogitsWanted::Last}};
        engine.step(work, logits);
        ASSERT_EQ(logits.size(), 2 * ref_->n_vocab);
        got_a.insert(got_a.end(), logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(ref_->n_vocab));
        got_b.insert(got_b.end(), logits.begin() + static_cast<std::ptrdiff_t>(ref_->n_vocab), logits.end());
    }
    expect_close(got_a, head, "batched_a");
    expect_close(got_b, head, "batched_b");
}

// A fork continues from its parent's state; the parent continues unchanged.
TEST_P(HfParity, ForkContinuesFromItsParent) {
    Engine& engine = *stack_.engine;
    const int32_t parent = engine.create_sequence();
    std::vector<float> logits;
    const size_t head = 11;
    const Engine::Work start{parent, tokens(0, head), LogitsWanted::None};
    engine.step({&start, 1}, logits);
    const int32_t child = engine.fork_sequence(parent);
    std::vector<float> got_parent, got_child;
    for (size_t t = head; t < ref_->tokens.size(); ++t) {
        const Engine::Work work[2] = {{parent, tokens(t, t + 1), LogitsWanted::Last},
                                      {child, tokens(t, t + 1), LogitsWanted::Last}};
        engine.step(work, logits);
        got_parent.insert(got_parent.end(), logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(ref_->n_vocab));
        got_child.insert(got_child.end(), logits.begin() + static_cast<std::ptrdiff_t>(ref_->n_vocab), logits.end());
    }
    expect_close(got_parent, head, "fork_parent");
    expect_close(got_child, head, "fork_child");
}

INSTANTIATE_TEST_SUITE_P(Folders, HfParity, ::testing::ValuesIn(cases()), [](const ::testing::TestParamInfo<Case>& p) {
    std::string name = p.param.folder + "_" + p.param.backend;
    for (char& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
    return name;
});

}  // namespace
}  // namespace cellm::testing
