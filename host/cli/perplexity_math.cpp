#include "perplexity_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace cellm::cli {

namespace {

// Round to nearest through the float mantissa, as llama.cpp's nearest_int (exact for |x| < 2^22).
int nearest_int(float x) {
    const float shifted = x + 12582912.f;
    int32_t bits;
    std::memcpy(&bits, &shifted, sizeof bits);
    return (bits & 0x007fffff) - 0x00400000;
}

float max_of(std::span<const float> v) { return *std::max_element(v.begin(), v.end()); }

double sum_exp_below(std::span<const float> logits, float max_logit) {
    double sum = 0;
    for (const float l : logits) sum += std::exp(l - max_logit);  // float exp, as expf
    return sum;
}

}  // namespace

double token_nll(std::span<const float> logits, int32_t token) {
    const float max_logit = max_of(logits);
    const double sum = sum_exp_below(logits, max_logit);
    return -((logits[static_cast<size_t>(token)] - max_logit) - std::log(sum));
}

size_t compact_row_size(int32_t n_vocab) { return static_cast<size_t>(2 * ((n_vocab + 1) / 2) + 4); }

double encode_compact(std::span<const float> logits, int32_t token, std::span<uint16_t> row) {
    const float max_logit = max_of(logits);
    const float min_logit = std::max(*std::min_element(logits.begin(), logits.end()), max_logit - 16);
    const auto log_sum_exp = static_cast<float>(std::log(sum_exp_below(logits, max_logit)));
    const float min_log_prob = min_logit - max_logit - log_sum_exp;
    const float scale = (max_logit - min_logit) / 65535.f;
    std::memcpy(row.data(), &scale, sizeof scale);
    std::memcpy(row.data() + 2, &min_log_prob, sizeof min_log_prob);
    uint16_t* codes = row.data() + 4;
    std::fill(codes, row.data() + row.size(), uint16_t{0});
    if (scale != 0) {
        const float inv_scale = 1 / scale;
        for (size_t i = 0; i < logits.size(); ++i) {
            if (logits[i] > min_logit) {
                codes[i] = static_cast<uint16_t>(nearest_int(inv_scale * (logits[i] - min_logit)));
            }
        }
    }
    return max_logit + log_sum_exp - logits[static_cast<size_t>(token)];
}

Estimate mean_and_uncertainty(double sum, double sum2, size_t count) {
    if (count < 1) return {};
    const auto n = static_cast<double>(count);
    const double mean = sum / n;
    const double variance = sum2 / n - mean * mean;
    return {mean, variance > 0 && count > 10 ? std::sqrt(variance / (n - 1)) : 0.0};
}

float percentile(const std::vector<float>& sorted, float fraction) {
    if (fraction <= 0) return sorted.front();
    if (fraction >= 1) return sorted.back();
    float p = fraction * static_cast<float>(sorted.size() - 1);
    const auto at = static_cast<size_t>(p);
    p -= static_cast<float>(at);
    return (1 - p) * sorted[at] + p * sorted[std::min(at + 1, sorted.size() - 1)];
}

void PerplexityStats::add(double v) {
    nll += v;
    nll2 += v * v;
    ++count;
}

double PerplexityStats::ppl() const { return std::exp(nll / static_cast<double>(count)); }

double PerplexityStats::uncertainty() const {
    const auto n = static_cast<double>(count);
    const double mean = nll / n;
    const double variance = nll2 / n - mean * mean;
    return variance > 0 && count > 1 ? std::sqrt(variance / (n - 1)) * ppl() : 0.0;
}

void KlStats::add(std::span<const float> logits, std::span<const uint16_t> base, int32_t token) {
    const size_t n_vocab = logits.size();
    size_t top = 0;
    for (size_t i = 1; i < n_vocab; ++i) {
        if (logits[i] > logits[top]) top = i;
    }
    float max_logit = logits[top];
    const auto log_sum_exp = static_cast<float>(std::log(sum_exp_below(logits, max_logit)));
    float scale, min_log_prob;
    std::memcpy(&scale, base.data(), sizeof scale);
    std::memcpy(&min_log_prob, base.data() + 2, sizeof min_log_prob);
    const uint16_t* codes = base.data() + 4;
    const auto t = static_cast<size_t>(token);

    const float nll = max_logit + log_sum_exp - logits[t];
    sum_nll += nll;
    sum_nll2 += nll * nll;
    const float nll_base = -(scale * codes[t] + min_log_prob);
    sum_nll_base += nll_base;
    sum_nll_base2 += nll_base * nll_base;
    sum_nll_nll_base += nll * nll_base;

    // KL(base || this) over the tokens the base kept (log-probability above -16).
    max_logit += log_sum_exp;
    double kl = 0;
    size_t top_base = 0;
    float top_base_log_p = 0;
    for (size_t i = 0; i < n_vocab; ++i) {
        const float log_p_base = scale * codes[i] + min_log_prob;
        if (i == 0 || log_p_base > top_base_log_p) {
            top_base_log_p = log_p_base;
            top_base = i;
        }
        if (log_p_base > -16.f) kl += std::exp(log_p_base) * (log_p_base - logits[i] + max_logit);
    }
    sum_kld += kl;
    sum_kld2 += kl * kl;
    ++count;
    if (top == top_base) ++same_top;

    const float diff = std::exp(-nll) - std::exp(-nll_base);
    sum_p_diff += diff;
    const double diff2 = static_cast<double>(diff) * diff;
    sum_p_diff2 += diff2;
    sum_p_diff4 += diff2 * diff2;
    max_p_diff = std::max(max_p_diff, std::fabs(diff));
    kld.push_back(static_cast<float>(kl));
    p_diff.push_back(diff);
}

double KlStats::log_ppl_covariance() const {
    if (count < 10) return 0.0;
    const auto n = static_cast<double>(count);
    return (sum_nll_nll_base / n - (sum_nll / n) * (sum_nll_base / n)) / (n - 1);
}

Estimate KlStats::log_ppl_ratio() const {
    const Estimate a = log_ppl(), b = log_ppl_base();
    const double variance = a.uncertainty * a.uncertainty + b.uncertainty * b.uncertainty - 2.0 * log_ppl_covariance();
    return {a.value - b.value, std::sqrt(std::max(variance, 0.0))};
}

Estimate KlStats::p_diff_rms() const {
    const Estimate mse = mean_and_uncertainty(sum_p_diff2, sum_p_diff4, count);
    const double rms = std::sqrt(mse.value);
    return {rms, rms > 0 ? 0.5 / rms * mse.uncertainty : 0.0};
}

Estimate KlStats::same_top_p() const {
    const double p = static_cast<double>(same_top) / static_cast<double>(count);
    return {p, count > 1 ? std::sqrt(p * (1 - p) / static_cast<double>(count - 1)) : 0.0};
}

}  // namespace cellm::cli
