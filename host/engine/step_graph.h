// One step's compute graph: built by the arch for a batch shape, with its leaves resolved to the weights,
// KV pools and recurrent states on the backend, and prepared by the backend into a plan that runs again for every batch of
// the same shape.
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
    ~StepGraph();
    StepGraph(const StepGraph&) = delete;
    StepGraph& operator=(const StepGraph&) = delete;

    // Runs the plan. `inputs[kind]` holds the I32 data of each input kind; logits receive
    // n_vocab * n_outputs floats.
    void execute(const std::array<std::vector<int32_t>, CELLM_INPUT_COUNT>& inputs, float* logits, size_t n_logits);

    int32_t n_nodes() const { return static_cast<int32_t>(nodes_.size()); }

private:
    Backend* backend_;
    std::vector<cellm_node> nodes_;
    std::deque<std::string> names_;
    std::vector<int32_t> outputs_;
    std::vector<std::pair<int32_t, cellm_input_kind>> input_nodes_;
    cellm_plan* plan_ = nullptr;

    friend struct GraphBuilderContext;
};

}  // namespace cellm
