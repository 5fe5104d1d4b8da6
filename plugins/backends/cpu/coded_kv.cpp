#include "coded_kv.hpp"

#include "blocks.h"

#include <cellm/graph.h>

#include <algorithm>
#include <cmath>

namespace cellm::cpu {
namespace {

constexpr float levels_r4[16] = CELLM_KV_LEVELS_R4;
constexpr float thresholds_r4[7] = CELLM_KV_THRESHOLDS_R4;
constexpr float levels_r3[8] = CELLM_KV_LEVELS_R3;
constexpr float thresholds_r3[3] = CELLM_KV_THRESHOLDS_R3;

struct Table {
    const float* levels;
    const float* thresholds;
    int n_levels;
};

Table table(cellm_dtype type) {
    return type == CELLM_TYPE_R4 ? Table{levels_r4, thresholds_r4, 16} : Table{levels_r3, thresholds_r3, 8};
}

// Index i of a coded row's packed codes.
int code_at(cellm_dtype type, const uint8_t* codes, int64_t i) {
    if (type == CELLM_TYPE_R4) return (codes[i / 2] >> (4 * (i % 2))) & 15;
    const uint8_t* word = codes + i / 8 * 3;
    const uint32_t bits = word[0] | (uint32_t{word[1]} << 8) | (uint32_t{word[2]} << 16);
    return static_cast<int>((bits >> (3 * (i % 8))) & 7);
}

void set_code(cellm_dtype type, uint8_t* codes, int64_t i, int code) {
    if (type == CELLM_TYPE_R4) {
        uint8_t& byte = codes[i / 2];
        byte = static_cast<uint8_t>(i % 2 == 0 ? (byte & 0xF0) | code : (byte & 0x0F) | (code << 4));
        return;
    }
    uint8_t* word = codes + i / 8 * 3;
    uint32_t bits = word[0] | (uint32_t{word[1]} << 8) | (uint32_t{word[2]} << 16);
    const int shift = static_cast<int>(3 * (i % 8));
    bits = (bits & ~(7u << shift)) | (static_cast<uint32_t>(code) << shift);
    word[0] = static_cast<uint8_t>(bits);
    word[1] = static_cast<uint8_t>(bits >> 8);
    word[2] = static_cast<uint8_t>(bits >> 16);
}

}  // namespace

bool coded_kv(cellm_dtype type) { return type == CELLM_TYPE_R4 || type == CELLM_TYPE_R3; }

void code_row(cellm_dtype type, const float* x, int64_t n, int64_t width, uint8_t* codes, uint16_t* scales) {
    const Table t = table(type);
    const int half = t.n_levels / 2;
    const auto w = static_cast<float>(width);
    for (int64_t g = 0; g < n / width; ++g) {
        const float* y = x + g * width;
        float sum_sq = 0.0f;
        for (int64_t i = 0; i < width; ++i) sum_sq = std::fma(y[i], y[i], sum_sq);
        float along = 0.0f, length = 0.0f;
        for (int64_t i = 0; i < width; ++i) {
            // Compared squared, so that no square root or division decides a code: y / rms > t is
            // y^2 * w > t^2 * sum_sq for y >= 0.
            int k = 0;
            while (k < half - 1 && (y[i] * y[i]) * w > (t.thresholds[k] * t.thresholds[k]) * sum_sq) ++k;
            const int code = y[i] < 0.0f ? half - 1 - k : half + k;
            set_code(type, codes, g * width + i, code);
            along = std::fma(y[i], t.levels[code], along);
            length = std::fma(t.levels[code], t.levels[code], length);
        }
        scales[g] = blocks::fp32_to_fp16(along / length);
    }
}

void expand_coded(cellm_dtype type, const uint8_t* codes, const uint16_t* scales, int64_t width, int64_t offset,
                  int64_t n, float* out) {
    const Table t = table(type);
    for (int64_t i = offset; i < offset + n;) {
        const int64_t group_end = std::min(offset + n, (i / width + 1) * width);
        const float scale = blocks::fp16_to_fp32(scales[i / width]);
        // Whole bytes (R4) or 3-byte words (R3) at a time where the run is aligned to them: attention expands a
        // head's row per key, which made this loop most of a coded cache's step.
        if (type == CELLM_TYPE_R4) {
            for (; i % 2 != 0 && i < group_end; ++i) out[i - offset] = scale * t.levels[code_at(type, codes, i)];
            for (; i + 2 <= group_end; i += 2) {
                const uint8_t byte = codes[i / 2];
                out[i - offset] = scale * t.levels[byte & 15];
                out[i + 1 - offset] = scale * t.levels[byte >> 4];
            }
        } else {
            for (; i % 8 != 0 && i < group_end; ++i) out[i - offset] = scale * t.levels[code_at(type, codes, i)];
            for (; i + 8 <= group_end; i += 8) {
                const uint8_t* word = codes + i / 8 * 3;
                const uint32_t bits = word[0] | (uint32_t{word[1]} << 8) | (uint32_t{word[2]} << 16);
                for (int k = 0; k < 8; ++k) out[i + k - offset] = scale * t.levels[(bits >> (3 * k)) & 7];
            }
        }
        for (; i < group_end; ++i) out[i - offset] = scale * t.levels[code_at(type, codes, i)];
    }
}

void hadamard(const float* x, float* y, int64_t d, const float* signs, float c, bool inverse) {
    if (inverse) std::copy(x, x + d, y);
    else for (int64_t i = 0; i < d; ++i) y[i] = x[i] * signs[i];
    for (int64_t h = 1; h < d; h *= 2) {
        for (int64_t j0 = 0; j0 < d; j0 += 2 * h) {
            for (int64_t j = j0; j < j0 + h; ++j) {
                const float a = y[j], b = y[j + h];
                y[j] = a + b;
                y[j + h] = a - b;
            }
        }
    }
    for (int64_t i = 0; i < d; ++i) y[i] *= c;
    if (inverse) for (int64_t i = 0; i < d; ++i) y[i] *= signs[i];
}

}  // namespace cellm::cpu
