// The statistics of llama.cpp's llama-perplexity (tools/perplexity/perplexity.cpp), computed as it computes them
// so that the numbers compare: the negative log-likelihood of the next token, llama.cpp's compact 16-bit form of
// a position's log-probabilities (what its logits files hold), and a position's KL divergence, top-1 agreement and
// probability change against such a base.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace cellm::cli {

// -log p(token) under softmax(logits): float maximum, double sum of expf, as llama.cpp's log_softmax.
double token_nll(std::span<const float> logits, int32_t token);

// uint16 entries of one compact row: two floats (scale, smallest log-probability kept) in four entries, then one
// code per token, padded to an even count.
size_t compact_row_size(int32_t n_vocab);
// Writes the compact row of `logits` (compact_row_size entries): log-probabilities quantized on 16 bits over the
// 16 nats below the largest, lower ones as 0. Returns token_nll(logits, token).
double encode_compact(std::span<const float> logits, int32_t token, std::span<uint16_t> row);

// An estimate and its standard error.
struct Estimate {
    double value = 0, uncertainty = 0;
};
// Mean of values from their sum and sum of squares, with the standard error of the mean (0 for 10 values or fewer).
Estimate mean_and_uncertainty(double sum, double sum2, size_t count);
// Linear interpolation between the sorted values around `fraction` of the way (0: the first, 1: the last).
float percentile(const std::vector<float>& sorted, float fraction);

// Perplexity over the scored positions: exp of the mean negative log-likelihood.
struct PerplexityStats {
    double nll = 0, nll2 = 0;
    size_t count = 0;

    void add(double token_nll);
    double ppl() const;
    // The standard error of ppl, as llama.cpp's "Final estimate" writes it; 0 when the variance is not positive.
    double uncertainty() const;
};

// This run's logits against a base's compact rows, position by position, summed as llama.cpp sums them.
struct KlStats {
    double sum_nll = 0, sum_nll2 = 0;            // this run
    double sum_nll_base = 0, sum_nll_base2 = 0;  // the base
    double sum_nll_nll_base = 0;
    double sum_kld = 0, sum_kld2 = 0;
    double sum_p_diff = 0, sum_p_diff2 = 0, sum_p_diff4 = 0;
    float max_p_diff = 0;
    size_t same_top = 0;  // positions whose most likely token is the base's
    size_t count = 0;
    std::vector<float> kld, p_diff;  // per position, for the percentiles

    // One position: `token` is the one that follows it, `base` the base's compact row for the same position.
    void add(std::span<const float> logits, std::span<const uint16_t> base, int32_t token);

    Estimate log_ppl() const { return mean_and_uncertainty(sum_nll, sum_nll2, count); }
    Estimate log_ppl_base() const { return mean_and_uncertainty(sum_nll_base, sum_nll_base2, count); }
    // Covariance of the two mean log-likelihoods (0 for fewer than 10 positions).
    double log_ppl_covariance() const;
    // ln(PPL / PPL(base)) with its uncertainty.
    Estimate log_ppl_ratio() const;
    Estimate kl_divergence() const { return mean_and_uncertainty(sum_kld, sum_kld2, count); }
    // Root mean square of the change in the next token's probability.
    Estimate p_diff_rms() const;
    // Fraction of positions with the base's most likely token.
    Estimate same_top_p() const;
};

}  // namespace cellm::cli
