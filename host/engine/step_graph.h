// One step's compute graph: built by the arch for a batch shape, with its leaves resolved to the weights,
// KV pools and recurrent states on the backend, and prepared by the backend into a plan that runs again for every batch of
// the same shape. The same for an arch's vision encoder over a number of images (ABI 1.3).
#pragma once

#include "plugin/backend.h"
#include "kv/kv_cache.h"
#include "kv/state_pool.h"
#include "model/model.h"
#include "model/weights.h"

#include <cellm/graph.h>

#include <array>
#include <deque>
#include <string>
#include <vector>

namespace cellm {

class StepGraph {
public:
    // With `probes`, the graph also reads back the probes below (a calibration graph: kv/kv_calibration.h).
    StepGraph(const Model& model, Backend& backend, const WeightStore& weights, const KvCache& kv,
              const StatePool& states, const cellm_batch_shape& shape, bool probes = false);
    // The vision encoder of shape.n_images images: no KV or state leaves, and its output is the images'
    // embeddings, F32 [n_embd, tokens_per_image * n_images]. The model must have vision().
    StepGraph(const Model& model, Backend& backend, const WeightStore& weights, const cellm_vision_shape& shape);
    ~StepGraph();
    StepGraph(const StepGraph&) = delete;
    StepGraph& operator=(const StepGraph&) = delete;

    // The data of each input kind: i32[kind] for the I32 kinds, and the F32 ones apart.
    struct Inputs {
        std::array<std::vector<int32_t>, CELLM_INPUT_COUNT> i32;
        std::vector<float> embeddings;  // CELLM_INPUT_EMBEDDINGS
        std::vector<float> pixels;      // CELLM_INPUT_PIXELS
    };
    // Runs the plan; `out` receives the output: n_vocab * n_outputs logits, or the images' embeddings; and
    // `probe_values`, when given, each probe's value in probes() order.
    void execute(const Inputs& inputs, float* out, size_t n_out, std::vector<std::vector<float>>* probe_values = nullptr);

    // A value the KV calibration measures: an attention's query input ([head_dim, n_head, n_tokens]) or a K
    // store's new rows ([kv_dim, n_tokens]), of the layer whose pools they meet.
    struct Probe {
        int32_t node;
        int32_t layer;
        bool query;
        int32_t n_head_kv;  // queries: the attention's KV heads
        float softcap;      // queries: the attention's logit soft-cap (0 = none)
    };
    const std::vector<Probe>& probes() const { return probes_; }

    int32_t n_nodes() const { return static_cast<int32_t>(nodes_.size()); }

private:
    // Builds through `build` (an arch's build_graph or build_vision_graph), resolves the leaves (kv and states
    // are null for a vision graph) and prepares the plan; the one output must be F32 [out_ne[0], out_ne[1]].
    template <class Build>
    void prepare(const Model& model, const WeightStore& weights, const KvCache* kv, const StatePool* states,
                 const std::string& what, std::array<int64_t, 2> out_ne, Build build);

    Backend* backend_;
    std::vector<cellm_node> nodes_;
    std::deque<std::string> names_;
    std::vector<int32_t> outputs_;
    bool probing_ = false;
    std::vector<Probe> probes_;
    std::vector<std::pair<int32_t, cellm_input_kind>> input_nodes_;
    cellm_plan* plan_ = nullptr;

    friend struct GraphBuilderContext;
};

}  // namespace cellm
