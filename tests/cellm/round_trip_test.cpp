// GGUF, Hugging Face folders -> .cellm -> .cellm: the converted files expose the same metadata and tensor bytes, give bit-identical
// logits and identical token ids, and a .cellm file converts to a byte-identical copy.
#include "test_support.h"

#include "model/cellm_writer.h"
#include "gguf_writer.h"
#include "hf_folder_writer.h"
#include "tokenize/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

namespace fs = std::filesystem;

namespace cellm::testing {
namespace {

fs::path convert(const fs::path& input, const std::string& name) {
    auto file = ModelFile::open(registry(), input);
    std::vector<std::string> skipped;
    const fs::path output = temp_dir() / name;
    CellmWriter::from_view(file->view(), skipped).write(output);
    EXPECT_TRUE(skipped.empty());
    return output;
}

std::vector<float> logits_of(const fs::path& model, const std::vector<int32_t>& tokens) {
    Stack s = make_stack(model);
    const Engine::Work work{s.engine->create_sequence(), tokens, LogitsWanted::All};
    std::vector<float> logits;
    s.engine->step({&work, 1}, logits);
    return logits;
}

std::string slurp(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

// Same keys in the same order with the same types and values; same tensors with the same bytes.
void expect_same_view(const cellm_model_view& a, const cellm_model_view& b) {
    ASSERT_EQ(a.n_meta, b.n_meta);
    for (uint64_t i = 0; i < a.n_meta; ++i) {
        const cellm_meta_kv &x = a.meta[i], &y = b.meta[i];
        EXPECT_EQ(to_string_view(x.key), to_string_view(y.key));
        ASSERT_EQ(x.value.type, y.value.type) << to_string_view(x.key);
        if (x.value.type == CELLM_VALUE_STRING) {
            EXPECT_EQ(to_string_view(x.value.v.str), to_string_view(y.value.v.str));
        } else if (x.value.type == CELLM_VALUE_ARRAY) {
            EXPECT_EQ(x.value.v.arr.elem_type, y.value.v.arr.elem_type);
            ASSERT_EQ(x.value.v.arr.count, y.value.v.arr.count);
            if (x.value.v.arr.elem_type == CELLM_VALUE_STRING) {
                const auto* xs = static_cast<const cellm_string_ref*>(x.value.v.arr.data);
                const auto* ys = static_cast<const cellm_string_ref*>(y.value.v.arr.data);
                for (uint64_t k = 0; k < x.value.v.arr.count; ++k) ASSERT_EQ(to_string_view(xs[k]), to_string_view(ys[k]));
            }
        } else {
            EXPECT_EQ(x.value.v.u64, y.value.v.u64) << to_string_view(x.key);
        }
    }
    ASSERT_EQ(a.n_tensors, b.n_tensors);
    for (uint64_t i = 0; i < a.n_tensors; ++i) {
        const cellm_tensor_info *x = cellm_model_tensor(&a, i), *y = cellm_model_tensor(&b, i);
        EXPECT_EQ(to_string_view(x->name), to_string_view(y->name));
        EXPECT_EQ(x->type, y->type);
        EXPECT_EQ(x->n_dims, y->n_dims);
        EXPECT_EQ(std::memcmp(x->ne, y->ne, sizeof x->ne), 0);
        ASSERT_EQ(x->size, y->size);
        EXPECT_EQ(std::memcmp(x->data, y->data, x->size), 0) << to_string_view(x->name);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(y->data) % 64, 0u) << "tensor data is aligned in the mapping";
    }
}

class GgufToCellm : public ::testing::TestWithParam<cellm_dtype> {};

TEST_P(GgufToCellm, SameViewLogitsAndTokens) {
    const fs::path gguf = synthetic_model(GetParam());
    const fs::path cellm = convert(gguf, "tiny-" + std::string(dtype_name(GetParam())) + ".cellm");
    auto a = ModelFile::open(registry(), gguf);
    auto b = ModelFile::open(registry(), cellm);
    EXPECT_STREQ(b->format().name(), "cellm") << "picked by its magic";
    expect_same_view(a->view(), b->view());

    const std::vector<int32_t> tokens = {1, 17, 5, 230, 42, 99, 7, 3};
    const std::vector<float> expected = logits_of(gguf, tokens);
    const std::vector<float> got = logits_of(cellm, tokens);
    ASSERT_EQ(got.size(), expected.size());
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0) << "logits differ";

    auto ta = Tokenizer::from_model(a->view());
    auto tb = Tokenizer::from_model(b->view());
    for (const char* text : {"the cat sat on the mat", "Hello, world! 123", "  spaces\tand\nlines  "}) {
        EXPECT_EQ(ta->encode(text, true, true), tb->encode(text, true, true)) << text;
    }
}

INSTANTIATE_TEST_SUITE_P(WeightTypes, GgufToCellm,
                         ::testing::Values(CELLM_TYPE_F32, CELLM_TYPE_F16, CELLM_TYPE_BF16, CELLM_TYPE_Q8_0,
                                           CELLM_TYPE_Q4_1, CELLM_TYPE_Q4_K, CELLM_TYPE_Q6_K),
                         [](const auto& param_info) { return std::string(dtype_name(param_info.param)); });

// A safetensors folder goes through its own plugin (Q/K rows permuted on load); its .cellm copy stores the
// view as served, so it gives the folder's logits and tokens.
TEST(SafetensorsToCellm, SameViewLogitsAndTokens) {
    const fs::path folder = temp_dir() / "tiny-f16-hf";
    write_hf_folder(synthetic_model(CELLM_TYPE_F16), folder, {2, true});
    const fs::path cellm = convert(folder, "tiny-f16-hf.cellm");
    auto a = ModelFile::open(registry(), folder);
    auto b = ModelFile::open(registry(), cellm);
    expect_same_view(a->view(), b->view());
    const std::vector<int32_t> tokens = {1, 17, 5, 230, 42, 99, 7, 3};
    const std::vector<float> expected = logits_of(folder, tokens);
    const std::vector<float> got = logits_of(cellm, tokens);
    ASSERT_EQ(got.size(), expected.size());
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0) << "logits differ";
    const std::string text = "<|im_start|>user\nThe 2024 answer is 42<|im_end|>";
    EXPECT_EQ(Tokenizer::from_model(a->view())->encode(text, false, true),
              Tokenizer::from_model(b->view())->encode(text, false, true));
}

// Views expose only the length of a nested array, so the writer leaves such keys out and says which.
TEST(CellmWriter, LeavesOutNestedArraysAndNamesThem) {
    gguf::Writer w;
    w.add("general.architecture", "llama");
    std::vector<uint8_t> nested;
    gguf::Writer::put(nested, static_cast<uint32_t>(CELLM_VALUE_ARRAY));
    gguf::Writer::put(nested, uint64_t{0});
    w.add_raw("nested", CELLM_VALUE_ARRAY, nested);
    w.add_array("empty", std::vector<std::string>{});
    w.add_tensor("t", CELLM_TYPE_F32, {8}, std::vector<uint8_t>(32, 0));
    const fs::path gguf = temp_dir() / "nested.gguf";
    w.write(gguf.string());
    auto file = ModelFile::open(registry(), gguf);
    std::vector<std::string> skipped;
    const fs::path cellm = temp_dir() / "nested.cellm";
    CellmWriter::from_view(file->view(), skipped).write(cellm);
    EXPECT_EQ(skipped, std::vector<std::string>{"nested"});
    auto copy = ModelFile::open(registry(), cellm);
    EXPECT_EQ(copy->find("nested"), nullptr);
    ASSERT_NE(copy->find("empty"), nullptr);
    EXPECT_EQ(copy->find("empty")->v.arr.count, 0u);
}

TEST(CellmToCellm, ConvertsToAByteIdenticalFile) {
    const fs::path first = convert(synthetic_model(CELLM_TYPE_Q8_0), "first.cellm");
    const fs::path second = convert(first, "second.cellm");
    EXPECT_EQ(slurp(first), slurp(second));
    EXPECT_FALSE(fs::exists(second.string() + ".partial"));
}

TEST(ConvertCommand, WritesACellmFileWithProgressAndSize) {
    const fs::path output = temp_dir() / "cli.cellm";
    const CommandResult r = run_host("convert --input " + shell_quote(synthetic_model(CELLM_TYPE_Q4_1).string()) +
                                     " --output " + shell_quote(output.string()));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("wrote " + output.string()), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("MiB"), std::string::npos) << r.out;
    auto model = ModelFile::open(registry(), output);
    const std::string n = std::to_string(model->view().n_tensors);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), static_cast<long>(model->view().n_tensors))
        << "one progress line per tensor: " << r.err;
    EXPECT_NE(r.err.find("] " + n + "/" + n + " "), std::string::npos) << r.err;
    const CommandResult inspect = run_host("inspect " + shell_quote(output.string()));
    ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
    EXPECT_NE(inspect.out.find("format:  cellm"), std::string::npos) << inspect.out;
}

// --quantize rewrites every matrix whose rows split into whole groups, leaves vectors alone, and reports the
// logit drift; the quantized file then runs like any other.
TEST(ConvertCommand, QuantizesMatricesAndReportsTheDrift) {
    const fs::path output = temp_dir() / "int4.cellm";
    const CommandResult r = run_host("convert --input " + shell_quote(synthetic_model(CELLM_TYPE_F16).string()) +
                                     " --output " + shell_quote(output.string()) +
                                     " --quantize int4 --group-size 32 --backend scalar");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("to I4S_G32 (groups of 32)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("logit drift against the input"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("top-1 agreement"), std::string::npos) << r.out;
    auto model = ModelFile::open(registry(), output);
    int matrices = 0;
    for (uint64_t i = 0; i < model->view().n_tensors; ++i) {
        const cellm_tensor_info& t = *cellm_model_tensor(&model->view(), i);
        if (t.n_dims == 2) {
            EXPECT_EQ(t.type, CELLM_TYPE_I4S_G32) << to_string_view(t.name);
            ++matrices;
        } else {
            EXPECT_EQ(t.type, CELLM_TYPE_F32) << to_string_view(t.name);
        }
    }
    EXPECT_GT(matrices, 0);
    const fs::path manifest = temp_dir() / "int4.toml";
    std::ofstream(manifest) << "[model]\npath = \"" << output.string() << "\"\n[sampling]\ntemperature = 0\nmax_tokens = 4\n";
    const CommandResult run = run_host("run --manifest " + shell_quote(manifest.string()) + " --prompt 'the cat' --raw --json");
    EXPECT_EQ(run.exit_code, 0) << run.err;
}

TEST(ConvertCommand, BadQuantizeOptionsAreOneErrorLine) {
    const std::string input = shell_quote(synthetic_model(CELLM_TYPE_F16).string());
    for (const std::string bad : {" --quantize int3", " --quantize int8 --group-size 48"}) {
        const CommandResult r = run_host("convert --input " + input + " --output " +
                                         shell_quote((temp_dir() / "bad.cellm").string()) + bad);
        EXPECT_NE(r.exit_code, 0) << bad;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << bad << ": " << r.err;
    }
}

TEST(ConvertCommand, MissingInputIsOneErrorLine) {
    const CommandResult r = run_host("convert --input /nonexistent/model.gguf --output " +
                                     shell_quote((temp_dir() / "never.cellm").string()));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace cellm::testing
