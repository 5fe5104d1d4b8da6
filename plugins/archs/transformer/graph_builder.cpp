#include "graph_builder.hpp"

#include "plugin_host.hpp"

namespace cellm::transformer {

cellm_node GraphBuilder::make(cellm_op op, Shape ne, std::initializer_list<int32_t> src) const {
    cellm_node n{};
    n.op = op;
    n.type = CELLM_TYPE_F32;
    for (size_t d = 0; d < CELLM_MAX_DIMS; ++d) n.ne[d] = ne[d];
    for (int32_t& s : n.src) s = -1;
    size_t i = 0;
    for (int32_t s : src) n.src[i++] = s;
    return n;
}

int32_t GraphBuilder::append(const cellm_node& node, const std::string& name) {
    cellm_node named = node;
    named.name = name.c_str();  // the builder copies it
    const int32_t index = builder_.add_node(builder_.ctx, &named, sizeof(named));
    if (index < 0) throw plugin::Failure(CELLM_ERR_INTERNAL, "graph builder rejected node '" + name + "'");
    if (shapes_.size() <= static_cast<size_t>(index)) shapes_.resize(static_cast<size_t>(index) + 1);
    shapes_[static_cast<size_t>(index)] = Shape{node.ne[0], node.ne[1], node.ne[2], node.ne[3]};
    return index;
}

GraphBuilder::StepInputs GraphBuilder::step_inputs(const cellm_batch_shape& s) {
    const bool ok = s.n_tokens > 0 && s.n_seqs > 0 && s.max_blocks > 0 && s.block_size > 0 && s.n_outputs > 0 &&
                    s.n_outputs <= s.n_tokens;
    if (!ok) {
        throw plugin::Failure(CELLM_ERR_INVALID_ARGUMENT,
                              "bad batch shape: n_tokens " + std::to_string(s.n_tokens) + ", n_seqs " +
                                  std::to_string(s.n_seqs) + ", n_outputs " + std::to_string(s.n_outputs) +
                                  ", max_blocks " + std::to_string(s.max_blocks) + ", block_size " +
                                  std::to_string(s.block_size));
    }
    StepInputs in{};
    in.tokens = input(CELLM_INPUT_TOKENS, s.n_tokens, 1, "tokens");
    in.positions = input(CELLM_INPUT_POSITIONS, s.n_tokens, 1, "positions");
    in.token_seq = input(CELLM_INPUT_TOKEN_SEQ, s.n_tokens, 1, "token_seq");
    in.slots = input(CELLM_INPUT_SLOTS, s.n_tokens, 1, "slots");
    in.block_table = input(CELLM_INPUT_BLOCK_TABLE, s.max_blocks, s.n_seqs, "block_table");
    in.output_rows = input(CELLM_INPUT_OUTPUT_ROWS, s.n_outputs, 1, "output_rows");
    return in;
}

int32_t GraphBuilder::input(cellm_input_kind kind, int64_t ne0, int64_t ne1, const std::string& name) {
    cellm_node n = make(CELLM_OP_INPUT, {ne0, ne1, 1, 1}, {});
    n.type = CELLM_TYPE_I32;
    n.iparams[0] = kind;
    return append(n, name);
}

int32_t GraphBuilder::weight(int32_t tensor) {
    const cellm_tensor_info* t = cellm_model_tensor(&view_, static_cast<uint64_t>(tensor));
    cellm_node n = make(CELLM_OP_WEIGHT, {t->ne[0], t->ne[1], t->ne[2], t->ne[3]}, {});
    n.type = t->type;
    n.iparams[0] = tensor;
    return append(n, std::string(t->name.data, t->name.len));
}

int32_t GraphBuilder::kv_cache(int32_t layer, int32_t value, int64_t kv_dim, const std::string& name) {
    // The pool's slot count and element type are the host's choice: it fills them in when it resolves the leaf.
    cellm_node n = make(CELLM_OP_KV_CACHE, {kv_dim, 0, 1, 1}, {});
    n.iparams[0] = layer;
    n.iparams[1] = value;
    return append(n, name);
}

int32_t GraphBuilder::get_rows(int32_t table, int32_t rows, const std::string& name) {
    return append(make(CELLM_OP_GET_ROWS, {shape(table)[0], shape(rows)[0], 1, 1}, {table, rows}), name);
}

int32_t GraphBuilder::matmul(int32_t w, int32_t x, const std::string& name) {
    return append(make(CELLM_OP_MATMUL, {shape(w)[1], shape(x)[1], 1, 1}, {w, x}), name);
}

int32_t GraphBuilder::linear(int32_t w_tensor, int32_t bias_tensor, int32_t x, const std::string& name) {
    if (bias_tensor == kAbsent) return matmul(weight(w_tensor), x, name);
    return add(matmul(weight(w_tensor), x, name + "_unbiased"), weight(bias_tensor), name);
}

int32_t GraphBuilder::add(int32_t a, int32_t b, const std::string& name) {
    return append(make(CELLM_OP_ADD, shape(a), {a, b}), name);
}

int32_t GraphBuilder::mul(int32_t a, int32_t b, const std::string& name) {
    return append(make(CELLM_OP_MUL, shape(a), {a, b}), name);
}

int32_t GraphBuilder::rms_norm(int32_t x, int32_t w, float eps, const std::string& name) {
    cellm_node n = make(CELLM_OP_RMS_NORM, shape(x), {x, w});
    n.fparams[0] = eps;
    return append(n, name);
}

int32_t GraphBuilder::scale(int32_t x, float factor, const std::string& name) {
    cellm_node n = make(CELLM_OP_SCALE, shape(x), {x});
    n.fparams[0] = factor;
    return append(n, name);
}

int32_t GraphBuilder::tanh(int32_t x, const std::string& name) { return append(make(CELLM_OP_TANH, shape(x), {x}), name); }

int32_t GraphBuilder::silu(int32_t x, const std::string& name) { return append(make(CELLM_OP_SILU, shape(x), {x}), name); }

int32_t GraphBuilder::gelu(int32_t x, const std::string& name) { return append(make(CELLM_OP_GELU, shape(x), {x}), name); }

int32_t GraphBuilder::swiglu(int32_t gate, int32_t up, const std::string& name) {
    cellm_node n = make(CELLM_OP_GLU, shape(gate), {gate, up});
    n.iparams[0] = 0;  // SiLU
    return append(n, name);
}

int32_t GraphBuilder::geglu(int32_t gate, int32_t up, const std::string& name) {
    cellm_node n = make(CELLM_OP_GLU, shape(gate), {gate, up});
    n.iparams[0] = 1;  // GELU (tanh)
    return append(n, name);
}

int32_t GraphBuilder::reshape(int32_t x, Shape ne, const std::string& name) {
    return append(make(CELLM_OP_RESHAPE, ne, {x}), name);
}

int32_t GraphBuilder::rope(int32_t x, int32_t positions, int32_t freq_factors, int32_t n_rot, cellm_rope_mode mode,
                           float freq_base, float freq_scale, const std::string& name) {
    cellm_node n = make(CELLM_OP_ROPE, shape(x), {x, positions, freq_factors});
    n.iparams[0] = n_rot;
    n.iparams[1] = mode;
    n.fparams[0] = freq_base;
    n.fparams[1] = freq_scale;
    return append(n, name);
}

int32_t GraphBuilder::kv_store(int32_t pool, int32_t rows, int32_t slots, const std::string& name) {
    return append(make(CELLM_OP_KV_STORE, shape(pool), {pool, rows, slots}), name);
}

int32_t GraphBuilder::attention(const Attention& a, const std::string& name) {
    const int64_t n_tokens = shape(a.q)[2];
    cellm_node n = make(CELLM_OP_ATTENTION, {int64_t{a.n_head} * a.head_dim, n_tokens, 1, 1},
                        {a.q, a.k_pool, a.v_pool, a.block_table, a.token_seq, a.positions});
    n.iparams[0] = a.n_head;
    n.iparams[1] = a.n_head_kv;
    n.iparams[2] = a.head_dim;
    n.iparams[3] = a.block_size;
    n.iparams[4] = a.window;
    n.fparams[0] = a.scale;
    n.fparams[1] = a.softcap;
    return append(n, name);
}

}  // namespace cellm::transformer
