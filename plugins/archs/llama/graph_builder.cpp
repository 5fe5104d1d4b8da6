#include "graph_builder.hpp"

#include "model.hpp"
#include "plugin_host.hpp"

namespace cellm::llama {

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

int32_t GraphBuilder::rms_norm(int32_t x, int32_t w, float eps, const std::string& name) {
    cellm_node n = make(CELLM_OP_RMS_NORM, shape(x), {x, w});
    n.fparams[0] = eps;
    return append(n, name);
}

int32_t GraphBuilder::swiglu(int32_t gate, int32_t up, const std::string& name) {
    cellm_node n = make(CELLM_OP_GLU, shape(gate), {gate, up});
    n.iparams[0] = 0;  // SiLU
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
    n.iparams[4] = 0;  // no sliding window
    n.fparams[0] = a.scale;
    n.fparams[1] = 0.0f;  // no soft-cap
    return append(n, name);
}

}  // namespace cellm::llama
