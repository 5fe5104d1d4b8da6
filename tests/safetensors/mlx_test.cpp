// MLX-quantized folders (mlx_quantized.h): 4-bit weights served as Q4A blocks holding the same codes and the
// scales and biases as f16, 8-bit ones as F32 values scale * code + bias, Llama's Q/K rows permuted whole; every
// quantization cellm does not read and every malformed packed weight refused in one line. The logits of folders
// mlx-lm itself wrote (tests/data/hf/qwen3-mlx-*) against mlx-lm's are in hf_parity_tests.
#include "hf_folder_writer.h"
#include "open_outcome.h"
#include "test_support.h"

#include "blocks.h"
#include "model/model_file.h"

#include <gtest/gtest.h>

#include <cstring>

namespace fs = std::filesystem;
using nlohmann::json;

namespace cellm::testing {
namespace {

json config_with(const json& quantization) {
    json c = {{"model_type", "llama"},   {"hidden_size", 8},         {"num_hidden_layers", 1},
              {"intermediate_size", 16}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
              {"max_position_embeddings", 32}, {"vocab_size", 4}, {"rms_norm_eps", 1e-5}};
    if (!quantization.is_null()) c["quantization"] = quantization;
    return c;
}

fs::path write_folder(const std::string& name, const json& config, const std::vector<StTensor>& tensors) {
    return write_tensor_folder(temp_dir() / ("mlx-" + name), config, tensors);
}

// Codes of a [rows, columns] matrix packed as mlx-lm packs them: code i at bits (i * bits) % 32 of word
// i * bits / 32 of its row, little-endian words.
std::vector<uint8_t> packed(const std::vector<std::vector<uint32_t>>& codes, uint32_t bits) {
    std::vector<uint8_t> out;
    for (const auto& row : codes) {
        std::vector<uint32_t> words(row.size() * bits / 32);
        for (size_t i = 0; i < row.size(); ++i) words[i * bits / 32] |= row[i] << (i * bits % 32);
        const size_t at = out.size();
        out.resize(at + words.size() * 4);
        std::memcpy(out.data() + at, words.data(), words.size() * 4);
    }
    return out;
}

std::vector<uint8_t> f16_bytes(const std::vector<float>& values) {
    std::vector<uint8_t> out(values.size() * 2);
    for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t h = blocks::fp32_to_fp16(values[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
    }
    return out;
}

std::vector<uint8_t> bf16_bytes(const std::vector<float>& values) {
    std::vector<uint8_t> out(values.size() * 2);
    for (size_t i = 0; i < values.size(); ++i) {
        uint32_t bits;
        std::memcpy(&bits, &values[i], 4);
        const auto h = static_cast<uint16_t>(bits >> 16);  // the values below are bf16 values already
        std::memcpy(out.data() + 2 * i, &h, 2);
    }
    return out;
}

// codes[r][i] = (7 r + 3 i) mod 2^bits: every code value occurs, rows differ.
std::vector<std::vector<uint32_t>> code_matrix(size_t rows, size_t columns, uint32_t bits) {
    std::vector<std::vector<uint32_t>> codes(rows, std::vector<uint32_t>(columns));
    for (size_t r = 0; r < rows; ++r) {
        for (size_t i = 0; i < columns; ++i) codes[r][i] = static_cast<uint32_t>(7 * r + 3 * i) % (1u << bits);
    }
    return codes;
}

std::vector<float> dequantized(const cellm_tensor_info& t) {
    const auto rows = static_cast<size_t>(t.ne[1]), columns = static_cast<size_t>(t.ne[0]);
    std::vector<float> out(rows * columns);
    const uint64_t row_bytes = t.size / rows;
    for (size_t r = 0; r < rows; ++r) {
        blocks::dequantize_row(t.type, static_cast<const uint8_t*>(t.data) + r * row_bytes, out.data() + r * columns,
                               static_cast<int64_t>(columns));
    }
    return out;
}

TEST(MlxFolder, FourBitWeightsAreQ4ABlocksOfTheSameValues) {
    // Two groups of 32 per row; scales of both signs (mlx-lm's bias may be a group's maximum), BF16 as mlx-lm
    // writes them by default.
    const auto codes = code_matrix(4, 64, 4);
    const std::vector<float> scales = {0.5f, -0.25f, 0.125f, 1.0f, -2.0f, 0.0625f, 0.75f, -0.375f};
    const std::vector<float> biases = {-1.0f, 2.0f, 0.5f, -0.125f, 3.0f, -4.0f, 0.25f, 1.5f};
    const fs::path dir = write_folder("q4", config_with({{"group_size", 32}, {"bits", 4}, {"mode", "affine"}}),
                                      {{"lm_head.weight", "U32", {4, 8}, packed(codes, 4)},
                                       {"lm_head.scales", "BF16", {4, 2}, bf16_bytes(scales)},
                                       {"lm_head.biases", "BF16", {4, 2}, bf16_bytes(biases)}});
    const auto file = ModelFile::open(registry(), dir);
    const cellm_tensor_info* out = file->tensor("output.weight");
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->type, CELLM_TYPE_Q4A_G32);
    EXPECT_EQ(out->ne[0], 64);
    EXPECT_EQ(out->ne[1], 4);
    EXPECT_EQ(out->size, 4u * 2 * 20);
    const std::vector<float> values = dequantized(*out);
    for (size_t r = 0; r < 4; ++r) {
        for (size_t i = 0; i < 64; ++i) {
            const size_t g = r * 2 + i / 32;
            ASSERT_EQ(values[r * 64 + i], scales[g] * static_cast<float>(codes[r][i]) + biases[g]) << r << ", " << i;
        }
    }
    EXPECT_EQ(file->tensor("output.scales"), nullptr);
}

TEST(MlxFolder, EightBitWeightsAreWidenedToF32) {
    const auto codes = code_matrix(2, 64, 8);
    const std::vector<float> scales = {0.01f, -0.02f}, biases = {-1.25f, 0.5f};
    const fs::path dir = write_folder("q8", config_with({{"group_size", 64}, {"bits", 8}}),
                                      {{"lm_head.weight", "U32", {2, 16}, packed(codes, 8)},
                                       {"lm_head.scales", "F16", {2, 1}, f16_bytes(scales)},
                                       {"lm_head.biases", "F16", {2, 1}, f16_bytes(biases)}});
    const auto file = ModelFile::open(registry(), dir);
    const cellm_tensor_info* out = file->tensor("output.weight");
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->type, CELLM_TYPE_F32);
    EXPECT_EQ(out->ne[0], 64);
    const std::vector<float> values = dequantized(*out);
    for (size_t r = 0; r < 2; ++r) {
        const float s = blocks::fp16_to_fp32(blocks::fp32_to_fp16(scales[r]));
        const float b = blocks::fp16_to_fp32(blocks::fp32_to_fp16(biases[r]));
        for (size_t i = 0; i < 64; ++i) ASSERT_EQ(values[r * 64 + i], s * static_cast<float>(codes[r][i]) + b);
    }
}

TEST(MlxFolder, LlamaQueryRowsArePermutedWhole) {
    // 8 rows for 2 heads: GGUF's order interleaves each head's halves (rows 0 2 1 3 of a head of 4 become 0 1 2 3).
    const auto codes = code_matrix(8, 32, 4);
    std::vector<float> scales(8), biases(8);
    for (size_t r = 0; r < 8; ++r) scales[r] = 0.5f * static_cast<float>(r + 1), biases[r] = -static_cast<float>(r);
    const fs::path dir = write_folder("q-permuted", config_with({{"group_size", 32}, {"bits", 4}}),
                                      {{"model.layers.0.self_attn.q_proj.weight", "U32", {8, 4}, packed(codes, 4)},
                                       {"model.layers.0.self_attn.q_proj.scales", "F16", {8, 1}, f16_bytes(scales)},
                                       {"model.layers.0.self_attn.q_proj.biases", "F16", {8, 1}, f16_bytes(biases)}});
    const auto file = ModelFile::open(registry(), dir);
    const cellm_tensor_info* q = file->tensor("blk.0.attn_q.weight");
    ASSERT_NE(q, nullptr);
    const std::vector<float> values = dequantized(*q);
    const size_t from_row[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    for (size_t to = 0; to < 8; ++to) {
        const size_t r = from_row[to];
        for (size_t i = 0; i < 32; ++i) {
            ASSERT_EQ(values[to * 32 + i], scales[r] * static_cast<float>(codes[r][i]) + biases[r]) << to << ", " << i;
        }
    }
}

struct Refusal {
    const char* name;
    json quantization;
    std::vector<StTensor> tensors;
    cellm_status_code code;
    const char* message;  // the end of the one-line message
};

// A 4 x 64 packed weight with F16 scales of `scales_shape` and biases of the right one.
std::vector<StTensor> lm_head(std::vector<int64_t> scales_shape = {4, 2}) {
    const auto scales_bytes = static_cast<size_t>(scales_shape[0] * scales_shape[1] * 2);
    return {{"lm_head.weight", "U32", {4, 8}, packed(code_matrix(4, 64, 4), 4)},
            {"lm_head.scales", "F16", scales_shape, std::vector<uint8_t>(scales_bytes)},
            {"lm_head.biases", "F16", {4, 2}, std::vector<uint8_t>(16)}};
}

class MlxRefusal : public ::testing::TestWithParam<Refusal> {};

TEST_P(MlxRefusal, FailsInOneLine) {
    const Refusal& r = GetParam();
    const fs::path dir = write_folder(std::string("refused-") + r.name, config_with(r.quantization), r.tensors);
    const Outcome outcome = try_open(dir);
    EXPECT_EQ(outcome.code, r.code) << outcome.message;
    EXPECT_TRUE(outcome.message.ends_with(r.message)) << outcome.message;
    EXPECT_EQ(outcome.message.find('\n'), std::string::npos);
}

const json q4 = {{"group_size", 32}, {"bits", 4}};

INSTANTIATE_TEST_SUITE_P(
    Cases, MlxRefusal,
    ::testing::Values(
        Refusal{"bits3", {{"group_size", 32}, {"bits", 3}}, lm_head(), CELLM_ERR_UNSUPPORTED,
                "quantization bits 3 are not supported (4 or 8 bits)"},
        Refusal{"group16", {{"group_size", 16}, {"bits", 4}}, lm_head(), CELLM_ERR_UNSUPPORTED,
                "quantization group_size 16 is not supported (32, 64 or 128)"},
        Refusal{"mxfp4", {{"group_size", 32}, {"bits", 4}, {"mode", "mxfp4"}}, lm_head(), CELLM_ERR_UNSUPPORTED,
                "quantization mode \"mxfp4\" is not supported (affine only)"},
        Refusal{"per-layer", {{"group_size", 32}, {"bits", 4}, {"model.layers.0.mlp.down_proj", {{"bits", 8}}}},
                lm_head(), CELLM_ERR_UNSUPPORTED,
                "quantization settings per layer ('model.layers.0.mlp.down_proj') are not supported"},
        Refusal{"bits-text", {{"group_size", 32}, {"bits", "4"}}, lm_head(), CELLM_ERR_CORRUPT,
                "quantization.bits is not a count"},
        Refusal{"u32-unquantized", nullptr, {lm_head()[0]}, CELLM_ERR_UNSUPPORTED,
                "tensor 'lm_head.weight' has dtype U32, which only the packed weights of an MLX-quantized folder "
                "(config.json's \"quantization\") may have"},
        Refusal{"no-biases", q4, {lm_head()[0], lm_head()[1]}, CELLM_ERR_CORRUPT,
                "MLX-quantized 'lm_head.weight' has no lm_head.biases"},
        Refusal{"scales-shape", q4, lm_head({4, 1}), CELLM_ERR_CORRUPT,
                "MLX-quantized 'lm_head.weight' needs 'lm_head.scales' of shape [4, 2]"},
        Refusal{"group64-of-32-columns", {{"group_size", 64}, {"bits", 4}},
                {{"lm_head.weight", "U32", {4, 4}, packed(code_matrix(4, 32, 4), 4)},
                 {"lm_head.scales", "F16", {4, 1}, std::vector<uint8_t>(8)},
                 {"lm_head.biases", "F16", {4, 1}, std::vector<uint8_t>(8)}},
                CELLM_ERR_CORRUPT, "MLX-quantized 'lm_head.weight' has 32 columns, not a multiple of the group size 64"},
        Refusal{"1d-weight", q4,
                {{"lm_head.weight", "U32", {8}, std::vector<uint8_t>(32)},
                 {"lm_head.scales", "F16", {4, 2}, std::vector<uint8_t>(16)},
                 {"lm_head.biases", "F16", {4, 2}, std::vector<uint8_t>(16)}},
                CELLM_ERR_CORRUPT, "MLX-quantized 'lm_head.weight' is not a 2-D U32 tensor of packed codes"}),
    [](const ::testing::TestParamInfo<Refusal>& param) {
        std::string name = param.param.name;
        for (char& c : name) {
            if (c == '-') c = '_';
        }
        return name;
    });

}  // namespace
}  // namespace cellm::testing
