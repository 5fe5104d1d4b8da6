// cellm's own weight types end to end: the synthetic F32 model with its 2-D weights stored as I8S, I4S or
// Q4A groups (plugins/backends/blocks' reference quantizer) in a .cellm file runs on every CPU backend and
// stays within a documented bar of the F32 model: mean cosine of the logits and top-1 agreement over a few
// fixed prompts.
#include "test_support.h"

#include "blocks.h"
#include "model/cellm_writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

namespace fs = std::filesystem;

namespace cellm::testing {
namespace {

struct Case {
    const char* name;
    cellm_dtype type;
    double min_cosine;  // worst position over all prompts
    double min_top1;    // fraction of positions whose argmax agrees
};

// The bars, from measurement with margin: int8 groups are near lossless (worst cosine 0.99993); 4-bit groups
// move logits visibly (0.981 to 0.985). The random model's logits are nearly flat, so near-ties make top-1
// agreement a loose signal here (0.72 to 0.92 for 4 bits over these 25 positions); cosine is the real bar.
const Case cases[] = {
    {"I8S_G32", CELLM_TYPE_I8S_G32, 0.9999, 0.9},   {"I8S_G128", CELLM_TYPE_I8S_G128, 0.9999, 0.9},
    {"I4S_G32", CELLM_TYPE_I4S_G32, 0.975, 0.6},    {"I4S_G64", CELLM_TYPE_I4S_G64, 0.975, 0.6},
    {"I4S_G128", CELLM_TYPE_I4S_G128, 0.975, 0.6},  {"Q4A_G32", CELLM_TYPE_Q4A_G32, 0.975, 0.6},
    {"Q4A_G64", CELLM_TYPE_Q4A_G64, 0.975, 0.6},    {"Q4A_G128", CELLM_TYPE_Q4A_G128, 0.975, 0.6},
};

const std::vector<std::vector<int32_t>> prompts = {
    {1, 17, 5, 230, 42, 99, 7, 3}, {1, 250, 251, 252, 9, 9, 9}, {1, 33, 66, 99, 132, 165, 198, 231, 264, 297}};

// The F32 synthetic model with every 2-D weight quantized to `type`, written as .cellm.
fs::path quantized_model(const Case& c) {
    auto source = ModelFile::open(registry(), synthetic_model(CELLM_TYPE_F32));
    const cellm_model_view& view = source->view();
    CellmWriter writer;
    for (uint64_t i = 0; i < view.n_meta; ++i) writer.add_meta(view.meta[i]);
    std::vector<std::vector<uint8_t>> stored;  // outlives write(); inner buffers never move
    stored.reserve(view.n_tensors);
    for (uint64_t i = 0; i < view.n_tensors; ++i) {
        cellm_tensor_info t = *cellm_model_tensor(&view, i);
        if (t.n_dims >= 2) {
            const int64_t row = t.ne[0];
            const uint64_t rows = t.size / sizeof(float) / static_cast<uint64_t>(row);
            const uint64_t row_bytes = blocks::row_bytes(c.type, row);
            std::vector<uint8_t>& out = stored.emplace_back(rows * row_bytes);
            for (uint64_t r = 0; r < rows; ++r) {
                blocks::quantize_row(c.type, static_cast<const float*>(t.data) + r * static_cast<uint64_t>(row),
                                     out.data() + r * row_bytes, row);
            }
            t.type = c.type;
            t.data = out.data();
            t.size = out.size();
        }
        writer.add_tensor(t);
    }
    const fs::path path = temp_dir() / (std::string("tiny-") + c.name + ".cellm");
    writer.write(path);
    return path;
}

std::vector<float> logits_of(const fs::path& model, const std::string& backend, const std::vector<int32_t>& tokens) {
    Stack s = make_stack(model, backend);
    const Engine::Work work{s.engine->create_sequence(), tokens, LogitsWanted::All};
    std::vector<float> logits;
    s.engine->step({&work, 1}, logits);
    return logits;
}

class QuantizedCellm : public ::testing::TestWithParam<std::tuple<Case, const char*>> {};

TEST_P(QuantizedCellm, StaysWithinItsBarOfF32) {
    const auto& [c, backend] = GetParam();
    const fs::path model = quantized_model(c);
    double worst_cosine = 1.0;
    size_t agree = 0, positions = 0;
    for (const auto& tokens : prompts) {
        const std::vector<float> expected = logits_of(synthetic_model(CELLM_TYPE_F32), "scalar", tokens);
        const std::vector<float> got = logits_of(model, backend, tokens);
        ASSERT_EQ(got.size(), expected.size());
        const size_t n_vocab = got.size() / tokens.size();
        for (size_t p = 0; p < tokens.size(); ++p) {
            const float* a = expected.data() + p * n_vocab;
            const float* b = got.data() + p * n_vocab;
            worst_cosine = std::min(worst_cosine, cosine(a, b, n_vocab));
            agree += std::max_element(a, a + n_vocab) - a == std::max_element(b, b + n_vocab) - b ? 1 : 0;
            ++positions;
        }
    }
    const double top1 = static_cast<double>(agree) / static_cast<double>(positions);
    EXPECT_GE(worst_cosine, c.min_cosine);
    EXPECT_GE(top1, c.min_top1);
    std::printf("%s on %s: worst cosine %.6f, top-1 agreement %.3f\n", c.name, backend, worst_cosine, top1);
}

INSTANTIATE_TEST_SUITE_P(CellmTypes, QuantizedCellm,
                         ::testing::Combine(::testing::ValuesIn(cases), ::testing::Values("scalar", "openblas")),
                         [](const auto& param_info) {
                             return std::string(std::get<0>(param_info.param).name) + "_" +
                                    std::get<1>(param_info.param);
                         });

}  // namespace
}  // namespace cellm::testing
