// The graph the llama plugin builds for one step, checked through a recording builder.
#include "plugin_library.hpp"
#include "fake_model.hpp"

#include <gtest/gtest.h>

#include <array>
#include <memory>

namespace cellm::testing {
namespace {

using Shape4 = std::array<int64_t, 4>;

Shape4 shape_of(const cellm_node& n) { return {n.ne[0], n.ne[1], n.ne[2], n.ne[3]}; }

class LlamaGraph : public ::testing::Test {
protected:
    // Loads `model` and builds the graph for `shape` into `builder`.
    Outcome build(FakeModel& model, cellm_batch_shape shape) {
        cellm_arch_model* arch_model = nullptr;
        Outcome o = outcome(plugin.arch().load(&model.view(), &arch_model));
        if (o.code != CELLM_OK) return o;
        const std::unique_ptr<cellm_arch_model, void (*)(cellm_arch_model*)> owned(arch_model, plugin.arch().destroy);
        shape.struct_size = sizeof(cellm_batch_shape);
        const cellm_graph_builder table = builder.table();
        return outcome(plugin.arch().build_graph(arch_model, &shape, &table));
    }

    const cellm_node& node(const std::string& name) {
        const int32_t i = builder.find(name);
        if (i < 0) throw std::runtime_error("no node " + name);
        return builder.nodes[static_cast<size_t>(i)];
    }
    const cellm_node& src(const cellm_node& n, int s) { return builder.nodes.at(static_cast<size_t>(n.src[s])); }

    PluginLibrary plugin{"llama"};
    RecordingBuilder builder;
    // 5 tokens of 2 sequences, logits for 2 of them.
    cellm_batch_shape step{0, 5, 2, 2, 3, 16, 0};
};

TEST_F(LlamaGraph, NodesAreInExecutionOrder) {
    FakeModel model({});
    ASSERT_EQ(build(model, step).message, "");
    ASSERT_FALSE(builder.nodes.empty());
    for (size_t i = 0; i < builder.nodes.size(); ++i) {
        for (int32_t s : builder.nodes[i].src) {
            EXPECT_LT(s, static_cast<int32_t>(i)) << builder.nodes[i].name;
        }
        EXPECT_NE(builder.nodes[i].name, nullptr);
    }
}

TEST_F(LlamaGraph, LogitsAreTheOnlyOutput) {
    FakeModel model({});
    ASSERT_EQ(build(model, step).message, "");
    ASSERT_EQ(builder.outputs.size(), 1u);
    const cellm_node& logits = builder.nodes.at(static_cast<size_t>(builder.outputs[0]));
    EXPECT_EQ(logits.op, CELLM_OP_MATMUL);
    EXPECT_EQ(shape_of(logits), (Shape4{13, 2, 1, 1}));
    EXPECT_EQ(logits.type, CELLM_TYPE_F32);
    // The classifier reads only the selected output rows.
    const cellm_node& norm = src(logits, 1);
    EXPECT_EQ(norm.op, CELLM_OP_RMS_NORM);
    const cellm_node& rows = src(norm, 0);
    EXPECT_EQ(rows.op, CELLM_OP_GET_ROWS);
    EXPECT_EQ(src(rows, 1).op, CELLM_OP_INPUT);
    EXPECT_EQ(src(rows, 1).iparams[0], CELLM_INPUT_OUTPUT_ROWS);
}

TEST_F(LlamaGraph, InputsAreI32WithTheirShapes) {
    FakeModel model({});
    ASSERT_EQ(build(model, step).message, "");
    int inputs = 0;
    for (const cellm_node& n : builder.nodes) {
        if (n.op != CELLM_OP_INPUT) continue;
        ++inputs;
        EXPECT_EQ(n.type, CELLM_TYPE_I32);
        const Shape4 expected = n.iparams[0] == CELLM_INPUT_BLOCK_TABLE   ? Shape4{3, 2, 1, 1}
                                : n.iparams[0] == CELLM_INPUT_OUTPUT_ROWS ? Shape4{2, 1, 1, 1}
                                                                          : Shape4{5, 1, 1, 1};
        EXPECT_EQ(shape_of(n), expected) << n.name;
    }
    EXPECT_EQ(inputs, CELLM_INPUT_OUTPUT_ROWS + 1);  // every kind but the recurrent layers' state slots
}

TEST_F(LlamaGraph, WeightLeavesDescribeTheirTensor) {
    FakeModel model({});
    const cellm_model_view& view = model.view();
    ASSERT_EQ(build(model, step).message, "");
    for (const cellm_node& n : builder.nodes) {
        if (n.op != CELLM_OP_WEIGHT) continue;
        ASSERT_GE(n.iparams[0], 0);
        ASSERT_LT(static_cast<uint64_t>(n.iparams[0]), view.n_tensors);
        const cellm_tensor_info* t = cellm_model_tensor(&view, static_cast<uint64_t>(n.iparams[0]));
        EXPECT_EQ(std::string(t->name.data, t->name.len), n.name);
        EXPECT_EQ(n.type, t->type);
        EXPECT_EQ(shape_of(n), (Shape4{t->ne[0], t->ne[1], t->ne[2], t->ne[3]}));
    }
}

TEST_F(LlamaGraph, ProjectionAndAttentionShapes) {
    FakeModel model({});  // 4 heads, 2 KV heads, head_dim 4
    ASSERT_EQ(build(model, step).message, "");
    EXPECT_EQ(shape_of(node("blk.0.attn_q")), (Shape4{16, 5, 1, 1}));
    EXPECT_EQ(shape_of(node("blk.0.attn_k")), (Shape4{8, 5, 1, 1}));
    EXPECT_EQ(shape_of(node("blk.0.attn_v")), (Shape4{8, 5, 1, 1}));
    EXPECT_EQ(shape_of(node("blk.0.q_rope")), (Shape4{4, 4, 5, 1}));
    EXPECT_EQ(shape_of(node("blk.0.k_rope")), (Shape4{4, 2, 5, 1}));
    EXPECT_EQ(shape_of(node("blk.0.k_rows")), (Shape4{8, 5, 1, 1}));
    EXPECT_EQ(shape_of(node("blk.1.attn")), (Shape4{16, 5, 1, 1}));
    EXPECT_EQ(shape_of(node("blk.1.ffn_gate")), (Shape4{24, 5, 1, 1}));
    EXPECT_EQ(shape_of(node("blk.1.ffn_residual")), (Shape4{16, 5, 1, 1}));

    const cellm_node& rope = node("blk.0.q_rope");
    EXPECT_EQ(rope.iparams[0], 4);
    EXPECT_EQ(rope.iparams[1], CELLM_ROPE_ADJACENT);
    EXPECT_FLOAT_EQ(rope.fparams[0], 10000.0f);
    EXPECT_FLOAT_EQ(rope.fparams[1], 1.0f);
    EXPECT_EQ(rope.src[2], -1);  // no rope_freqs
}

TEST_F(LlamaGraph, AttentionReadsThisLayersStoredCache) {
    FakeModel model({});
    ASSERT_EQ(build(model, step).message, "");
    for (int layer = 0; layer < 2; ++layer) {
        const std::string blk = "blk." + std::to_string(layer) + ".";
        const cellm_node& attn = node(blk + "attn");
        EXPECT_EQ(attn.op, CELLM_OP_ATTENTION);
        EXPECT_EQ(builder.nodes.at(static_cast<size_t>(attn.src[0])).name, blk + "q_rope");
        for (int kv = 0; kv < 2; ++kv) {
            const cellm_node& store = src(attn, 1 + kv);
            EXPECT_EQ(store.op, CELLM_OP_KV_STORE);
            EXPECT_EQ(src(store, 0).op, CELLM_OP_KV_CACHE);
            EXPECT_EQ(src(store, 0).iparams[0], layer);
            EXPECT_EQ(src(store, 0).iparams[1], kv);
            EXPECT_EQ(src(store, 0).ne[0], 8);
            EXPECT_EQ(builder.nodes.at(static_cast<size_t>(store.src[1])).name,
                      blk + (kv == 0 ? "k_rows" : "attn_v"));
            EXPECT_EQ(src(store, 2).iparams[0], CELLM_INPUT_SLOTS);
        }
        EXPECT_EQ(src(attn, 3).iparams[0], CELLM_INPUT_BLOCK_TABLE);
        EXPECT_EQ(src(attn, 4).iparams[0], CELLM_INPUT_TOKEN_SEQ);
        EXPECT_EQ(src(attn, 5).iparams[0], CELLM_INPUT_POSITIONS);
        EXPECT_EQ(attn.iparams[0], 4);   // n_head
        EXPECT_EQ(attn.iparams[1], 2);   // n_head_kv
        EXPECT_EQ(attn.iparams[2], 4);   // head_dim
        EXPECT_EQ(attn.iparams[3], 16);  // block_size
        EXPECT_EQ(attn.iparams[4], 0);   // no window
        EXPECT_FLOAT_EQ(attn.fparams[0], 0.5f);
    }
}

TEST_F(LlamaGraph, OneKvStorePerLayerAndKind) {
    FakeModel model({.n_layer = 3});
    ASSERT_EQ(build(model, step).message, "");
    int stores[3][2] = {};
    for (const cellm_node& n : builder.nodes) {
        if (n.op == CELLM_OP_KV_STORE) ++stores[src(n, 0).iparams[0]][src(n, 0).iparams[1]];
    }
    for (auto& layer : stores) {
        EXPECT_EQ(layer[0], 1);
        EXPECT_EQ(layer[1], 1);
    }
}

TEST_F(LlamaGraph, ClassifierUsesTokenEmbeddingWhenTied) {
    FakeModel tied({.tied = true});
    ASSERT_EQ(build(tied, step).message, "");
    const cellm_node& logits = builder.nodes.at(static_cast<size_t>(builder.outputs.at(0)));
    EXPECT_EQ(src(logits, 0).iparams[0], tied.tensor_index("token_embd.weight"));

    FakeModel untied({.tied = false});
    builder = RecordingBuilder{};
    ASSERT_EQ(build(untied, step).message, "");
    const cellm_node& logits2 = builder.nodes.at(static_cast<size_t>(builder.outputs.at(0)));
    EXPECT_EQ(src(logits2, 0).iparams[0], untied.tensor_index("output.weight"));
}

TEST_F(LlamaGraph, RopeFollowsTheFile) {
    FakeModel model({.rope_freqs = true});
    model.set_string("cellm.rope.layout", "halves");
    model.set_string("llama.rope.scaling.type", "linear");
    model.set_f32("llama.rope.scaling.factor", 4.0f);
    ASSERT_EQ(build(model, step).message, "");
    const cellm_node& rope = node("blk.1.k_rope");
    EXPECT_EQ(rope.iparams[1], CELLM_ROPE_HALVES);
    EXPECT_FLOAT_EQ(rope.fparams[1], 0.25f);
    ASSERT_GE(rope.src[2], 0);
    EXPECT_EQ(src(rope, 2).op, CELLM_OP_WEIGHT);
    EXPECT_EQ(src(rope, 2).iparams[0], model.tensor_index("rope_freqs.weight"));
}

TEST_F(LlamaGraph, BiasesAreAddedWhenPresent) {
    FakeModel model({});
    model.set_tensor("blk.0.attn_q.bias", {16});
    ASSERT_EQ(build(model, step).message, "");
    const cellm_node& biased = node("blk.0.attn_q");
    EXPECT_EQ(biased.op, CELLM_OP_ADD);
    EXPECT_EQ(src(biased, 0).op, CELLM_OP_MATMUL);
    EXPECT_EQ(src(biased, 1).iparams[0], model.tensor_index("blk.0.attn_q.bias"));
    EXPECT_EQ(node("blk.0.attn_k").op, CELLM_OP_MATMUL);
}

TEST_F(LlamaGraph, RejectsMalformedShape) {
    FakeModel model({});
    step.n_outputs = 6;  // more than n_tokens
    const Outcome o = build(model, step);
    EXPECT_EQ(o.code, CELLM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(o.message.find("n_outputs 6"), std::string::npos) << o.message;
}

}  // namespace
}  // namespace cellm::testing
