// The per-sequence state of recurrent layers (graph.h, "Recurrent state"): for each layer state an arch reports
// (cellm_arch_layer_info.state_size), one F32 [state_size, n_slots] tensor, all in one backend buffer allocated
// once. A live sequence holds one slot across all of them; unlike KV blocks a slot is never shared, and it
// cannot be cut back to an earlier position.
#pragma once

#include "plugin/backend.h"

#include <cellm/arch.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

namespace cellm {

class StatePool {
public:
    // `layers`: every layer's info (Model::layers()). A model without recurrent layers gets an empty pool.
    StatePool(Backend& backend, const std::vector<cellm_arch_layer_info>& layers, int32_t n_slots);

    // Whether the model keeps any recurrent state (and so needs a slot per sequence).
    bool empty() const { return bytes_per_slot_ == 0; }
    // A free slot with every state zeroed, or -1 when all are taken.
    int32_t acquire();
    void release(int32_t slot);
    // Zeroes every state of `slot` (its sequence starts again).
    void clear(int32_t slot);
    // Makes `to` a copy of `from` (a forked sequence).
    void copy(int32_t from, int32_t to);

    // State `which` (0 convolution, 1 recurrence) of `layer`: F32 [state_size, n_slots]. Throws for a layer
    // without that state.
    cellm_tensor_desc tensor(int32_t layer, int32_t which) const;
    int32_t n_slots() const { return static_cast<int32_t>(free_.size()); }
    int32_t n_free() const;
    uint64_t bytes_per_slot() const { return bytes_per_slot_; }

private:
    // Applies f(offset, bytes) to `slot`'s part of every state tensor.
    template <class F>
    void for_each_state(int32_t slot, F f) const;

    Backend* backend_;
    std::vector<cellm_arch_layer_info> layers_;
    std::vector<std::array<uint64_t, 2>> offsets_;  // per layer and state, where its tensor starts
    uint64_t bytes_per_slot_ = 0;
    std::vector<bool> free_;
    std::unique_ptr<DeviceBuffer> buffer_;
    std::vector<uint8_t> scratch_;  // one slot of one state, on its way through host memory
};

}  // namespace cellm
