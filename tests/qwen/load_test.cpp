// The qwen plugin as the host finds and loads it: which general.architecture values reach it, what a loaded
// model reports, that every kind of bad file or call ends in one clear error naming the problem (never a
// crash), and cellm-host's plugins, inspect and run on synthetic Qwen models.
#include "qwen_models.h"
#include "test_support.h"

#include "error.h"
#include "plugin/host_api.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace fs = std::filesystem;

namespace cellm::testing {
namespace {

// ---- Discovery and loading ----------------------------------------------------------------------------------

TEST(QwenPlugin, ServesQwen2AndQwen3WhileLlamaFilesStayWithLlama) {
    const Plugin* qwen = registry().find(CELLM_PLUGIN_ARCH, "qwen");
    ASSERT_NE(qwen, nullptr) << "cellm-qwen.so was not built";
    EXPECT_EQ(registry().find_arch_for("qwen2"), qwen);
    EXPECT_EQ(registry().find_arch_for("qwen3"), qwen);
    const Plugin* llama = registry().find_arch_for("llama");
    ASSERT_NE(llama, nullptr);
    EXPECT_STREQ(llama->name(), "llama");
    EXPECT_STREQ(Model::load(registry(), qwen_model("tiny", CELLM_TYPE_F32))->arch_plugin().name(), "llama");
}

TEST(QwenPlugin, ReportsTheShapeOfEachArch) {
    // qwen2-tiny: 4 query and 2 KV heads of 64; qwen3-tiny: the same heads 128 wide (key_length).
    for (const auto& [preset, kv_dim] : {std::pair{"qwen2-tiny", 128}, std::pair{"qwen3-tiny", 256}}) {
        const auto model = Model::load(registry(), qwen_model(preset, CELLM_TYPE_F32));
        EXPECT_STREQ(model->arch_plugin().name(), "qwen") << preset;
        const cellm_arch_info& info = model->info();
        EXPECT_EQ(info.n_layer, 2) << preset;
        EXPECT_EQ(info.n_vocab, 512) << preset;  // token_embd's rows: Qwen files carry no vocab_size
        EXPECT_EQ(info.n_embd, 256) << preset;
        EXPECT_EQ(info.n_ctx_train, 256) << preset;
        EXPECT_EQ(info.kv_dim, kv_dim) << preset;
    }
}

// ---- Bad files ----------------------------------------------------------------------------------------------

// Model::load's error for `path`, which must name every one of `needles`.
void expect_load_error(const fs::path& path, std::initializer_list<const char*> needles, std::string_view arch = {}) {
    try {
        Model::load(registry(), path, {}, arch);
        ADD_FAILURE() << path << " loaded";
    } catch (const Error& e) {
        for (const char* needle : needles) EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

TEST(QwenBadInput, MissingTensorsAreNamed) {
    expect_load_error(model_with_renamed_tensor("qwen3-tiny", "blk.1.attn_k_norm.weight", "no_k_norm.gguf"),
                      {"missing tensor 'blk.1.attn_k_norm.weight'"});
    expect_load_error(model_with_renamed_tensor("qwen2-tiny", "blk.0.attn_v.bias", "no_v_bias.gguf"),
                      {"missing tensor 'blk.0.attn_v.bias'"});
    expect_load_error(model_with_renamed_tensor("qwen2-tiny", "output_norm.weight", "no_output_norm.gguf"),
                      {"missing tensor 'output_norm.weight'"});
}

TEST(QwenBadInput, WrongShapesAreNamedWithBothShapes) {
    expect_load_error(model_with_ne0("qwen3-tiny", "blk.0.attn_q_norm.weight", 64, "short_q_norm.gguf"),
                      {"tensor 'blk.0.attn_q_norm.weight' has shape [64], expected [128]"});
    expect_load_error(model_with_ne0("qwen2-tiny", "blk.1.attn_k.bias", 64, "short_k_bias.gguf"),
                      {"tensor 'blk.1.attn_k.bias' has shape [64], expected [128]"});
}

TEST(QwenBadInput, MissingKeysAreNamed) {
    expect_load_error(model_with_renamed_key("qwen3-tiny", "qwen3.block_count", "no_block_count.gguf"),
                      {"missing metadata key 'qwen3.block_count'"});
    expect_load_error(model_with_renamed_key("qwen2-tiny", "qwen2.attention.layer_norm_rms_epsilon", "no_eps.gguf"),
                      {"qwen2.attention.layer_norm_rms_epsilon"});
}

TEST(QwenBadInput, AnotherArchForcedOntoThePluginIsRefused) {
    expect_load_error(qwen_model("tiny", CELLM_TYPE_F32), {"general.architecture 'llama' is not qwen2 or qwen3"},
                      "qwen");
}

// ---- Bad calls ----------------------------------------------------------------------------------------------

struct Rejecting {
    static int32_t add_node(void*, const cellm_node*, size_t) { return -1; }
    static void add_output(void*, int32_t) {}
};

TEST(QwenBadInput, BuildGraphRefusesBadShapesAndSurvivesARejectingBuilder) {
    const auto model = Model::load(registry(), qwen_model("qwen3-tiny", CELLM_TYPE_F32));
    const cellm_arch_iface* arch = model->arch_plugin().arch();
    const cellm_graph_builder builder{sizeof(cellm_graph_builder), nullptr, Rejecting::add_node, Rejecting::add_output};
    cellm_batch_shape shape{};
    shape.struct_size = sizeof(shape);
    shape.n_tokens = 0;  // nothing to run
    shape.n_seqs = shape.max_blocks = shape.block_size = shape.n_outputs = 1;
    StatusPtr bad(arch->build_graph(model->arch_model(), &shape, &builder));
    ASSERT_NE(bad, nullptr);
    EXPECT_EQ(host_api()->status_code(bad.get()), CELLM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(host_api()->status_message(bad.get())).find("bad batch shape"), std::string::npos);

    shape.n_tokens = 1;
    StatusPtr rejected(arch->build_graph(model->arch_model(), &shape, &builder));
    ASSERT_NE(rejected, nullptr);
    EXPECT_EQ(host_api()->status_code(rejected.get()), CELLM_ERR_INTERNAL);
    EXPECT_NE(std::string(host_api()->status_message(rejected.get())).find("'tokens'"), std::string::npos);

    StatusPtr no_shape(arch->build_graph(model->arch_model(), nullptr, &builder));
    ASSERT_NE(no_shape, nullptr);
    EXPECT_EQ(host_api()->status_code(no_shape.get()), CELLM_ERR_INVALID_ARGUMENT);
}

// ---- cellm-host ---------------------------------------------------------------------------------------------

TEST(QwenCli, PluginsInspectAndRun) {
    const CommandResult plugins = run_host("plugins");
    ASSERT_EQ(plugins.exit_code, 0) << plugins.err;
    EXPECT_NE(plugins.out.find("arch     qwen"), std::string::npos) << plugins.out;

    for (const std::string preset : {"qwen2-tiny", "qwen3-tiny"}) {
        const std::string arch = preset.substr(0, 5);
        const fs::path model = qwen_model(preset, CELLM_TYPE_Q8_0);
        const CommandResult inspect = run_host("inspect " + shell_quote(model.string()));
        ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
        for (const std::string& expected : {std::string("arch:    qwen"), arch + ".block_count", std::string("Q8_0")}) {
            EXPECT_NE(inspect.out.find(expected), std::string::npos) << expected << " in " << inspect.out;
        }

        const fs::path manifest = temp_dir() / (preset + ".toml");
        std::ofstream(manifest) << "[model]\npath = \"" << model.string() << "\"\n[backend]\nname = \"openblas\"\n"
                                << "[context]\nlength = 64\n[sampling]\ntemperature = 0\nmax_tokens = 4\n";
        const CommandResult run =
            run_host("run --manifest " + shell_quote(manifest.string()) + " --prompt 'the cat' --raw --json");
        ASSERT_EQ(run.exit_code, 0) << run.err;
        EXPECT_NE(run.out.find("\"prompt_tokens\""), std::string::npos) << run.out;
    }
}

}  // namespace
}  // namespace cellm::testing
