#include "engine/step_graph.h"

#include "error.h"
#include "plugin/host_api.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <map>

namespace cellm {

namespace {
bool f32_input(int32_t kind) { return kind == CELLM_INPUT_PIXELS || kind == CELLM_INPUT_EMBEDDINGS; }
}  // namespace

// The builder the arch appends nodes through; checks each node's sources as it arrives. For an I8 or coded cache
// it also adds each pool's scale leaf and the sources that name them (graph.h), and for a coded cache the rotation
// around the pools (graph.h, "Coded pools"), all of which the arch never sees. For a calibration graph it notes
// the nodes whose values kv/kv_calibration.h measures.
struct GraphBuilderContext {
    StepGraph* graph;
    const std::vector<cellm_arch_layer_info>* layers;
    cellm_dtype kv_type;              // the KV cache's type; F32 for a graph without one
    bool probing = false;             // note the probes (StepGraph::Probe)
    std::vector<int32_t> scales_of;   // per node: the scale leaf of the I8 or coded pool it is or writes, else -1
    std::vector<std::array<int32_t, 2>> pool_of;  // per node: (layer, kind) of the pool it is or writes, else -1s
    std::map<std::pair<int32_t, int32_t>, int32_t> constants;  // (layer, kind 4..7) -> its leaf
    std::string failure;              // why the build went wrong, empty while it goes well

    bool scaled() const { return kv_type == CELLM_TYPE_I8 || coded(); }
    bool coded() const { return kv_type == CELLM_TYPE_R4 || kv_type == CELLM_TYPE_R3; }

    static int32_t add_node(void* ctx, const cellm_node* node, size_t node_size) {
        auto* self = static_cast<GraphBuilderContext*>(ctx);
        try {
            const auto n = static_cast<int32_t>(self->graph->nodes_.size());
            cellm_node copy{};
            std::memcpy(&copy, node, std::min(node_size, sizeof(cellm_node)));
            for (int32_t s : copy.src) {
                if (s < -1 || s >= n) {
                    self->failure = "node " + std::to_string(n) + " refers to node " + std::to_string(s) +
                                    ", which is not an earlier node";
                    return -1;
                }
            }
            if (copy.op == CELLM_OP_KV_CACHE && copy.iparams[1] != 0 && copy.iparams[1] != 1) {
                self->failure = "node " + std::to_string(n) + " is a KV cache leaf of kind " +
                                std::to_string(copy.iparams[1]) + " (expected 0 for K or 1 for V)";
                return -1;
            }
            return self->add_for_pools(copy);
        } catch (...) {
            self->failure = "out of memory while building the graph";
            return -1;
        }
    }

    int32_t append(const cellm_node& node, int32_t scales) {
        auto& g = *graph;
        g.nodes_.push_back(node);
        scales_of.push_back(scales);
        std::array<int32_t, 2> pool{-1, -1};
        if (node.op == CELLM_OP_KV_CACHE) pool = {node.iparams[0], node.iparams[1]};
        if (node.op == CELLM_OP_KV_STORE && node.src[0] >= 0) pool = pool_of[static_cast<size_t>(node.src[0])];
        pool_of.push_back(pool);
        if (node.name != nullptr) {
            g.names_.emplace_back(node.name);
            g.nodes_.back().name = g.names_.back().c_str();
        }
        return static_cast<int32_t>(g.nodes_.size() - 1);
    }

    // A node of the host's own: F32 of shape ne.
    int32_t host_node(cellm_op op, std::array<int64_t, 4> ne, std::initializer_list<int32_t> src) {
        cellm_node node{};
        node.op = op;
        node.type = CELLM_TYPE_F32;
        std::copy(ne.begin(), ne.end(), node.ne);
        std::fill(std::begin(node.src), std::end(node.src), -1);
        std::copy(src.begin(), src.end(), node.src);
        return append(node, -1);
    }

    // The leaf of constant `kind` (4..7) of `layer`'s pools, added once.
    int32_t constant(int32_t layer, int32_t kind) {
        if (auto it = constants.find({layer, kind}); it != constants.end()) return it->second;
        cellm_node leaf{};
        leaf.op = CELLM_OP_KV_CACHE;
        std::fill(std::begin(leaf.src), std::end(leaf.src), -1);
        leaf.iparams[0] = layer;
        leaf.iparams[1] = kind;
        return constants[{layer, kind}] = append(leaf, -1);
    }

    // Runs of head_dim values of x rotated (or rotated back) with `layer`'s signs.
    int32_t rotate(int32_t x, int32_t layer, int64_t head_dim, bool inverse) {
        const int32_t signs = constant(layer, 7);
        const cellm_node& in = graph->nodes_[static_cast<size_t>(x)];
        const int32_t out = host_node(CELLM_OP_HADAMARD, {in.ne[0], in.ne[1], in.ne[2], in.ne[3]}, {x, signs});
        cellm_node& h = graph->nodes_[static_cast<size_t>(out)];
        h.iparams[0] = static_cast<int32_t>(head_dim);
        h.iparams[1] = inverse ? 1 : 0;
        h.fparams[0] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
        return out;
    }

    // Sets src[k] of `node` to the scale leaf behind `of` (-1 when there is none: the backend refuses the graph).
    bool wire(cellm_node& node, int k, int32_t of) {
        if (node.src[k] != -1) {
            failure = "node " + std::to_string(graph->nodes_.size()) + " sets src[" + std::to_string(k) +
                      "], which the host fills for an I8 or coded KV cache";
            return false;
        }
        node.src[k] = of >= 0 ? scales_of[static_cast<size_t>(of)] : -1;
        return true;
    }

    int32_t layer_of(int32_t pool) const { return pool >= 0 ? pool_of[static_cast<size_t>(pool)][0] : -1; }

    int32_t add_for_pools(cellm_node node) {
        if (probing) note_probe(node);
        if (!scaled()) return append(node, -1);
        switch (node.op) {
        case CELLM_OP_KV_CACHE: {
            cellm_node scales{};
            scales.op = CELLM_OP_KV_CACHE;
            std::fill(std::begin(scales.src), std::end(scales.src), -1);
            scales.iparams[0] = node.iparams[0];
            scales.iparams[1] = node.iparams[1] + 2;
            const std::string name = node.name != nullptr ? std::string(node.name) + ".scales" : std::string();
            scales.name = node.name != nullptr ? name.c_str() : nullptr;
            const int32_t leaf = append(scales, -1);
            return append(node, leaf);  // the arch gets the pool it asked for
        }
        case CELLM_OP_KV_STORE:
            if (coded() && node.src[0] >= 0 && node.src[1] >= 0) node.src[1] = code_input(node);
            if (!wire(node, 3, node.src[0])) return -1;
            return append(node, node.src[3]);
        case CELLM_OP_ATTENTION: {
            const bool rotated = coded() && node.src[0] >= 0 && layer_of(node.src[1]) >= 0 && layer_of(node.src[2]) >= 0;
            if (rotated) node.src[0] = rotated_query(node);
            if (!wire(node, 6, node.src[1]) || !wire(node, 7, node.src[2])) return -1;
            const int32_t out = append(node, -1);
            // The weighted sum of rotated values, rotated back: R^T is linear, so once per output row.
            return rotated ? rotate(out, layer_of(node.src[2]), node.iparams[2], true) : out;
        }
        default:
            return append(node, -1);
        }
    }

    // What a coded pool stores for the rows of a KV_STORE: keys shifted and scaled per channel, then rotated;
    // values rotated.
    int32_t code_input(const cellm_node& store) {
        const std::array<int32_t, 2> pool = pool_of[static_cast<size_t>(store.src[0])];
        const cellm_node& rows = graph->nodes_[static_cast<size_t>(store.src[1])];
        const std::array<int64_t, 4> ne{rows.ne[0], rows.ne[1], rows.ne[2], rows.ne[3]};
        int32_t x = store.src[1];
        if (pool[0] < 0) return x;  // not a pool leaf: the backend's check names it
        if (pool[1] == 0) {
            x = host_node(CELLM_OP_ADD, ne, {x, constant(pool[0], 4)});
            x = host_node(CELLM_OP_MUL, ne, {x, constant(pool[0], 5)});
        }
        return rotate(x, pool[0], head_dim_of(pool[0]), false);
    }

    // q divided by the keys' channel scales (a KV head's factor for each of its query heads), then rotated.
    int32_t rotated_query(const cellm_node& attention) {
        const int32_t layer = layer_of(attention.src[1]);
        const cellm_node& q = graph->nodes_[static_cast<size_t>(attention.src[0])];
        const int64_t head_dim = q.ne[0], n_head = q.ne[1], n_tokens = q.ne[2], n_kv = attention.iparams[1];
        if (n_kv <= 0 || n_head % n_kv != 0) return attention.src[0];  // the backend's check names it
        const std::array<int64_t, 4> grouped{head_dim, n_head / n_kv, n_kv, n_tokens};
        int32_t x = host_node(CELLM_OP_RESHAPE, grouped, {attention.src[0]});
        x = host_node(CELLM_OP_MUL, grouped, {x, constant(layer, 6)});
        x = host_node(CELLM_OP_RESHAPE, {head_dim, n_head, n_tokens, 1}, {x});
        return rotate(x, layer, head_dim, false);
    }

    int64_t head_dim_of(int32_t layer) const {
        if (layer < 0 || static_cast<size_t>(layer) >= layers->size()) return 0;  // prepare() names the bad leaf
        const cellm_arch_layer_info& info = (*layers)[static_cast<size_t>(layer)];
        return info.n_head_kv > 0 ? info.kv_dim / info.n_head_kv : 0;
    }

    // Calibration (kv/kv_calibration.h): each attention's query input and each K store's new rows.
    void note_probe(const cellm_node& node) {
        if (node.op == CELLM_OP_ATTENTION && node.src[0] >= 0 && layer_of(node.src[1]) >= 0) {
            graph->probes_.push_back({node.src[0], layer_of(node.src[1]), true, node.iparams[1], node.fparams[1]});
        } else if (node.op == CELLM_OP_KV_STORE && node.src[0] >= 0 && node.src[1] >= 0 &&
                   pool_of[static_cast<size_t>(node.src[0])][1] == 0) {
            graph->probes_.push_back({node.src[1], layer_of(node.src[0]), false, 0, 0.0f});
        }
    }

    static void add_output(void* ctx, int32_t node) {
        auto* self = static_cast<GraphBuilderContext*>(ctx);
        try {
            self->graph->outputs_.push_back(node);
        } catch (...) {
            self->failure = "out of memory while building the graph";
        }
    }
};

StepGraph::StepGraph(const Model& model, Backend& backend, const WeightStore& weights, const KvCache& kv,
                     const StatePool& states, const cellm_batch_shape& shape, bool probes)
    : backend_(&backend), probing_(probes) {
    const cellm_arch_iface* iface = model.arch_plugin().arch();
    prepare(model, weights, &kv, &states, "logits", {model.info().n_vocab, shape.n_outputs},
            [&](const cellm_graph_builder& b) { return iface->build_graph(model.arch_model(), &shape, &b); });
}

StepGraph::StepGraph(const Model& model, Backend& backend, const WeightStore& weights, const cellm_vision_shape& shape)
    : backend_(&backend) {
    const cellm_arch_iface* iface = model.arch_plugin().arch();
    const cellm_arch_vision_info& v = model.vision().value();
    prepare(model, weights, nullptr, nullptr, "image embeddings",
            {v.n_embd, int64_t{v.tokens_per_image} * shape.n_images},
            [&](const cellm_graph_builder& b) { return iface->build_vision_graph(model.arch_model(), &shape, &b); });
}

template <class Build>
void StepGraph::prepare(const Model& model, const WeightStore& weights, const KvCache* kv, const StatePool* states,
                        const std::string& what, std::array<int64_t, 2> out_ne, Build build) {
    Backend& backend = *backend_;
    GraphBuilderContext ctx{this, &model.layers(), kv != nullptr ? kv->type() : CELLM_TYPE_F32, probing_, {}, {}, {}, {}};
    cellm_graph_builder builder{sizeof(cellm_graph_builder), &ctx, GraphBuilderContext::add_node,
                                GraphBuilderContext::add_output};
    const std::string arch = model.arch_plugin().name();
    check(build(builder), "arch '" + arch + "'");
    if (!ctx.failure.empty()) throw Error("arch '" + arch + "' built a malformed graph: " + ctx.failure);
    if (outputs_.size() != 1) throw Error("arch '" + arch + "' must declare exactly one graph output (the " + what + ")");
    // The output is copied into a buffer of exactly this shape, so the host checks it rather than trusting
    // every backend to.
    if (outputs_[0] < 0 || outputs_[0] >= static_cast<int32_t>(nodes_.size())) {
        throw Error("arch '" + arch + "' declared output node " + std::to_string(outputs_[0]) + ", which does not exist");
    }
    for (const Probe& p : probes_) outputs_.push_back(p.node);
    const cellm_node& out = nodes_[static_cast<size_t>(outputs_[0])];
    if (out.type != CELLM_TYPE_F32 || out.ne[0] != out_ne[0] || out.ne[1] != out_ne[1] || out.ne[2] != 1 || out.ne[3] != 1) {
        throw Error("arch '" + arch + "' declared " + what + " of shape [" + std::to_string(out.ne[0]) + ", " +
                    std::to_string(out.ne[1]) + "], expected F32 [" + std::to_string(out_ne[0]) + ", " +
                    std::to_string(out_ne[1]) + "]");
    }
    const cellm_model_view& view = model.file().view();
    for (size_t i = 0; i < nodes_.size(); ++i) {
        cellm_node& node = nodes_[i];
        switch (node.op) {
        case CELLM_OP_WEIGHT: {
            const int32_t index = node.iparams[0];
            if (index < 0 || static_cast<uint64_t>(index) >= view.n_tensors) {
                throw Error("arch '" + arch + "' refers to tensor #" + std::to_string(index) + ", which does not exist");
            }
            node.tensor = weights.tensor(static_cast<uint64_t>(index));
            node.type = node.tensor.type;
            for (int d = 0; d < CELLM_MAX_DIMS; ++d) node.ne[d] = node.tensor.ne[d];
            if (!backend.iface().supports_type(backend.handle(), node.type)) {
                throw Error(std::string("backend '") + backend.name() + "' does not support weight type " +
                            dtype_name(node.type) + " (tensor '" +
                            std::string(to_string_view(cellm_model_tensor(&view, static_cast<uint64_t>(index))->name)) + "')");
            }
            break;
        }
        case CELLM_OP_KV_CACHE:
            if (kv == nullptr) throw Error("arch '" + arch + "' refers to the KV cache in its vision graph");
            // The builder admitted only kinds 0 and 1 from the arch; 2 and 3 are the scale leaves it added.
            if (node.iparams[0] < 0 || node.iparams[0] >= model.info().n_layer) {
                throw Error("arch '" + arch + "' refers to a KV cache layer that does not exist");
            }
            node.tensor = kv->tensor(node.iparams[0], node.iparams[1]);
            node.type = node.tensor.type;
            for (int d = 0; d < CELLM_MAX_DIMS; ++d) node.ne[d] = node.tensor.ne[d];
            break;
        case CELLM_OP_STATE:
            if (states == nullptr) throw Error("arch '" + arch + "' refers to a recurrent state in its vision graph");
            if (node.iparams[0] < 0 || node.iparams[0] >= model.info().n_layer || node.iparams[1] < 0 ||
                node.iparams[1] > 1 ||
                model.layers()[static_cast<size_t>(node.iparams[0])].state_size[node.iparams[1]] == 0) {
                throw Error("arch '" + arch + "' refers to recurrent state " + std::to_string(node.iparams[1]) +
                            " of layer " + std::to_string(node.iparams[0]) + ", which it did not report");
            }
            node.tensor = states->tensor(node.iparams[0], node.iparams[1]);
            node.type = node.tensor.type;
            for (int d = 0; d < CELLM_MAX_DIMS; ++d) node.ne[d] = node.tensor.ne[d];
            break;
        case CELLM_OP_KV_STORE:
            // The arch cannot know the pool's size: the store aliases its pool, so it takes the pool's shape.
            if (node.src[0] >= 0) {
                const cellm_node& pool = nodes_[static_cast<size_t>(node.src[0])];
                node.type = pool.type;
                for (int d = 0; d < CELLM_MAX_DIMS; ++d) node.ne[d] = pool.ne[d];
            }
            break;
        case CELLM_OP_INPUT:
            if (node.iparams[0] < 0 || node.iparams[0] >= CELLM_INPUT_COUNT) {
                throw Error("arch '" + arch + "' uses an unknown input kind " + std::to_string(node.iparams[0]));
            }
            if (node.type != (f32_input(node.iparams[0]) ? CELLM_TYPE_F32 : CELLM_TYPE_I32)) {
                throw Error("arch '" + arch + "' declared input kind " + std::to_string(node.iparams[0]) +
                            " with element type " + std::to_string(node.type) + " (graph.h gives each kind its type)");
            }
            input_nodes_.emplace_back(static_cast<int32_t>(i), static_cast<cellm_input_kind>(node.iparams[0]));
            break;
        default:
            break;
        }
    }

    cellm_graph graph{};
    graph.struct_size = sizeof(graph);
    graph.node_size = sizeof(cellm_node);
    graph.n_nodes = static_cast<int32_t>(nodes_.size());
    graph.nodes = nodes_.data();
    graph.n_outputs = static_cast<int32_t>(outputs_.size());
    graph.outputs = outputs_.data();
    check(backend.iface().graph_prepare(backend.handle(), &graph, &plan_), std::string("backend '") + backend.name() + "'");
}

StepGraph::~StepGraph() {
    if (plan_ != nullptr) backend_->iface().plan_free(backend_->handle(), plan_);
}

void StepGraph::execute(const Inputs& inputs, float* out_data, size_t n_out, std::vector<std::vector<float>>* probe_values) {
    std::vector<cellm_input_binding> bindings;
    bindings.reserve(input_nodes_.size());
    for (const auto& [node, kind] : input_nodes_) {
        if (f32_input(kind)) {
            const std::vector<float>& data = kind == CELLM_INPUT_PIXELS ? inputs.pixels : inputs.embeddings;
            bindings.push_back({node, data.data(), data.size() * sizeof(float)});
        } else {
            const auto& data = inputs.i32[static_cast<size_t>(kind)];
            bindings.push_back({node, data.data(), data.size() * sizeof(int32_t)});
        }
    }
    std::vector<cellm_output_binding> outs{{outputs_[0], out_data, n_out * sizeof(float)}};
    if (probe_values != nullptr) {
        probe_values->resize(probes_.size());
        for (size_t i = 0; i < probes_.size(); ++i) {
            const cellm_node& n = nodes_[static_cast<size_t>(probes_[i].node)];
            std::vector<float>& v = (*probe_values)[i];
            v.resize(static_cast<size_t>(n.ne[0] * n.ne[1] * n.ne[2] * n.ne[3]));
            outs.push_back({probes_[i].node, v.data(), v.size() * sizeof(float)});
        }
    }
    const cellm_execute_args args{sizeof(cellm_execute_args), bindings.data(), bindings.size(), sizeof(cellm_input_binding),
                                  outs.data(), outs.size(), sizeof(cellm_output_binding)};
    check(backend_->iface().graph_execute(backend_->handle(), plan_, &args), std::string("backend '") + backend_->name() + "'");
}

}  // namespace cellm
