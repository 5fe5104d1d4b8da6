#include "blocks.h"

#include <algorithm>
#include <cmath>

namespace cellm::blocks {

// Q8_0 / Q8_1 as ggml's quantize_row_q8_*: codes x * 127/amax rounded to nearest even, the scale amax/127 and
// the block sum scale * sum(codes) stored as fp16.
void quantize_q8(const float* x, int64_t n, int8_t* codes, float* scales, float* sums) {
    for (int64_t b = 0; b < n / 32; ++b) {
        const float* xb = x + b * 32;
        float amax = 0.0f;
        for (int64_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int64_t j = 0; j < 32; ++j) {
            codes[b * 32 + j] = static_cast<int8_t>(std::nearbyint(xb[j] * id));
            sum += codes[b * 32 + j];
        }
        scales[b] = fp16_to_fp32(fp32_to_fp16(d));
        sums[b] = fp16_to_fp32(fp32_to_fp16(d * static_cast<float>(sum)));
    }
}

void quantize_q8_k(const float* x, int64_t n, int8_t* codes, float* scales, int16_t* sums) {
    for (int64_t b = 0; b < n / 256; ++b) {
        const float* xb = x + b * 256;
        float amax = 0.0f, max = 0.0f;
        for (int64_t j = 0; j < 256; ++j) {
            if (std::fabs(xb[j]) > amax) {
                amax = std::fabs(xb[j]);
                max = xb[j];
            }
        }
        const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
        scales[b] = amax != 0.0f ? 1.0f / iscale : 0.0f;
        for (int64_t j = 0; j < 256; ++j)
            codes[b * 256 + j] = static_cast<int8_t>(std::min(127.0f, std::nearbyint(iscale * xb[j])));
        for (int64_t r = 0; r < 16; ++r) {
            int sum = 0;
            for (int64_t j = 0; j < 16; ++j) sum += codes[b * 256 + r * 16 + j];
            sums[b * 16 + r] = static_cast<int16_t>(sum);
        }
    }
}

void round_activations(cellm_dtype weight_type, const float* x, float* y, int64_t n) {
    switch (weight_type) {
    case CELLM_TYPE_Q4_0: case CELLM_TYPE_Q4_1: case CELLM_TYPE_Q5_0: case CELLM_TYPE_Q5_1: case CELLM_TYPE_Q8_0: {
        std::vector<int8_t> codes(static_cast<size_t>(n));
        std::vector<float> scales(static_cast<size_t>(n / 32)), sums(static_cast<size_t>(n / 32));
        quantize_q8(x, n, codes.data(), scales.data(), sums.data());
        for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(codes[static_cast<size_t>(i)]) * scales[static_cast<size_t>(i / 32)];
        return;
    }
    case CELLM_TYPE_Q4_K: case CELLM_TYPE_Q5_K: case CELLM_TYPE_Q6_K: {
        std::vector<int8_t> codes(static_cast<size_t>(n));
        std::vector<float> scales(static_cast<size_t>(n / 256));
        std::vector<int16_t> sums(static_cast<size_t>(n / 16));
        quantize_q8_k(x, n, codes.data(), scales.data(), sums.data());
        for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(codes[static_cast<size_t>(i)]) * scales[static_cast<size_t>(i / 256)];
        return;
    }
    case CELLM_TYPE_F16:
        for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
        return;
    case CELLM_TYPE_BF16:
        for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(fp32_to_bf16(x[i]));
        return;
    default:
        if (x != y) std::copy(x, x + n, y);
        return;
    }
}

void Activations::prepare(cellm_dtype weight_type, const float* x, int64_t n) {
    type_ = weight_type;
    n_ = n;
    if (has_q8_dot(weight_type)) {
        codes_.resize(static_cast<size_t>(n));
        scales_.resize(static_cast<size_t>(n / 32));
        sums_.resize(static_cast<size_t>(n / 32));
        quantize_q8(x, n, codes_.data(), scales_.data(), sums_.data());
    } else if (has_q8k_dot(weight_type)) {
        codes_.resize(static_cast<size_t>(n));
        scales_.resize(static_cast<size_t>(n / 256));
        k_sums_.resize(static_cast<size_t>(n / 16));
        quantize_q8_k(x, n, codes_.data(), scales_.data(), k_sums_.data());
    } else {
        values_.resize(static_cast<size_t>(n));
        round_activations(weight_type, x, values_.data(), n);
    }
}

float Activations::dot(const void* row, const float* expanded) const {
    if (has_q8_dot(type_)) return dot_q8(type_, row, codes_.data(), scales_.data(), sums_.data(), n_);
    if (has_q8k_dot(type_)) return dot_q8_k(type_, row, codes_.data(), scales_.data(), k_sums_.data(), n_);
    double sum = 0.0;
    for (int64_t i = 0; i < n_; ++i) sum += static_cast<double>(expanded[i]) * values_[static_cast<size_t>(i)];
    return static_cast<float>(sum);
}

}  // namespace cellm::blocks
