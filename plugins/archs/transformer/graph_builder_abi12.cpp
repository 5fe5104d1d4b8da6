// GraphBuilder's nodes for the ops ABI 1.2 added (VIEW and the recurrent layers' ops). Apart from
// graph_builder.cpp, which tests/abi10 also builds against the frozen ABI 1.0 headers, where these ops do not exist.
#include "graph_builder.hpp"

namespace cellm::transformer {

int32_t GraphBuilder::view(int32_t x, Shape ne, int32_t offset, std::array<int32_t, 3> strides,
                           const std::string& name) {
    cellm_node n = make(CELLM_OP_VIEW, ne, {x});
    n.iparams[0] = offset;
    for (size_t d = 0; d < strides.size(); ++d) n.iparams[d + 1] = strides[d];
    return append(n, name);
}

int32_t GraphBuilder::sigmoid(int32_t x, const std::string& name) {
    return append(make(CELLM_OP_SIGMOID, shape(x), {x}), name);
}

int32_t GraphBuilder::softplus(int32_t x, const std::string& name) {
    return append(make(CELLM_OP_SOFTPLUS, shape(x), {x}), name);
}

int32_t GraphBuilder::state(int32_t layer, int32_t which, int64_t size, const std::string& name) {
    cellm_node n = make(CELLM_OP_STATE, {size, 0, 1, 1}, {});
    n.iparams[0] = layer;
    n.iparams[1] = which;
    return append(n, name);
}

int32_t GraphBuilder::ssm_conv(int32_t x, int32_t weights, int32_t state, int32_t token_seq, int32_t state_slots,
                               const std::string& name) {
    return append(make(CELLM_OP_SSM_CONV, shape(x), {x, weights, state, token_seq, state_slots}), name);
}

int32_t GraphBuilder::delta_net(const DeltaNet& d, const std::string& name) {
    cellm_node n = make(CELLM_OP_DELTA_NET, shape(d.v), {d.q, d.k, d.v, d.g, d.beta, d.state, d.token_seq, d.state_slots});
    n.iparams[0] = d.head_order;
    return append(n, name);
}

}  // namespace cellm::transformer
