// Loading hand-built model views through the llama plugin: hyperparameters, tied/untied output, and one clear
// error for each kind of bad input.
#include "plugin_library.hpp"
#include "fake_model.hpp"
#include "plugin/host_api.h"

#include <gtest/gtest.h>

namespace cellm::testing {
namespace {

class LlamaLoad : public ::testing::Test {
protected:
    // Loads `model`; on success returns its info in `info` and destroys the arch model.
    Outcome load(FakeModel& model, cellm_arch_info* info = nullptr) {
        cellm_arch_model* arch_model = nullptr;
        Outcome o = outcome(plugin.arch().load(&model.view(), &arch_model));
        if (o.code == CELLM_OK) {
            EXPECT_NE(arch_model, nullptr);
            if (info != nullptr) {
                info->struct_size = sizeof(cellm_arch_info);
                EXPECT_EQ(outcome(plugin.arch().get_info(arch_model, info)).code, CELLM_OK);
            }
            plugin.arch().destroy(arch_model);
        }
        return o;
    }

    PluginLibrary plugin{"llama"};
};

TEST_F(LlamaLoad, DescribesItself) {
    EXPECT_EQ(plugin.desc().kind, CELLM_PLUGIN_ARCH);
    EXPECT_STREQ(plugin.desc().name, "llama");
    EXPECT_STREQ(plugin.arch().architectures[0], "llama");
    EXPECT_EQ(plugin.entry()(cellm::host_api(), CELLM_ABI_MAJOR + 1, 0), nullptr);
}

TEST_F(LlamaLoad, ReadsHyperparameters) {
    FakeModel model({.n_vocab = 13, .n_embd = 16, .n_layer = 3, .n_ff = 24, .n_head = 4, .n_head_kv = 2, .n_ctx = 96});
    cellm_arch_info info{};
    ASSERT_EQ(load(model, &info).message, "");
    EXPECT_EQ(info.n_layer, 3);
    EXPECT_EQ(info.n_vocab, 13);
    EXPECT_EQ(info.n_embd, 16);
    EXPECT_EQ(info.n_ctx_train, 96);
    EXPECT_EQ(info.kv_dim, 8);  // 2 KV heads of 4
}

TEST_F(LlamaLoad, DefaultsKvHeadsAndVocab) {
    FakeModel model({.n_head_kv = 4});
    model.erase_key("llama.attention.head_count_kv");
    model.erase_key("llama.vocab_size");
    cellm_arch_info info{};
    ASSERT_EQ(load(model, &info).message, "");
    EXPECT_EQ(info.kv_dim, 16);
    EXPECT_EQ(info.n_vocab, 13);  // token_embd rows
}

TEST_F(LlamaLoad, AcceptsTiedAndUntiedOutput) {
    FakeModel tied({.tied = true});
    FakeModel untied({.tied = false});
    EXPECT_EQ(load(tied).code, CELLM_OK);
    EXPECT_EQ(load(untied).code, CELLM_OK);
}

TEST_F(LlamaLoad, MissingTensorIsNamed) {
    FakeModel model({});
    model.erase_tensor("blk.1.ffn_up.weight");
    const Outcome o = load(model);
    EXPECT_EQ(o.code, CELLM_ERR_NOT_FOUND);
    EXPECT_NE(o.message.find("blk.1.ffn_up.weight"), std::string::npos) << o.message;
}

TEST_F(LlamaLoad, WrongShapeNamesExpectedAndFound) {
    FakeModel model({});
    model.set_tensor("blk.0.attn_k.weight", {16, 9});
    const Outcome o = load(model);
    EXPECT_EQ(o.code, CELLM_ERR_CORRUPT);
    EXPECT_NE(o.message.find("blk.0.attn_k.weight"), std::string::npos) << o.message;
    EXPECT_NE(o.message.find("[16, 9]"), std::string::npos) << o.message;
    EXPECT_NE(o.message.find("expected [16, 8]"), std::string::npos) << o.message;
}

TEST_F(LlamaLoad, WrongOutputShapeIsRejected) {
    FakeModel model({.tied = false});
    model.set_tensor("output.weight", {16, 12});
    const Outcome o = load(model);
    EXPECT_EQ(o.code, CELLM_ERR_CORRUPT);
    EXPECT_NE(o.message.find("output.weight"), std::string::npos) << o.message;
}

TEST_F(LlamaLoad, MissingKeyIsNamed) {
    FakeModel model({});
    model.erase_key("llama.block_count");
    const Outcome o = load(model);
    EXPECT_EQ(o.code, CELLM_ERR_NOT_FOUND);
    EXPECT_NE(o.message.find("llama.block_count"), std::string::npos) << o.message;
}

TEST_F(LlamaLoad, WrongKeyTypeIsNamed) {
    FakeModel model({});
    model.set_string("llama.block_count", "two");
    Outcome o = load(model);
    EXPECT_EQ(o.code, CELLM_ERR_CORRUPT);
    EXPECT_NE(o.message.find("llama.block_count"), std::string::npos) << o.message;
    EXPECT_NE(o.message.find("string"), std::string::npos) << o.message;

    FakeModel eps({});
    eps.set_u32("llama.attention.layer_norm_rms_epsilon", 1);
    o = load(eps);
    EXPECT_EQ(o.code, CELLM_ERR_CORRUPT);
    EXPECT_NE(o.message.find("layer_norm_rms_epsilon"), std::string::npos) << o.message;
}

TEST_F(LlamaLoad, RejectsInconsistentHeads) {
    FakeModel model({});
    model.set_u32("llama.attention.head_count_kv", 3);
    const Outcome o = load(model);
    EXPECT_EQ(o.code, CELLM_ERR_CORRUPT);
    EXPECT_NE(o.message.find("head_count_kv"), std::string::npos) << o.message;

    FakeModel zero({});
    zero.set_u32("llama.attention.head_count", 0);
    EXPECT_EQ(load(zero).code, CELLM_ERR_CORRUPT);
}

TEST_F(LlamaLoad, RejectsUnknownRopeScalingAndLayout) {
    FakeModel scaling({});
    scaling.set_string("llama.rope.scaling.type", "yarn");
    Outcome o = load(scaling);
    EXPECT_EQ(o.code, CELLM_ERR_UNSUPPORTED);
    EXPECT_NE(o.message.find("yarn"), std::string::npos) << o.message;

    FakeModel layout({});
    layout.set_string("cellm.rope.layout", "sideways");
    o = load(layout);
    EXPECT_EQ(o.code, CELLM_ERR_CORRUPT);
    EXPECT_NE(o.message.find("cellm.rope.layout"), std::string::npos) << o.message;
}

TEST_F(LlamaLoad, RejectsBadRopeFreqs) {
    FakeModel model({.rope_freqs = true});
    model.set_tensor("rope_freqs.weight", {3});
    const Outcome o = load(model);
    EXPECT_EQ(o.code, CELLM_ERR_CORRUPT);
    EXPECT_NE(o.message.find("rope_freqs.weight"), std::string::npos) << o.message;
}

TEST_F(LlamaLoad, RejectsNullArguments) {
    cellm_arch_model* out = nullptr;
    EXPECT_EQ(outcome(plugin.arch().load(nullptr, &out)).code, CELLM_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace cellm::testing
