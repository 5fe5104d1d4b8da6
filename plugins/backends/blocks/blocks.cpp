// GGUF's block layouts (see ggml-common.h). Every format is a small traits struct that converts one block;
// a table maps element types to those structs. A block's value is always `step * code (+ bias)` with the
// float operations ordered as in ggml's dequantize_row_*, so results match it bit for bit.
#include "blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace cellm::blocks {
namespace {

float load_half(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, sizeof h);
    return fp16_to_fp32(h);
}

// Stores `f` as a half and returns the value actually stored, so quantizers compute with what readers see.
float store_half(uint8_t* p, float f) {
    const uint16_t h = fp32_to_fp16(f);
    std::memcpy(p, &h, sizeof h);
    return fp16_to_fp32(h);
}

int round_clamped(float x, int lo, int hi) {
    return std::clamp(static_cast<int>(std::lround(x)), lo, hi);
}

// Value with the largest magnitude, sign kept (ggml's symmetric quantizers map it to the most negative code).
float signed_absmax(const float* x, int64_t n) {
    float best = 0.0f;
    for (int64_t i = 0; i < n; ++i)
        if (std::fabs(x[i]) > std::fabs(best)) best = x[i];
    return best;
}

// ---- Plain element types ---------------------------------------------------------------------------------

struct F32 {
    static constexpr int64_t block = 1;
    static constexpr uint64_t bytes = 4;
    static void dequantize(const uint8_t* b, float* y) { std::memcpy(y, b, bytes); }
    static void quantize(const float* x, uint8_t* b) { std::memcpy(b, x, bytes); }
};

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
struct Half {
    static constexpr int64_t block = 1;
    static constexpr uint64_t bytes = 2;
    static void dequantize(const uint8_t* b, float* y) {
        uint16_t h;
        std::memcpy(&h, b, bytes);
        *y = Widen(h);
    }
    static void quantize(const float* x, uint8_t* b) {
        const uint16_t h = Narrow(*x);
        std::memcpy(b, &h, bytes);
    }
};
using F16 = Half<fp16_to_fp32, fp32_to_fp16>;
using BF16 = Half<bf16_to_fp32, fp32_to_bf16>;

// ---- Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: blocks of 32 with one fp16 scale (and min when Affine) -------------------
//
// 4- and 5-bit codes: element j < 16 in the low nibble of qs[j], element j + 16 in its high nibble; the fifth
// bit of element j is bit j of the little-endian 32-bit qh. Symmetric codes are stored with an offset
// (8 or 16); Q8_0 stores signed bytes.
template <int Bits, bool Affine>
struct Legacy {
    static constexpr int64_t block = 32;
    static constexpr size_t high_at = Affine ? 4 : 2;
    static constexpr size_t codes_at = high_at + (Bits == 5 ? 4 : 0);
    static constexpr uint64_t bytes = codes_at + (Bits == 8 ? 32 : 16);
    static constexpr int levels = 1 << Bits;
    static constexpr int offset = (Affine || Bits == 8) ? 0 : levels / 2;

    static void read_codes(const uint8_t* b, int* q) {
        for (int j = 0; j < block; ++j) {
            if constexpr (Bits == 8) {
                q[j] = static_cast<int8_t>(b[codes_at + j]);
            } else {
                const uint8_t packed = b[codes_at + j % 16];
                q[j] = j < 16 ? (packed & 0xf) : (packed >> 4);
                if constexpr (Bits == 5) q[j] |= ((b[high_at + j / 8] >> (j % 8)) & 1) << 4;
                q[j] -= offset;
            }
        }
    }

    static void write_codes(const int* q, uint8_t* b) {
        if constexpr (Bits == 8) {
            for (int j = 0; j < block; ++j) b[codes_at + j] = static_cast<uint8_t>(static_cast<int8_t>(q[j]));
        } else {
            std::memset(b + high_at, 0, bytes - high_at);
            for (int j = 0; j < block; ++j) {
                const int u = q[j] + offset;
                b[codes_at + j % 16] |= static_cast<uint8_t>((u & 0xf) << (j < 16 ? 0 : 4));
                if constexpr (Bits == 5) b[high_at + j / 8] |= static_cast<uint8_t>(((u >> 4) & 1) << (j % 8));
            }
        }
    }

    static void dequantize(const uint8_t* b, float* y) {
        int q[block];
        read_codes(b, q);
        const float d = load_half(b);
        if constexpr (Affine) {
            const float m = load_half(b + 2);
            for (int j = 0; j < block; ++j) y[j] = static_cast<float>(q[j]) * d + m;
        } else {
            for (int j = 0; j < block; ++j) y[j] = static_cast<float>(q[j]) * d;
        }
    }

    // One row against Q8_0 (symmetric) or Q8_1 (affine) activation blocks, in exactly the order of ggml's x86
    // vec_dot (and cellm's SIMD kernels): a block's 32 products sum as integers in eight lanes of four
    // neighbours; lane l accumulates d_w * d_x * sum_l with a fused multiply-add along the row; the lanes then
    // add as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). The affine mins meet the activation blocks' stored fp16
    // sums in a separate running sum, also fused, added last. Any other order is as valid but not bit-equal.
    static float dot_q8_row(const uint8_t* row, const int8_t* x, const float* scales, const float* sums,
                            int64_t n_blocks) {
        float lanes[8] = {};
        float mins = 0.0f;
        for (int64_t i = 0; i < n_blocks; ++i) {
            const uint8_t* b = row + i * bytes;
            int q[block];
            read_codes(b, q);
            const float d = load_half(b) * scales[i];
            for (int l = 0; l < 8; ++l) {
                int sum = 0;
                for (int j = 4 * l; j < 4 * l + 4; ++j) sum += q[j] * x[i * block + j];
                lanes[l] = std::fma(d, static_cast<float>(sum), lanes[l]);
            }
            if constexpr (Affine) mins = std::fma(load_half(b + 2), sums[i], mins);
        }
        const float even = (lanes[0] + lanes[4]) + (lanes[2] + lanes[6]);
        const float odd = (lanes[1] + lanes[5]) + (lanes[3] + lanes[7]);
        return (even + odd) + mins;
    }

    static void quantize(const float* x, uint8_t* b) {
        int q[block];
        if constexpr (Affine) {
            const float lo = *std::min_element(x, x + block);
            const float hi = *std::max_element(x, x + block);
            const float d = store_half(b, (hi - lo) / static_cast<float>(levels - 1));
            const float m = store_half(b + 2, lo);
            const float id = d != 0.0f ? 1.0f / d : 0.0f;
            for (int j = 0; j < block; ++j) q[j] = round_clamped((x[j] - m) * id, 0, levels - 1);
        } else {
            // The largest magnitude maps to the most negative code, which uses the full signed range.
            const float d = store_half(b, signed_absmax(x, block) / static_cast<float>(-levels / 2));
            const float id = d != 0.0f ? 1.0f / d : 0.0f;
            for (int j = 0; j < block; ++j) q[j] = round_clamped(x[j] * id, -levels / 2, levels / 2 - 1);
        }
        write_codes(q, b);
    }
};

// ---- Q4_K, Q5_K: super-blocks of 256 = 8 sub-blocks of 32 with 6-bit scales and mins --------------------------
//
// Layout: d, dmin (fp16), 12 bytes of packed scales/mins, [Q5_K: qh[32]], qs[128]. Sub-blocks 2p and 2p+1
// share qs[32p .. 32p+31] (low and high nibble); the fifth bit of element l of sub-block s is bit s of qh[l].
// Value = (d * scale_s) * code - dmin * min_s.
template <int Bits>
struct KAffine {
    static constexpr int64_t block = 256;
    static constexpr int sub = 32;
    static constexpr size_t scales_at = 4;
    static constexpr size_t high_at = 16;
    static constexpr size_t codes_at = high_at + (Bits == 5 ? 32 : 0);
    static constexpr uint64_t bytes = codes_at + 128;
    static constexpr int levels = 1 << Bits;

    // ggml's get_scale_min_k4: sub-blocks 0-3 keep scale and min in the low 6 bits of bytes 0-7; sub-blocks 4-7
    // split theirs into a nibble in bytes 8-11 and two high bits on top of bytes 0-7.
    static void read_scale_min(const uint8_t* s, int j, int& scale, int& min) {
        if (j < 4) {
            scale = s[j] & 63;
            min = s[j + 4] & 63;
        } else {
            scale = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
            min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        }
    }

    static void write_scales_mins(const int* scale, const int* min, uint8_t* s) {
        for (int j = 0; j < 4; ++j) {
            s[j] = static_cast<uint8_t>((scale[j] & 63) | ((scale[j + 4] >> 4) << 6));
            s[j + 4] = static_cast<uint8_t>((min[j] & 63) | ((min[j + 4] >> 4) << 6));
            s[j + 8] = static_cast<uint8_t>((scale[j + 4] & 0xf) | ((min[j + 4] & 0xf) << 4));
        }
    }

    static int read_code(const uint8_t* b, int s, int l) {
        const uint8_t packed = b[codes_at + sub * (s / 2) + l];
        int q = (s % 2 == 0) ? (packed & 0xf) : (packed >> 4);
        if constexpr (Bits == 5) q |= ((b[high_at + l] >> s) & 1) << 4;
        return q;
    }

    static void dequantize(const uint8_t* b, float* y) {
        const float d = load_half(b);
        const float dmin = load_half(b + 2);
        for (int s = 0; s < block / sub; ++s) {
            int scale, min;
            read_scale_min(b + scales_at, s, scale, min);
            const float step = d * static_cast<float>(scale);
            const float bias = dmin * static_cast<float>(min);
            for (int l = 0; l < sub; ++l) y[s * sub + l] = step * static_cast<float>(read_code(b, s, l)) - bias;
        }
    }

    // One row against Q8_K activations (quantize_q8_k). Within a block everything is an integer: each sub-block's
    // code products sum exactly, then meet its 6-bit scale, and its min meets the activation sums of its two runs
    // of 16. Then floats, block by block: the block's value is fma(d_w * d_x, scaled sum, -(dmin_w * d_x * min
    // sum)), added to the row's sum. ggml keeps the mins in a second running sum subtracted at the end; on
    // Gemma-3's ffn_down (GELU outputs, mostly positive) that cancellation in float moved logits visibly (worst
    // cosine against llama.cpp 0.9908 instead of 0.9958), so here each block cancels its own.
    static float dot_q8k_row(const uint8_t* row, const int8_t* x, const float* scales, const int16_t* sums,
                             int64_t n_blocks) {
        float acc = 0.0f;
        for (int64_t i = 0; i < n_blocks; ++i) {
            const uint8_t* b = row + i * bytes;
            const int8_t* a = x + i * block;
            int scaled = 0, min_sum = 0;
            for (int s = 0; s < block / sub; ++s) {
                int scale, min;
                read_scale_min(b + scales_at, s, scale, min);
                int products = 0;
                for (int l = 0; l < sub; ++l) products += read_code(b, s, l) * a[s * sub + l];
                scaled += scale * products;
                min_sum += min * (sums[i * 16 + 2 * s] + sums[i * 16 + 2 * s + 1]);
            }
            const float mins = (load_half(b + 2) * scales[i]) * static_cast<float>(min_sum);
            acc += std::fma(load_half(b) * scales[i], static_cast<float>(scaled), -mins);
        }
        return acc;
    }

    static void quantize(const float* x, uint8_t* b) {
        constexpr int n_sub = block / sub;
        float sub_scale[n_sub], sub_min[n_sub];  // min stored as a positive amount to subtract
        for (int s = 0; s < n_sub; ++s) {
            const float lo = std::min(0.0f, *std::min_element(x + s * sub, x + (s + 1) * sub));
            const float hi = *std::max_element(x + s * sub, x + (s + 1) * sub);
            sub_scale[s] = (hi - lo) / static_cast<float>(levels - 1);
            sub_min[s] = -lo;
        }
        const float d = store_half(b, *std::max_element(sub_scale, sub_scale + n_sub) / 63.0f);
        const float dmin = store_half(b + 2, *std::max_element(sub_min, sub_min + n_sub) / 63.0f);
        int scale[n_sub], min[n_sub];
        for (int s = 0; s < n_sub; ++s) {
            scale[s] = d != 0.0f ? round_clamped(sub_scale[s] / d, 0, 63) : 0;
            min[s] = dmin != 0.0f ? round_clamped(sub_min[s] / dmin, 0, 63) : 0;
        }
        write_scales_mins(scale, min, b + scales_at);
        std::memset(b + high_at, 0, bytes - high_at);
        for (int s = 0; s < n_sub; ++s) {
            const float step = d * static_cast<float>(scale[s]);
            const float bias = dmin * static_cast<float>(min[s]);
            for (int l = 0; l < sub; ++l) {
                const int q = step != 0.0f ? round_clamped((x[s * sub + l] + bias) / step, 0, levels - 1) : 0;
                b[codes_at + sub * (s / 2) + l] |= static_cast<uint8_t>((q & 0xf) << (s % 2 == 0 ? 0 : 4));
                if constexpr (Bits == 5) b[high_at + l] |= static_cast<uint8_t>(((q >> 4) & 1) << s);
            }
        }
    }
};

// ---- Q6_K: super-blocks of 256 = 16 sub-blocks of 16 with int8 scales, 6-bit codes offset by 32 ------------------
//
// Layout: ql[128], qh[64], scales[16] (int8), d (fp16). Each half h of 128 elements uses ql[64h..], qh[32h..];
// within it, element 32k + l takes a nibble of ql[l + 32 (k % 2)] (low for k < 2) and bits 2k, 2k+1 of qh[l].
// Value = (d * scale_{e / 16}) * code.
struct Q6K {
    static constexpr int64_t block = 256;
    static constexpr int sub = 16;
    static constexpr size_t high_at = 128;
    static constexpr size_t scales_at = 192;
    static constexpr size_t d_at = 208;
    static constexpr uint64_t bytes = 210;

    struct Position {
        size_t low;   // byte of ql
        int shift;    // nibble inside it
        size_t high;  // byte of qh
        int high_shift;
    };
    static Position locate(int e) {
        const int h = e / 128, k = (e % 128) / 32, l = e % 32;
        return {static_cast<size_t>(64 * h + l + 32 * (k % 2)), k < 2 ? 0 : 4,
                high_at + static_cast<size_t>(32 * h + l), 2 * k};
    }

    static void dequantize(const uint8_t* b, float* y) {
        const float d = load_half(b + d_at);
        for (int e = 0; e < block; ++e) {
            const Position p = locate(e);
            const int q = (((b[p.low] >> p.shift) & 0xf) | (((b[p.high] >> p.high_shift) & 3) << 4)) - 32;
            const float step = d * static_cast<float>(static_cast<int8_t>(b[scales_at + e / sub]));
            y[e] = step * static_cast<float>(q);
        }
    }

    // One row against Q8_K activations, as KAffine's: per block the integer sum over sub-blocks of scale times
    // the products of (code - 32) and the activation codes, then d_w * d_x times it accumulated with a fused
    // multiply-add along the row.
    static float dot_q8k_row(const uint8_t* row, const int8_t* x, const float* scales, const int16_t*,
                             int64_t n_blocks) {
        float acc = 0.0f;
        for (int64_t i = 0; i < n_blocks; ++i) {
            const uint8_t* b = row + i * bytes;
            const int8_t* a = x + i * block;
            int scaled = 0;
            for (int s = 0; s < block / sub; ++s) {
                int products = 0;
                for (int l = 0; l < sub; ++l) {
                    const Position p = locate(s * sub + l);
                    const int q = (((b[p.low] >> p.shift) & 0xf) | (((b[p.high] >> p.high_shift) & 3) << 4)) - 32;
                    products += q * a[s * sub + l];
                }
                scaled += static_cast<int8_t>(b[scales_at + s]) * products;
            }
            acc = std::fma(load_half(b + d_at) * scales[i], static_cast<float>(scaled), acc);
        }
        return acc;
    }

    static void quantize(const float* x, uint8_t* b) {
        constexpr int n_sub = block / sub;
        float sub_scale[n_sub];
        for (int s = 0; s < n_sub; ++s) sub_scale[s] = signed_absmax(x + s * sub, sub) / -32.0f;
        const float d = store_half(b + d_at, signed_absmax(sub_scale, n_sub) / -128.0f);
        std::memset(b, 0, d_at);
        for (int s = 0; s < n_sub; ++s) {
            const int scale = d != 0.0f ? round_clamped(sub_scale[s] / d, -128, 127) : 0;
            b[scales_at + s] = static_cast<uint8_t>(static_cast<int8_t>(scale));
            const float step = d * static_cast<float>(scale);
            for (int l = 0; l < sub; ++l) {
                const int e = s * sub + l;
                const int q = (step != 0.0f ? round_clamped(x[e] / step, -32, 31) : 0) + 32;
                const Position p = locate(e);
                b[p.low] |= static_cast<uint8_t>((q & 0xf) << p.shift);
                b[p.high] |= static_cast<uint8_t>((q >> 4) << p.high_shift);
            }
        }
    }
};

// ---- cellm's own group types (abi/cellm/tensor.h): one group of G elements per block -----------------------
// Float activations meet the expanded rows (no Q8 dot), so these types mean exactly what dequantize says.

// Code of element j of a packed 4-bit group: the even element in the low nibble.
int nibble(const uint8_t* codes, int j) { return (codes[j / 2] >> (4 * (j % 2))) & 0xf; }

// I8S_G* and I4S_G*: f16 scale d, then the codes; x = d * q with q in [-127, 127] (8 bits) or u - 8 in
// [-8, 7] (4 bits). The quantizer maps the largest magnitude to +-127 or +-7.
template <int Bits, int Group>
struct Symmetric {
    static constexpr int64_t block = Group;
    static constexpr uint64_t bytes = 2 + (Bits == 8 ? Group : Group / 2);
    static constexpr int qmax = Bits == 8 ? 127 : 7;

    static void dequantize(const uint8_t* b, float* y) {
        const float d = load_half(b);
        for (int j = 0; j < Group; ++j) {
            const int q = Bits == 8 ? static_cast<int8_t>(b[2 + j]) : nibble(b + 2, j) - 8;
            y[j] = d * static_cast<float>(q);
        }
    }
    static void quantize(const float* x, uint8_t* b) {
        float amax = 0.0f;
        for (int j = 0; j < Group; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = store_half(b, amax / qmax);
        const float inv = d != 0.0f ? 1.0f / d : 0.0f;
        if constexpr (Bits == 4) std::memset(b + 2, 0, Group / 2);
        for (int j = 0; j < Group; ++j) {
            const int q = round_clamped(x[j] * inv, Bits == 8 ? -qmax : -8, qmax);
            if constexpr (Bits == 8) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
            else b[2 + j / 2] |= static_cast<uint8_t>((q + 8) << (4 * (j % 2)));
        }
    }
};

// Q4A_G*: MLX's 4-bit affine groups: f16 scale s, f16 bias b, then the codes u in [0, 15]; x = s * u + b.
// The quantizer spans the group's [min, max] in 15 steps.
template <int Group>
struct Affine4 {
    static constexpr int64_t block = Group;
    static constexpr uint64_t bytes = 4 + Group / 2;

    static void dequantize(const uint8_t* b, float* y) {
        const float scale = load_half(b), bias = load_half(b + 2);
        for (int j = 0; j < Group; ++j) y[j] = scale * static_cast<float>(nibble(b + 4, j)) + bias;
    }
    static void quantize(const float* x, uint8_t* b) {
        const auto [lo, hi] = std::minmax_element(x, x + Group);
        const float scale = store_half(b, (*hi - *lo) / 15.0f);
        const float bias = store_half(b + 2, *lo);
        const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
        std::memset(b + 4, 0, Group / 2);
        for (int j = 0; j < Group; ++j) {
            const int u = round_clamped((x[j] - bias) * inv, 0, 15);
            b[4 + j / 2] |= static_cast<uint8_t>(u << (4 * (j % 2)));
        }
    }
};

// ---- The table --------------------------------------------------------------------------------------------

struct Format {
    cellm_dtype type;
    int64_t block;
    uint64_t bytes;
    void (*dequantize)(const uint8_t* src, float* dst, int64_t n_blocks);
    void (*quantize)(const float* src, uint8_t* dst, int64_t n_blocks);
    float (*dot_q8)(const uint8_t* row, const int8_t* codes, const float* scales, const float* sums, int64_t n_blocks);
    float (*dot_q8k)(const uint8_t* row, const int8_t* codes, const float* scales, const int16_t* sums, int64_t n_blocks);
};

template <class T>
concept HasQ8Dot = requires(const uint8_t* b, const int8_t* x, const float* f) { T::dot_q8_row(b, x, f, f, 1); };

template <class T>
constexpr auto dot_q8_of() {
    float (*fn)(const uint8_t*, const int8_t*, const float*, const float*, int64_t) = nullptr;
    if constexpr (HasQ8Dot<T>) fn = T::dot_q8_row;
    return fn;
}

template <class T>
concept HasQ8KDot = requires(const uint8_t* b, const int8_t* x, const float* f, const int16_t* s) {
    T::dot_q8k_row(b, x, f, s, 1);
};

template <class T>
constexpr auto dot_q8k_of() {
    float (*fn)(const uint8_t*, const int8_t*, const float*, const int16_t*, int64_t) = nullptr;
    if constexpr (HasQ8KDot<T>) fn = T::dot_q8k_row;
    return fn;
}

template <class T>
constexpr Format format(cellm_dtype type) {
    return {type, T::block, T::bytes,
            [](const uint8_t* src, float* dst, int64_t n_blocks) {
                for (int64_t i = 0; i < n_blocks; ++i) T::dequantize(src + i * T::bytes, dst + i * T::block);
            },
            [](const float* src, uint8_t* dst, int64_t n_blocks) {
                for (int64_t i = 0; i < n_blocks; ++i) T::quantize(src + i * T::block, dst + i * T::bytes);
            },
            dot_q8_of<T>(), dot_q8k_of<T>()};
}

constexpr Format formats[] = {
    format<F32>(CELLM_TYPE_F32),
    format<F16>(CELLM_TYPE_F16),
    format<BF16>(CELLM_TYPE_BF16),
    format<Legacy<8, false>>(CELLM_TYPE_Q8_0),
    format<Legacy<4, false>>(CELLM_TYPE_Q4_0),
    format<Legacy<4, true>>(CELLM_TYPE_Q4_1),
    format<Legacy<5, false>>(CELLM_TYPE_Q5_0),
    format<Legacy<5, true>>(CELLM_TYPE_Q5_1),
    format<KAffine<4>>(CELLM_TYPE_Q4_K),
    format<KAffine<5>>(CELLM_TYPE_Q5_K),
    format<Q6K>(CELLM_TYPE_Q6_K),
    format<Symmetric<8, 32>>(CELLM_TYPE_I8S_G32),
    format<Symmetric<8, 64>>(CELLM_TYPE_I8S_G64),
    format<Symmetric<8, 128>>(CELLM_TYPE_I8S_G128),
    format<Symmetric<4, 32>>(CELLM_TYPE_I4S_G32),
    format<Symmetric<4, 64>>(CELLM_TYPE_I4S_G64),
    format<Symmetric<4, 128>>(CELLM_TYPE_I4S_G128),
    format<Affine4<32>>(CELLM_TYPE_Q4A_G32),
    format<Affine4<64>>(CELLM_TYPE_Q4A_G64),
    format<Affine4<128>>(CELLM_TYPE_Q4A_G128),
};

const Format* find(cellm_dtype type) {
    for (const Format& f : formats)
        if (f.type == type) return &f;
    return nullptr;
}

// The format for `type` when `n` whole blocks of it make a row; throws otherwise.
const Format& checked(cellm_dtype type, int64_t n) {
    const Format* f = find(type);
    if (f == nullptr) throw std::invalid_argument("blocks: unsupported element type " + std::to_string(type));
    if (n < 0 || n % f->block != 0)
        throw std::invalid_argument("blocks: row of " + std::to_string(n) + " elements is not a multiple of " +
                                    std::to_string(f->block) + " for type " + std::to_string(type));
    return *f;
}

}  // namespace

bool supported(cellm_dtype type) { return find(type) != nullptr; }

int64_t block_size(cellm_dtype type) {
    const Format* f = find(type);
    return f != nullptr ? f->block : 0;
}

uint64_t row_bytes(cellm_dtype type, int64_t n) {
    const Format* f = find(type);
    if (f == nullptr || n < 0 || n % f->block != 0) return 0;
    return static_cast<uint64_t>(n / f->block) * f->bytes;
}

void dequantize_row(cellm_dtype type, const void* src, float* dst, int64_t n) {
    const Format& f = checked(type, n);
    f.dequantize(static_cast<const uint8_t*>(src), dst, n / f.block);
}

bool has_q8_dot(cellm_dtype type) {
    const Format* f = find(type);
    return f != nullptr && f->dot_q8 != nullptr;
}

float dot_q8(cellm_dtype type, const void* row, const int8_t* codes, const float* scales, const float* sums, int64_t n) {
    const Format& f = checked(type, n);
    if (f.dot_q8 == nullptr) throw std::invalid_argument("blocks: type " + std::to_string(type) + " has no Q8 dot product");
    return f.dot_q8(static_cast<const uint8_t*>(row), codes, scales, sums, n / f.block);
}

bool has_q8k_dot(cellm_dtype type) {
    const Format* f = find(type);
    return f != nullptr && f->dot_q8k != nullptr;
}

float dot_q8_k(cellm_dtype type, const void* row, const int8_t* codes, const float* scales, const int16_t* sums,
               int64_t n) {
    const Format& f = checked(type, n);
    if (f.dot_q8k == nullptr) throw std::invalid_argument("blocks: type " + std::to_string(type) + " has no Q8_K dot product");
    return f.dot_q8k(static_cast<const uint8_t*>(row), codes, scales, sums, n / f.block);
}

void quantize_row(cellm_dtype type, const float* src, void* dst, int64_t n) {
    const Format& f = checked(type, n);
    f.quantize(src, static_cast<uint8_t*>(dst), n / f.block);
}

}  // namespace cellm::blocks
