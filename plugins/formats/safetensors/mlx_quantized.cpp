#include "mlx_quantized.h"

#include "blocks.h"
#include "config_reader.h"

#include <cstring>

namespace cellm::safetensors_plugin {

using nlohmann::json;

std::optional<MlxQuantization> read_mlx_quantization(const json& config, const std::string& file) {
    const ConfigReader c(config, file);
    const json* q = c.find("quantization");
    if (q == nullptr) return std::nullopt;
    if (!q->is_object()) c.fail(CELLM_ERR_CORRUPT, "'quantization' is not an object");
    MlxQuantization out;
    for (auto it = q->begin(); it != q->end(); ++it) {
        const std::string& key = it.key();
        const json& value = it.value();
        if (key == "group_size" || key == "bits") {
            if (!value.is_number_unsigned()) c.fail(CELLM_ERR_CORRUPT, "quantization." + key + " is not a count");
            (key == "bits" ? out.bits : out.group_size) = static_cast<uint32_t>(std::min<uint64_t>(value.get<uint64_t>(), 1u << 20));
        } else if (key == "mode") {
            if (!value.is_string() || value.get<std::string>() != "affine") {
                c.fail(CELLM_ERR_UNSUPPORTED, "quantization mode " + value.dump() + " is not supported (affine only)");
            }
        } else {
            // mlx-lm writes a layer's own settings under its path (mixed-precision recipes).
            c.fail(CELLM_ERR_UNSUPPORTED, "quantization settings per layer ('" + key + "') are not supported");
        }
    }
    if (out.bits != 4 && out.bits != 8) {
        c.fail(CELLM_ERR_UNSUPPORTED,
               "quantization bits " + std::to_string(out.bits) + " are not supported (4 or 8 bits)");
    }
    if (out.group_size != 32 && out.group_size != 64 && out.group_size != 128) {
        c.fail(CELLM_ERR_UNSUPPORTED,
               "quantization group_size " + std::to_string(out.group_size) + " is not supported (32, 64 or 128)");
    }
    return out;
}

cellm_dtype mlx_served_type(const MlxQuantization& q) {
    if (q.bits == 8) return CELLM_TYPE_F32;
    return q.group_size == 32 ? CELLM_TYPE_Q4A_G32 : q.group_size == 64 ? CELLM_TYPE_Q4A_G64 : CELLM_TYPE_Q4A_G128;
}

MlxWeight check_mlx_weight(const MlxQuantization& q, const ShardTensor& weight, const ShardTensor* scales,
                           const ShardTensor* biases, const std::string& file) {
    const auto fail = [&](const std::string& what) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, file + ": MLX-quantized '" + weight.name + "' " + what);
    };
    if (weight.type != CELLM_TYPE_I32 || weight.shape.size() != 2) fail("is not a 2-D U32 tensor of packed codes");
    const std::string base = weight.name.substr(0, weight.name.size() - std::string_view(".weight").size());
    if (scales == nullptr || biases == nullptr) fail("has no " + base + (scales == nullptr ? ".scales" : ".biases"));
    MlxWeight w{&weight, scales, biases};
    w.rows = static_cast<uint64_t>(weight.shape[0]);
    w.columns = static_cast<uint64_t>(weight.shape[1]) * 32 / q.bits;
    if (w.columns % q.group_size != 0) {
        fail("has " + std::to_string(w.columns) + " columns, not a multiple of the group size " +
             std::to_string(q.group_size));
    }
    for (const ShardTensor* t : {scales, biases}) {
        if (t->type != CELLM_TYPE_F16 && t->type != CELLM_TYPE_BF16 && t->type != CELLM_TYPE_F32) {
            fail("has '" + t->name + "' of a type other than F16, BF16 or F32");
        }
        if (t->shape.size() != 2 || static_cast<uint64_t>(t->shape[0]) != w.rows ||
            static_cast<uint64_t>(t->shape[1]) != w.columns / q.group_size) {
            fail("needs '" + t->name + "' of shape [" + std::to_string(w.rows) + ", " +
                 std::to_string(w.columns / q.group_size) + "]");
        }
    }
    return w;
}

uint64_t mlx_served_bytes(const MlxQuantization& q, const MlxWeight& w) {
    if (q.bits == 8) return w.rows * w.columns * sizeof(float);
    return w.rows * (w.columns / q.group_size) * (4 + q.group_size / 2);
}

namespace {

float value_at(const ShardTensor& t, uint64_t i) {
    if (t.type == CELLM_TYPE_F32) {
        float v;
        std::memcpy(&v, t.data + i * 4, 4);
        return v;
    }
    uint16_t h;
    std::memcpy(&h, t.data + i * 2, 2);
    return t.type == CELLM_TYPE_F16 ? blocks::fp16_to_fp32(h) : blocks::bf16_to_fp32(h);
}

}  // namespace

uint64_t write_mlx_weight(const MlxQuantization& q, const MlxWeight& w, uint8_t* out) {
    const uint64_t groups = w.columns / q.group_size;
    const uint8_t* codes = w.weight->data;  // little-endian words: code i of a row sits in byte i * bits / 8
    const uint64_t row_code_bytes = w.columns * q.bits / 8;
    uint64_t inexact = 0;
    for (uint64_t r = 0; r < w.rows; ++r) {
        for (uint64_t g = 0; g < groups; ++g) {
            const float scale = value_at(*w.scales, r * groups + g), bias = value_at(*w.biases, r * groups + g);
            const uint8_t* group = codes + r * row_code_bytes + g * q.group_size * q.bits / 8;
            if (q.bits == 8) {
                uint8_t* dst = out + (r * w.columns + g * q.group_size) * sizeof(float);
                for (uint32_t i = 0; i < q.group_size; ++i) {
                    const float v = scale * static_cast<float>(group[i]) + bias;
                    std::memcpy(dst + i * sizeof v, &v, sizeof v);
                }
                continue;
            }
            // Q4A: the codes are already two per byte, the even element in the low nibble.
            uint8_t* block = out + (r * groups + g) * (4 + q.group_size / 2);
            const uint16_t halves[2] = {blocks::fp32_to_fp16(scale), blocks::fp32_to_fp16(bias)};
            inexact += (blocks::fp16_to_fp32(halves[0]) != scale) + (blocks::fp16_to_fp32(halves[1]) != bias);
            std::memcpy(block, halves, 4);
            std::memcpy(block + 4, group, q.group_size / 2);
        }
    }
    return inexact;
}

}  // namespace cellm::safetensors_plugin
