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
    StepGraph(const Model& model, Backend& backend, const WeightStore& weights, const KvCache& kv,
              const StatePool& states, const cellm_batch_shape& shape);
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
    // Runs the plan; `out` receives the output: n_vocab * n_outputs logits, or the images' embeddings.
    void execute(const Inputs& inputs, float* out, size_t n_out);

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
    std::vector<std::pair<int32_t, cellm_input_kind>> input_nodes_;
    cellm_plan* plan_ = nullptr;

    friend struct GraphBuilderContext;
};

}  // namespace cellm
