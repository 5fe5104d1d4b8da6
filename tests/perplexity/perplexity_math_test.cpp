// The statistics of host/cli/perplexity_math.h on small hand-made distributions: the negative log-likelihood, the
// compact 16-bit rows and what they lose, the KL divergence against a row (0 against one's own, the textbook value
// against another), and the summaries.
#include "perplexity_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace cellm::cli {
namespace {

std::vector<float> logits_of(size_t n, float slope) {
    std::vector<float> l(n);
    for (size_t i = 0; i < n; ++i) {
        l[i] = slope * std::sin(static_cast<float>(i) * 0.37f) + 0.01f * static_cast<float>(i);
    }
    return l;
}

std::vector<double> log_softmax(const std::vector<float>& l) {
    double max = l[0];
    for (float v : l) max = std::max(max, static_cast<double>(v));
    double sum = 0;
    for (float v : l) sum += std::exp(v - max);
    std::vector<double> out;
    for (float v : l) out.push_back(v - max - std::log(sum));
    return out;
}

TEST(PerplexityMath, UniformLogitsCostLogN) {
    const std::vector<float> l(1000, 3.5f);
    EXPECT_NEAR(token_nll(l, 17), std::log(1000.0), 1e-6);
}

TEST(PerplexityMath, CompactRowKeepsLogProbabilitiesWithinHalfAStep) {
    const std::vector<float> l = logits_of(301, 12.0f);  // odd: the row is padded
    std::vector<uint16_t> row(compact_row_size(301));
    ASSERT_EQ(row.size(), 306u);
    const double nll = encode_compact(l, 5, row);
    const std::vector<double> exact = log_softmax(l);
    EXPECT_NEAR(nll, -exact[5], 1e-4);
    float scale, min_log_prob;
    std::memcpy(&scale, row.data(), sizeof scale);
    std::memcpy(&min_log_prob, row.data() + 2, sizeof min_log_prob);
    ASSERT_GT(scale, 0);
    for (size_t i = 0; i < l.size(); ++i) {
        const double decoded = scale * row[4 + i] + min_log_prob;
        if (exact[i] > min_log_prob + scale) {
            EXPECT_NEAR(decoded, exact[i], 0.51 * scale + 1e-5) << i;
        }
    }
    EXPECT_EQ(row.back(), 0);  // the padding entry
}

TEST(PerplexityMath, ARunAgainstItsOwnRowsDoesNotDiverge) {
    KlStats kl;
    PerplexityStats ppl;
    for (int p = 0; p < 40; ++p) {
        // Every log-probability within the 16 nats a row keeps (below them a row clips to its smallest).
        const std::vector<float> l = logits_of(500, 2.0f + static_cast<float>(p) * 0.05f);
        std::vector<uint16_t> row(compact_row_size(500));
        ppl.add(encode_compact(l, p * 7, row));
        kl.add(l, row, p * 7);
    }
    EXPECT_LT(std::fabs(kl.kl_divergence().value), 1e-6);
    EXPECT_EQ(kl.same_top, 40u);
    EXPECT_NEAR(std::exp(kl.log_ppl().value), ppl.ppl(), 1e-9 * ppl.ppl());
    EXPECT_NEAR(kl.log_ppl_ratio().value, 0, 1e-4);
    EXPECT_LT(kl.p_diff_rms().value, 1e-4);
}

TEST(PerplexityMath, KlDivergenceOfTwoDistributions) {
    const std::vector<float> base = logits_of(200, 3.0f), other = logits_of(200, 2.0f);
    std::vector<uint16_t> row(compact_row_size(200));
    encode_compact(base, 0, row);
    KlStats kl;
    kl.add(other, row, 0);
    const std::vector<double> p = log_softmax(base), q = log_softmax(other);
    double want = 0;
    for (size_t i = 0; i < p.size(); ++i) want += std::exp(p[i]) * (p[i] - q[i]);
    EXPECT_NEAR(kl.kl_divergence().value, want, 1e-3 * want + 1e-5);
    EXPECT_GT(want, 0.01);
}

TEST(PerplexityMath, Summaries) {
    const std::vector<float> sorted = {1, 2, 3, 4, 5};
    EXPECT_FLOAT_EQ(percentile(sorted, 0.5f), 3);
    EXPECT_FLOAT_EQ(percentile(sorted, 0.9f), 4.6f);
    EXPECT_FLOAT_EQ(percentile(sorted, 0), 1);
    EXPECT_FLOAT_EQ(percentile(sorted, 1), 5);
    // 20 values alternating 1 and 3: mean 2, variance 1, standard error 1/sqrt(19).
    const Estimate e = mean_and_uncertainty(40, 100, 20);
    EXPECT_DOUBLE_EQ(e.value, 2);
    EXPECT_NEAR(e.uncertainty, 1 / std::sqrt(19.0), 1e-12);
    EXPECT_EQ(mean_and_uncertainty(20, 50, 10).uncertainty, 0);  // llama.cpp gives none for 10 values or fewer
    PerplexityStats ppl;
    for (int i = 0; i < 20; ++i) ppl.add(i % 2 == 0 ? 1 : 3);
    EXPECT_NEAR(ppl.ppl(), std::exp(2.0), 1e-12);
    EXPECT_NEAR(ppl.uncertainty(), std::exp(2.0) / std::sqrt(19.0), 1e-9);
}

}  // namespace
}  // namespace cellm::cli
