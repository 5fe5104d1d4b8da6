// GraphBuilder's nodes for the ops ABI 1.3 added (vision encoders, image embeddings in a text step). Apart from
// graph_builder.cpp for the reason graph_builder_abi12.cpp is.
#include "graph_builder.hpp"

#include "plugin_host.hpp"

namespace cellm::transformer {

int32_t GraphBuilder::input_f32(cellm_input_kind kind, Shape ne, const std::string& name) {
    cellm_node n = make(CELLM_OP_INPUT, ne, {});
    n.iparams[0] = kind;
    return append(n, name);
}

int32_t GraphBuilder::layer_norm(int32_t x, int32_t w, int32_t b, float eps, const std::string& name) {
    cellm_node n = make(CELLM_OP_LAYER_NORM, shape(x), {x, w, b});
    n.fparams[0] = eps;
    return append(n, name);
}

int32_t GraphBuilder::patches(int32_t images, int32_t patch_size, const std::string& name) {
    const Shape& in = shape(images);  // [width, height, channels, n_images]
    const int64_t p = patch_size;
    cellm_node n = make(CELLM_OP_PATCHES, {in[2] * p * p, (in[1] / p) * (in[0] / p) * in[3], 1, 1}, {images});
    n.iparams[0] = patch_size;
    return append(n, name);
}

int32_t GraphBuilder::self_attention(int32_t q, int32_t k, int32_t v, int32_t n_head, int32_t n_head_kv,
                                     int32_t head_dim, int32_t group, float scale, const std::string& name) {
    cellm_node n = make(CELLM_OP_SELF_ATTENTION, {int64_t{n_head} * head_dim, shape(q)[2], 1, 1}, {q, k, v});
    n.iparams[0] = n_head;
    n.iparams[1] = n_head_kv;
    n.iparams[2] = head_dim;
    n.iparams[3] = group;
    n.fparams[0] = scale;
    return append(n, name);
}

int32_t GraphBuilder::set_rows(int32_t x, int32_t rows, int32_t at, const std::string& name) {
    return append(make(CELLM_OP_SET_ROWS, shape(x), {x, rows, at}), name);
}

int32_t GraphBuilder::splice_embeddings(int32_t x, const cellm_batch_shape& shape) {
    // A host of ABI 1.2 or older sends a shorter shape, without the field: it never supplies embeddings.
    if (!CELLM_HAS_FIELD(&shape, cellm_batch_shape, n_embd_rows) || shape.n_embd_rows == 0) return x;
    if (shape.n_embd_rows < 0 || shape.n_embd_rows > shape.n_tokens) {
        throw plugin::Failure(CELLM_ERR_INVALID_ARGUMENT, "bad batch shape: n_embd_rows " +
                                                              std::to_string(shape.n_embd_rows) + " of " +
                                                              std::to_string(shape.n_tokens) + " tokens");
    }
    const int32_t rows = input_f32(CELLM_INPUT_EMBEDDINGS, {this->shape(x)[0], shape.n_embd_rows, 1, 1}, "embeddings");
    const int32_t at = input(CELLM_INPUT_EMBEDDING_ROWS, shape.n_embd_rows, 1, "embedding_rows");
    return set_rows(x, rows, at, "inp_embd_spliced");
}

}  // namespace cellm::transformer
