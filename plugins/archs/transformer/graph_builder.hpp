// Node construction for the forward graph: one call per op, each computing its output shape from its
// sources, so the forward reads like the model's equations. Failures throw plugin::Failure.
#pragma once

#include "tensors.hpp"

#include <cellm/arch.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace cellm::transformer {

class GraphBuilder {
public:
    using Shape = std::array<int64_t, CELLM_MAX_DIMS>;

    GraphBuilder(const cellm_graph_builder& builder, const cellm_model_view& view) : builder_(builder), view_(view) {}

    // The per-step inputs of every decoder step (cellm_input_kind), appended in this order.
    struct StepInputs {
        int32_t tokens, positions, token_seq, slots, block_table, output_rows;
    };
    // Throws plugin::Failure (CELLM_ERR_INVALID_ARGUMENT) naming every field of a malformed `shape`.
    StepInputs step_inputs(const cellm_batch_shape& shape);

    // Leaves.
    int32_t input(cellm_input_kind kind, int64_t ne0, int64_t ne1, const std::string& name);
    int32_t weight(int32_t tensor);  // named after the tensor
    int32_t kv_cache(int32_t layer, int32_t value, int64_t kv_dim, const std::string& name);

    // Ops (see graph.h for their meaning).
    int32_t get_rows(int32_t table, int32_t rows, const std::string& name);
    int32_t matmul(int32_t w, int32_t x, const std::string& name);
    // y = W x (+ b when bias is not kAbsent): the weight and bias are tensor indices.
    int32_t linear(int32_t w_tensor, int32_t bias_tensor, int32_t x, const std::string& name);
    int32_t add(int32_t a, int32_t b, const std::string& name);
    int32_t mul(int32_t a, int32_t b, const std::string& name);  // b broadcast
    int32_t rms_norm(int32_t x, int32_t w, float eps, const std::string& name);
    int32_t scale(int32_t x, float factor, const std::string& name);
    int32_t tanh(int32_t x, const std::string& name);
    int32_t silu(int32_t x, const std::string& name);
    int32_t gelu(int32_t x, const std::string& name);  // tanh approximation
    int32_t swiglu(int32_t gate, int32_t up, const std::string& name);
    int32_t geglu(int32_t gate, int32_t up, const std::string& name);  // GELU (tanh approximation) gating
    int32_t reshape(int32_t x, Shape ne, const std::string& name);
    // A copy of x's elements offset + i0 + i1 * strides[0] + i2 * strides[1] + i3 * strides[2] (CELLM_OP_VIEW).
    int32_t view(int32_t x, Shape ne, int32_t offset, std::array<int32_t, 3> strides, const std::string& name);
    int32_t rope(int32_t x, int32_t positions, int32_t freq_factors, int32_t n_rot, cellm_rope_mode mode,
                 float freq_base, float freq_scale, const std::string& name);
    int32_t kv_store(int32_t pool, int32_t rows, int32_t slots, const std::string& name);

    struct Attention {
        int32_t q, k_pool, v_pool, block_table, token_seq, positions;
        int32_t n_head, n_head_kv, head_dim, block_size;
        float scale;
        int32_t window = 0;    // sliding window in positions, 0 = unlimited
        float softcap = 0.0f;  // logit soft-cap, 0 = none
    };
    int32_t attention(const Attention& a, const std::string& name);

    // Recurrent layers (ABI 1.2; graph.h says what each computes).
    int32_t sigmoid(int32_t x, const std::string& name);
    int32_t softplus(int32_t x, const std::string& name);
    // Layer `layer`'s state `which` (0 = convolution, 1 = recurrence), `size` floats per sequence; the host sets
    // the slot count when it resolves the leaf.
    int32_t state(int32_t layer, int32_t which, int64_t size, const std::string& name);
    int32_t ssm_conv(int32_t x, int32_t weights, int32_t state, int32_t token_seq, int32_t state_slots,
                     const std::string& name);
    struct DeltaNet {
        int32_t q, k, v, g, beta, state, token_seq, state_slots;
        int32_t head_order;  // DELTA_NET's iparams[0]
    };
    int32_t delta_net(const DeltaNet& d, const std::string& name);

    // Vision encoders and image embeddings (ABI 1.3; graph.h says what each computes).
    int32_t input_f32(cellm_input_kind kind, Shape ne, const std::string& name);
    int32_t layer_norm(int32_t x, int32_t w, int32_t b, float eps, const std::string& name);  // w, b: nodes or -1
    int32_t patches(int32_t images, int32_t patch_size, const std::string& name);
    int32_t self_attention(int32_t q, int32_t k, int32_t v, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                           int32_t group, float scale, const std::string& name);
    int32_t set_rows(int32_t x, int32_t rows, int32_t at, const std::string& name);
    // The step's token embeddings x with the rows the host supplies in their place (cellm_batch_shape's
    // n_embd_rows; x itself when it supplies none).
    int32_t splice_embeddings(int32_t x, const cellm_batch_shape& shape);

    void output(int32_t node) { builder_.add_output(builder_.ctx, node); }

    const Shape& shape(int32_t node) const { return shapes_.at(static_cast<size_t>(node)); }

private:
    cellm_node make(cellm_op op, Shape ne, std::initializer_list<int32_t> src) const;
    int32_t append(const cellm_node& node, const std::string& name);

    const cellm_graph_builder& builder_;
    const cellm_model_view& view_;
    std::vector<Shape> shapes_;  // by node index, for the ops that derive their shape from a source
};

}  // namespace cellm::transformer
