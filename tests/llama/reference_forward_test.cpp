// The reference forward checked against hand computation and against itself under transformations that must
// not change the logits (duplicated KV heads, an untied copy of the embeddings, a re-laid-out rope, ...).
#include "fake_model.hpp"
#include "reference_forward.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

namespace cellm::testing {
namespace {

using Logits = std::vector<std::vector<float>>;

const std::vector<int32_t> kTokens = {3, 7, 1, 12, 0, 5};

void expect_same(const Logits& a, const Logits& b, size_t rows) {
    ASSERT_GE(a.size(), rows);
    ASSERT_GE(b.size(), rows);
    for (size_t p = 0; p < rows; ++p) {
        ASSERT_EQ(a[p].size(), b[p].size());
        for (size_t i = 0; i < a[p].size(); ++i) {
            EXPECT_NEAR(a[p][i], b[p][i], 1e-4 * (1.0 + std::fabs(b[p][i]))) << "position " << p << " logit " << i;
        }
    }
}

double max_difference(const Logits& a, const Logits& b) {
    double d = 0.0;
    for (size_t p = 0; p < a.size(); ++p) {
        for (size_t i = 0; i < a[p].size(); ++i) d = std::max(d, static_cast<double>(std::fabs(a[p][i] - b[p][i])));
    }
    return d;
}

// Rows [row0, row0 + n) of a [cols, rows] tensor's data.
std::vector<float> rows_of(const std::vector<float>& data, int64_t cols, int64_t row0, int64_t n) {
    return {data.begin() + row0 * cols, data.begin() + (row0 + n) * cols};
}

TEST(ReferenceForward, WithoutLayersIsNormalisedEmbeddingTimesClassifier) {
    FakeModel model({.n_layer = 0});
    const Logits logits = reference_logits(model.view(), kTokens);
    ASSERT_EQ(logits.size(), kTokens.size());
    const std::vector<float>& embd = model.data("token_embd.weight");
    const std::vector<float>& norm = model.data("output_norm.weight");
    for (size_t p = 0; p < kTokens.size(); ++p) {
        const std::vector<float> x = rows_of(embd, 16, kTokens[p], 1);
        double ss = 0.0;
        for (float v : x) ss += v * v;
        const double scale = 1.0 / std::sqrt(ss / 16.0 + 1e-5);
        ASSERT_EQ(logits[p].size(), 13u);
        for (int64_t v = 0; v < 13; ++v) {
            double expected = 0.0;
            for (size_t i = 0; i < 16; ++i) expected += embd[static_cast<size_t>(v * 16) + i] * x[i] * scale * norm[i];
            EXPECT_NEAR(logits[p][static_cast<size_t>(v)], expected, 1e-4);
        }
    }
}

TEST(ReferenceForward, EarlierPositionsIgnoreLaterTokens) {
    FakeModel model({});
    const Logits full = reference_logits(model.view(), kTokens);
    const Logits prefix = reference_logits(model.view(), std::span(kTokens).first(3));
    ASSERT_EQ(prefix.size(), 3u);
    expect_same(prefix, full, 3);
    // Later positions do depend on earlier tokens.
    std::vector<int32_t> changed = kTokens;
    changed[0] = 9;
    EXPECT_GT(max_difference(reference_logits(model.view(), changed), full), 1e-3);
}

TEST(ReferenceForward, GroupedKvHeadsEqualDuplicatedHeads) {
    FakeModel grouped({.n_head = 4, .n_head_kv = 2});
    FakeModel full({.n_head = 4, .n_head_kv = 4}, 2);
    const cellm_model_view& view = grouped.view();
    for (uint64_t i = 0; i < view.n_tensors; ++i) {
        const cellm_tensor_info* t = cellm_model_tensor(&view, i);
        const std::string name(t->name.data, t->name.len);
        std::vector<float> data = grouped.data(name);
        if (name.find("attn_k.weight") != std::string::npos || name.find("attn_v.weight") != std::string::npos) {
            // Query heads 2h and 2h+1 share KV head h: give each its own copy.
            std::vector<float> duplicated;
            for (int64_t head = 0; head < 4; ++head) {
                const std::vector<float> rows = rows_of(data, 16, (head / 2) * 4, 4);
                duplicated.insert(duplicated.end(), rows.begin(), rows.end());
            }
            full.set_tensor(name, {16, 16}, duplicated);
        } else {
            full.set_tensor(name, {t->ne[0], t->ne[1]}, data);
        }
    }
    expect_same(reference_logits(full.view(), kTokens), reference_logits(grouped.view(), kTokens), kTokens.size());
}

TEST(ReferenceForward, TiedEmbeddingsEqualAnUntiedCopy) {
    FakeModel tied({.tied = true});
    FakeModel untied({.tied = true});
    untied.set_tensor("output.weight", {16, 13}, tied.data("token_embd.weight"));
    expect_same(reference_logits(untied.view(), kTokens), reference_logits(tied.view(), kTokens), kTokens.size());
    untied.data("output.weight")[0] += 1.0f;
    EXPECT_GT(max_difference(reference_logits(untied.view(), kTokens), reference_logits(tied.view(), kTokens)), 1e-4);
}

TEST(ReferenceForward, RopeFreqsDivideFrequenciesLikeLinearScaling) {
    FakeModel factors({.rope_freqs = true});
    std::fill(factors.data("rope_freqs.weight").begin(), factors.data("rope_freqs.weight").end(), 4.0f);
    FakeModel linear({});
    linear.set_string("llama.rope.scaling.type", "linear");
    linear.set_f32("llama.rope.scaling.factor", 4.0f);
    const Logits scaled = reference_logits(linear.view(), kTokens);
    expect_same(reference_logits(factors.view(), kTokens), scaled, kTokens.size());
    FakeModel plain({});
    EXPECT_GT(max_difference(reference_logits(plain.view(), kTokens), scaled), 1e-3);
}

TEST(ReferenceForward, HalvesLayoutEqualsGgufPermutedAdjacentLayout) {
    FakeModel adjacent({});
    FakeModel halves({});  // same seed: same weights
    halves.set_string("cellm.rope.layout", "halves");
    // GGUF's converter maps Hugging Face row s*hd/2 + i of each head to row 2i + s; undo it.
    const int64_t hd = 4;
    for (const std::string name : {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.1.attn_q.weight",
                                   "blk.1.attn_k.weight"}) {
        const std::vector<float>& src = adjacent.data(name);
        std::vector<float>& dst = halves.data(name);
        const auto rows = static_cast<int64_t>(src.size()) / 16;
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t head = r / hd, i = (r % hd) / 2, s = r % 2;
            const std::vector<float> row = rows_of(src, 16, r, 1);
            std::copy(row.begin(), row.end(), dst.begin() + (head * hd + s * hd / 2 + i) * 16);
        }
    }
    expect_same(reference_logits(halves.view(), kTokens), reference_logits(adjacent.view(), kTokens), kTokens.size());
}

TEST(ReferenceForward, RejectsBadInput) {
    FakeModel model({});
    const std::vector<int32_t> outside = {13};
    EXPECT_THROW(reference_logits(model.view(), outside), std::out_of_range);
    model.erase_tensor("blk.1.ffn_down.weight");
    EXPECT_THROW(reference_logits(model.view(), kTokens), std::runtime_error);
}

}  // namespace
}  // namespace cellm::testing
