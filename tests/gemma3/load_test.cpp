// The gemma3 plugin as the host finds and loads it: which general.architecture reaches it, what a loaded model
// reports, and that every kind of bad file or call ends in one clear error naming the problem (never a crash).
#include "qwen_models.h"
#include "test_support.h"

#include "error.h"
#include "plugin/host_api.h"

#include <gtest/gtest.h>

#include <string>

namespace fs = std::filesystem;

namespace cellm::testing {
namespace {

TEST(Gemma3Plugin, ServesGemma3Files) {
    const Plugin* gemma3 = registry().find(CELLM_PLUGIN_ARCH, "gemma3");
    ASSERT_NE(gemma3, nullptr) << "cellm-gemma3.so was not built";
    EXPECT_EQ(registry().find_arch_for("gemma3"), gemma3);
    EXPECT_STREQ(Model::load(registry(), qwen_model("tiny", CELLM_TYPE_F32))->arch_plugin().name(), "llama");
}

TEST(Gemma3Plugin, ReportsTheModelShape) {
    const auto model = Model::load(registry(), qwen_model("gemma3-tiny", CELLM_TYPE_F32));
    EXPECT_STREQ(model->arch_plugin().name(), "gemma3");
    const cellm_arch_info& info = model->info();
    EXPECT_EQ(info.n_layer, 6);
    EXPECT_EQ(info.n_vocab, 512);  // token_embd's rows: Gemma files carry no vocab_size
    EXPECT_EQ(info.n_embd, 256);
    EXPECT_EQ(info.kv_dim, 128);  // one KV head of key_length 128
    EXPECT_EQ(info.n_head_kv, 1);
}

// ---- Bad files ----------------------------------------------------------------------------------------------

void expect_load_error(const fs::path& path, std::initializer_list<const char*> needles, std::string_view arch = {}) {
    try {
        Model::load(registry(), path, {}, arch);
        ADD_FAILURE() << path << " loaded";
    } catch (const Error& e) {
        for (const char* needle : needles) EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

TEST(Gemma3BadInput, MissingTensorsAreNamed) {
    for (const char* name : {"blk.5.post_ffw_norm.weight", "blk.0.post_attention_norm.weight",
                             "blk.3.attn_q_norm.weight", "output_norm.weight"}) {
        expect_load_error(model_with_renamed_tensor("gemma3-tiny", name, std::string("no_") + name + ".gguf"),
                          {(std::string("missing tensor '") + name + "'").c_str()});
    }
}

TEST(Gemma3BadInput, WrongShapesAreNamedWithBothShapes) {
    expect_load_error(model_with_ne0("gemma3-tiny", "blk.0.attn_k_norm.weight", 64, "short_k_norm.gguf"),
                      {"tensor 'blk.0.attn_k_norm.weight' has shape [64], expected [128]"});
    expect_load_error(model_with_ne0("gemma3-tiny", "blk.2.post_ffw_norm.weight", 128, "short_post_ffw.gguf"),
                      {"tensor 'blk.2.post_ffw_norm.weight' has shape [128], expected [256]"});
}

TEST(Gemma3BadInput, MissingKeysAreNamed) {
    expect_load_error(model_with_renamed_key("gemma3-tiny", "gemma3.attention.sliding_window", "no_window.gguf"),
                      {"missing metadata key 'gemma3.attention.sliding_window'"});
    expect_load_error(model_with_renamed_key("gemma3-tiny", "gemma3.attention.layer_norm_rms_epsilon", "no_eps.gguf"),
                      {"missing metadata key 'gemma3.attention.layer_norm_rms_epsilon'"});
}

TEST(Gemma3BadInput, AnotherArchForcedOntoThePluginIsRefused) {
    expect_load_error(qwen_model("qwen3-tiny", CELLM_TYPE_F32), {"general.architecture 'qwen3' is not gemma3"},
                      "gemma3");
}

// ---- Bad calls ----------------------------------------------------------------------------------------------

struct Rejecting {
    static int32_t add_node(void*, const cellm_node*, size_t) { return -1; }
    static void add_output(void*, int32_t) {}
};

TEST(Gemma3BadInput, BuildGraphRefusesBadShapesAndSurvivesARejectingBuilder) {
    const auto model = Model::load(registry(), qwen_model("gemma3-tiny", CELLM_TYPE_F32));
    const cellm_arch_iface* arch = model->arch_plugin().arch();
    const cellm_graph_builder builder{sizeof(cellm_graph_builder), nullptr, Rejecting::add_node, Rejecting::add_output};
    cellm_batch_shape shape{};
    shape.struct_size = sizeof(shape);
    shape.n_tokens = 2;
    shape.n_outputs = 3;  // more outputs than tokens
    shape.n_seqs = shape.max_blocks = shape.block_size = 1;
    StatusPtr bad(arch->build_graph(model->arch_model(), &shape, &builder));
    ASSERT_NE(bad, nullptr);
    EXPECT_EQ(host_api()->status_code(bad.get()), CELLM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(host_api()->status_message(bad.get())).find("bad batch shape"), std::string::npos);

    shape.n_outputs = 1;
    StatusPtr rejected(arch->build_graph(model->arch_model(), &shape, &builder));
    ASSERT_NE(rejected, nullptr);
    EXPECT_EQ(host_api()->status_code(rejected.get()), CELLM_ERR_INTERNAL);
    EXPECT_NE(std::string(host_api()->status_message(rejected.get())).find("'tokens'"), std::string::npos);

    StatusPtr no_builder(arch->build_graph(model->arch_model(), &shape, nullptr));
    ASSERT_NE(no_builder, nullptr);
    EXPECT_EQ(host_api()->status_code(no_builder.get()), CELLM_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace cellm::testing
