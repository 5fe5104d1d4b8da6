#include "blocks.h"

#include <algorithm>
#include <cmath>

namespace cellm::blocks {

namespace {

// Q8_0 / Q8_1 as ggml's quantize_row_q8_*: scale amax/127 stored as fp16, codes rounded with 1/scale.
void round_q8_32(const float* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n; b += 32) {
        float amax = 0.0f;
        for (int64_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const float stored = fp16_to_fp32(fp32_to_fp16(d));
        for (int64_t j = 0; j < 32; ++j) y[b + j] = std::nearbyint(x[b + j] * id) * stored;
    }
}

// Q8_K as ggml's quantize_row_q8_K: the element of largest magnitude maps to -127; the scale stays a float.
void round_q8_k(const float* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n; b += 256) {
        float amax = 0.0f, max = 0.0f;
        for (int64_t j = 0; j < 256; ++j) {
            if (std::fabs(x[b + j]) > amax) {
                amax = std::fabs(x[b + j]);
                max = x[b + j];
            }
        }
        if (amax == 0.0f) {
            std::fill(y + b, y + b + 256, 0.0f);
            continue;
        }
        const float iscale = -127.0f / max;
        const float d = 1.0f / iscale;
        for (int64_t j = 0; j < 256; ++j) y[b + j] = std::min(127.0f, std::nearbyint(iscale * x[b + j])) * d;
    }
}

}  // namespace

void round_activations(cellm_dtype weight_type, const float* x, float* y, int64_t n) {
    switch (weight_type) {
    case CELLM_TYPE_Q4_0: case CELLM_TYPE_Q4_1: case CELLM_TYPE_Q5_0: case CELLM_TYPE_Q5_1: case CELLM_TYPE_Q8_0:
        round_q8_32(x, y, n);
        return;
    case CELLM_TYPE_Q4_K: case CELLM_TYPE_Q5_K: case CELLM_TYPE_Q6_K:
        round_q8_k(x, y, n);
        return;
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

}  // namespace cellm::blocks
