// BF16 and F16 tensors widened to F32 when a folder opens (hf_folder.cpp, widened()): every BF16 tensor, and
// the F16 vectors the archs read as F32 only, bit for bit, so such folders run exactly like F32 folders of the
// same values, with a log line saying what the widening costs; F16 matrices are served as stored. A dtype cellm
// does not read fails in one line naming the file, the tensor and the dtype.
#include "hf_folder_writer.h"
#include "open_outcome.h"
#include "test_support.h"

#include "blocks.h"
#include "model/model_file.h"
#include "plugin/host_api.h"
#include "synthetic_model.h"

#include <cellm/format.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <sstream>

namespace fs = std::filesystem;
using nlohmann::json;

namespace cellm::testing {
namespace {

const json config = {{"model_type", "llama"},   {"hidden_size", 8},           {"num_hidden_layers", 1},
                     {"intermediate_size", 16}, {"num_attention_heads", 2},   {"num_key_value_heads", 1},
                     {"max_position_embeddings", 32}, {"vocab_size", 4}, {"rms_norm_eps", 1e-5}};

std::vector<uint8_t> bytes_of(const std::vector<uint16_t>& values) {
    std::vector<uint8_t> out(values.size() * 2);
    std::memcpy(out.data(), values.data(), out.size());
    return out;
}

std::vector<uint8_t> bytes_of(const std::vector<uint32_t>& values) {
    std::vector<uint8_t> out(values.size() * 4);
    std::memcpy(out.data(), values.data(), out.size());
    return out;
}

// Every 16-bit pattern, in order.
std::vector<uint16_t> all_patterns() {
    std::vector<uint16_t> out(65536);
    for (uint32_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint16_t>(i);
    return out;
}

std::vector<uint32_t> bits_of(const cellm_tensor_info& t) {
    std::vector<uint32_t> out(t.size / 4);
    std::memcpy(out.data(), t.data, t.size);
    return out;
}

// The F32 bits of an F16 value, from the definition (not the plugin's bit shuffling): finite values through
// ldexp, infinities and NaNs with their payload in the top mantissa bits.
uint32_t f16_as_f32_bits(uint16_t h) {
    const bool negative = (h & 0x8000) != 0;
    const int exponent = (h >> 10) & 0x1f;
    const int mantissa = h & 0x3ff;
    if (exponent == 0x1f) return (negative ? 0x80000000u : 0u) | 0x7f800000u | (static_cast<uint32_t>(mantissa) << 13);
    const double magnitude = exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
    return std::bit_cast<uint32_t>(static_cast<float>(negative ? -magnitude : magnitude));
}

fs::path write_folder(const std::string& name, const std::vector<StTensor>& tensors) {
    return write_tensor_folder(temp_dir() / ("widen-" + name), config, tensors);
}

TEST(WidenBf16, EveryValueIsWidenedBitExactly) {
    const std::vector<uint16_t> patterns = all_patterns();  // zeros, subnormals, infinities and NaNs included
    const fs::path dir = write_folder("bf16-patterns", {{"lm_head.weight", "BF16", {8, 8192}, bytes_of(patterns)},
                                                        {"model.norm.weight", "BF16", {8}, bytes_of(std::vector<uint16_t>(8, 0x3f80))}});
    const auto file = ModelFile::open(registry(), dir);
    const cellm_tensor_info* out = file->tensor("output.weight");
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->type, CELLM_TYPE_F32);
    EXPECT_EQ(out->size, 65536u * 4);
    EXPECT_EQ(out->n_dims, 2u);
    EXPECT_EQ(out->ne[0], 8192);
    EXPECT_EQ(out->ne[1], 8);
    const std::vector<uint32_t> bits = bits_of(*out);
    for (uint32_t i = 0; i < 65536; ++i) ASSERT_EQ(bits[i], i << 16) << "bf16 pattern " << i;

    const cellm_tensor_info* norm = file->tensor("output_norm.weight");
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(norm->type, CELLM_TYPE_F32);
    EXPECT_EQ(bits_of(*norm), std::vector<uint32_t>(8, 0x3f800000u));  // 1.0f
}

TEST(WidenF16, VectorsAreWidenedBitExactlyAndMatricesServedAsStored) {
    const std::vector<uint16_t> patterns = all_patterns();
    std::vector<uint16_t> matrix(32);
    for (size_t i = 0; i < matrix.size(); ++i) matrix[i] = static_cast<uint16_t>(0x3c00 + 37 * i);
    const fs::path dir = write_folder("f16-patterns", {{"model.norm.weight", "F16", {65536}, bytes_of(patterns)},
                                                       {"lm_head.weight", "F16", {4, 8}, bytes_of(matrix)}});
    const auto file = ModelFile::open(registry(), dir);
    const cellm_tensor_info* norm = file->tensor("output_norm.weight");
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(norm->type, CELLM_TYPE_F32);
    ASSERT_EQ(norm->size, 65536u * 4);
    const std::vector<uint32_t> bits = bits_of(*norm);
    for (uint32_t i = 0; i < 65536; ++i) {
        ASSERT_EQ(bits[i], f16_as_f32_bits(static_cast<uint16_t>(i))) << "f16 pattern " << i;
    }
    const cellm_tensor_info* out = file->tensor("output.weight");
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->type, CELLM_TYPE_F16);
    ASSERT_EQ(out->size, 64u);
    EXPECT_EQ(std::memcmp(out->data, matrix.data(), 64), 0);
}

// Llama's Q/K rows are permuted on load; a BF16 Q/K is widened in the same pass, giving what the F32 folder of
// the same values gives.
TEST(WidenBf16, LlamaQkAreWidenedAndPermutedLikeF32) {
    std::vector<uint16_t> q(64), k(32);
    for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint16_t>(0x3c00 + 97 * i);
    for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint16_t>(0xbc00 + 89 * i);
    const auto widened = [](const std::vector<uint16_t>& v) {
        std::vector<uint32_t> out;
        for (uint16_t h : v) out.push_back(uint32_t{h} << 16);
        return bytes_of(out);
    };
    const fs::path bf16 = write_folder("qk-bf16", {{"model.layers.0.self_attn.q_proj.weight", "BF16", {8, 8}, bytes_of(q)},
                                                   {"model.layers.0.self_attn.k_proj.weight", "BF16", {4, 8}, bytes_of(k)}});
    const fs::path f32 = write_folder("qk-f32", {{"model.layers.0.self_attn.q_proj.weight", "F32", {8, 8}, widened(q)},
                                                 {"model.layers.0.self_attn.k_proj.weight", "F32", {4, 8}, widened(k)}});
    const auto a = ModelFile::open(registry(), bf16);
    const auto b = ModelFile::open(registry(), f32);
    for (const char* name : {"blk.0.attn_q.weight", "blk.0.attn_k.weight"}) {
        const cellm_tensor_info* got = a->tensor(name);
        const cellm_tensor_info* want = b->tensor(name);
        ASSERT_NE(got, nullptr);
        ASSERT_NE(want, nullptr);
        EXPECT_EQ(got->type, CELLM_TYPE_F32) << name;
        ASSERT_EQ(got->size, want->size) << name;
        EXPECT_EQ(std::memcmp(got->data, want->data, got->size), 0) << name;
    }
}

// The log line says how many tensors of each type were widened and what they take before and after.
TEST(WidenBf16, OpeningLogsWhatWasWidened) {
    const fs::path dir = write_folder("log", {{"lm_head.weight", "BF16", {8, 8192}, bytes_of(all_patterns())},
                                              {"model.norm.weight", "BF16", {8}, std::vector<uint8_t>(16)},
                                              {"model.layers.0.input_layernorm.weight", "F16", {8}, std::vector<uint8_t>(16)},
                                              {"model.embed_tokens.weight", "F16", {4, 8}, std::vector<uint8_t>(64)}});
    std::ostringstream log;
    const auto previous = spdlog::default_logger();
    auto capture = std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_st>(log));
    capture->set_level(spdlog::level::info);
    capture->set_pattern("%v");
    spdlog::set_default_logger(capture);
    try {
        ModelFile::open(registry(), dir);
    } catch (...) {
        spdlog::set_default_logger(previous);
        throw;
    }
    spdlog::set_default_logger(previous);
    const std::string text = log.str();
    EXPECT_NE(text.find("[safetensors] " + dir.string() +
                        ": widened 2 BF16 and 1 F16 tensors to F32 on load: 128.0 KiB in the shards take 256.1 KiB "
                        "of memory (131104 -> 262208 bytes)\n"),
              std::string::npos)
        << text;
}

// ---- Whole models: synthetic GGUF models written as folders of the dtypes Hugging Face checkpoints use ------

std::vector<float> all_logits(const fs::path& model) {
    EngineOptions options;
    options.context_length = 64;
    Stack s = make_stack(model, "scalar", options);
    const int32_t seq = s.engine->create_sequence();
    std::vector<float> logits;
    const std::vector<int32_t> tokens = {1, 17, 42, 99, 3, 250, 7, 64, 128, 5, 11};
    const Engine::Work work{seq, tokens, LogitsWanted::All};
    s.engine->step({&work, 1}, logits);
    return logits;
}

fs::path gguf_model(const std::string& preset, cellm_dtype type) {
    const fs::path path = temp_dir() / (preset + "-" + std::string(synthetic::weight_type_name(type)) + ".gguf");
    if (!fs::exists(path)) synthetic::write_model(path.string(), {preset, type, 7});
    return path;
}

// Rewrites a tensor's float values (F32, F16 or BF16) through `f`, stored as `dtype`.
void recode(StTensor& t, const std::string& dtype, float (*f)(float)) {
    const size_t from = t.dtype == "F32" ? 4 : 2, to = dtype == "F32" ? 4 : 2;
    const size_t n = t.data.size() / from;
    std::vector<uint8_t> out(n * to);
    for (size_t i = 0; i < n; ++i) {
        float v;
        if (from == 4) {
            std::memcpy(&v, t.data.data() + 4 * i, 4);
        } else {
            uint16_t h;
            std::memcpy(&h, t.data.data() + 2 * i, 2);
            v = t.dtype == "BF16" ? blocks::bf16_to_fp32(h) : blocks::fp16_to_fp32(h);
        }
        v = f(v);
        if (to == 4) {
            std::memcpy(out.data() + 4 * i, &v, 4);
        } else {
            const uint16_t h = dtype == "BF16" ? blocks::fp32_to_bf16(v) : blocks::fp32_to_fp16(v);
            std::memcpy(out.data() + 2 * i, &h, 2);
        }
    }
    t.data = std::move(out);
    t.dtype = dtype;
}

float same(float v) { return v; }
float bf16_rounded(float v) { return blocks::bf16_to_fp32(blocks::fp32_to_bf16(v)); }
float f16_rounded(float v) { return blocks::fp16_to_fp32(blocks::fp32_to_fp16(v)); }

struct Preset {
    const char* name;
    int shards;
};

class WholeFolder : public ::testing::TestWithParam<Preset> {};

// A checkpoint saved in bfloat16 (every tensor BF16, norms included) runs bit for bit like the F32 folder of
// the same values: the widening is exact and nothing else differs.
TEST_P(WholeFolder, Bf16RunsLikeTheF32FolderOfItsValues) {
    const Preset p = GetParam();
    const fs::path gguf = gguf_model(p.name, CELLM_TYPE_BF16);
    const std::string stem = std::string(p.name) + "-" + std::to_string(p.shards);
    const fs::path bf16 = temp_dir() / (stem + "-all-bf16-hf"), f32 = temp_dir() / (stem + "-bf16-values-f32-hf");
    write_hf_folder(gguf, bf16, {p.shards, true}, [](StTensor& t) { if (t.dtype == "F32") recode(t, "BF16", same); });
    write_hf_folder(gguf, f32, {p.shards, true}, [](StTensor& t) { recode(t, "F32", t.dtype == "F32" ? bf16_rounded : same); });
    const auto file = ModelFile::open(registry(), bf16);
    for (uint64_t i = 0; i < file->view().n_tensors; ++i) {
        EXPECT_EQ(cellm_model_tensor(&file->view(), i)->type, CELLM_TYPE_F32) << "tensor " << i;
    }
    const std::vector<float> want = all_logits(f32);
    const std::vector<float> got = all_logits(bf16);
    ASSERT_EQ(got.size(), want.size());
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

// A checkpoint saved in float16 (matrices and vectors F16) runs bit for bit like the folder whose vectors hold the
// same F16 values as F32: the vectors are widened exactly, the matrices served as F16.
TEST_P(WholeFolder, F16RunsLikeTheFolderWithItsVectorsInF32) {
    const Preset p = GetParam();
    const fs::path gguf = gguf_model(p.name, CELLM_TYPE_F16);
    const std::string stem = std::string(p.name) + "-" + std::to_string(p.shards);
    const fs::path f16 = temp_dir() / (stem + "-all-f16-hf"), f32 = temp_dir() / (stem + "-f16-vectors-f32-hf");
    write_hf_folder(gguf, f16, {p.shards, true}, [](StTensor& t) { if (t.dtype == "F32") recode(t, "F16", same); });
    write_hf_folder(gguf, f32, {p.shards, true}, [](StTensor& t) { if (t.dtype == "F32") recode(t, "F32", f16_rounded); });
    const auto file = ModelFile::open(registry(), f16);
    EXPECT_EQ(file->tensor("blk.0.attn_q.weight")->type, CELLM_TYPE_F16);
    EXPECT_EQ(file->tensor("blk.0.attn_norm.weight")->type, CELLM_TYPE_F32);
    const std::vector<float> want = all_logits(f32);
    const std::vector<float> got = all_logits(f16);
    ASSERT_EQ(got.size(), want.size());
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Presets, WholeFolder,
                         ::testing::Values(Preset{"tiny", 1}, Preset{"tiny", 2}, Preset{"qwen2-tiny", 1},
                                           Preset{"qwen3-tiny", 2}),
                         [](const ::testing::TestParamInfo<Preset>& p) {
                             std::string name = std::string(p.param.name) + "_" + std::to_string(p.param.shards) + "shard";
                             for (char& ch : name) ch = ch == '-' ? '_' : ch;
                             return name;
                         });

// ---- Dtypes cellm does not read -------------------------------------------------------------------------------


class UnsupportedDtype : public ::testing::TestWithParam<const char*> {};

TEST_P(UnsupportedDtype, FailsInOneLineNamingFileTensorAndDtype) {
    const std::string dtype = GetParam();
    const fs::path dir = write_folder("dtype-" + dtype, {{"model.norm.weight", "F32", {8}, std::vector<uint8_t>(32)},
                                                         {"lm_head.weight", dtype, {4, 8}, std::vector<uint8_t>(32)}});
    const Outcome outcome = try_open(dir);
    EXPECT_EQ(outcome.code, CELLM_ERR_UNSUPPORTED) << outcome.message;
    EXPECT_EQ(outcome.message, (dir / "model.safetensors").string() + ": tensor 'lm_head.weight' has dtype '" + dtype +
                                   "' (supported: F32, F16, BF16, U32)");
    EXPECT_EQ(outcome.message.find('\n'), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, UnsupportedDtype,
                         ::testing::Values("F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F64", "I8", "U8", "I16", "I32", "I64",
                                           "BOOL", "bf16"));

}  // namespace
}  // namespace cellm::testing
