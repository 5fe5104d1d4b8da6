// Places a model's tensors in backend memory: wrapped in place when the backend can read the memory-mapped
// file directly (no copy), uploaded once otherwise.
#pragma once

#include "plugin/backend.h"

#include <cellm/tensor.h>

#include <memory>

namespace cellm {

class WeightStore {
public:
    WeightStore(Backend& backend, const cellm_model_view& model);

    // Where tensor `index` of the model view lives on the backend.
    cellm_tensor_desc tensor(uint64_t index) const;
    bool zero_copy() const { return zero_copy_; }
    uint64_t device_bytes() const { return buffer_->size(); }

private:
    const cellm_model_view* model_;
    std::unique_ptr<DeviceBuffer> buffer_;
    std::vector<uint64_t> offsets_;
    bool zero_copy_ = false;
};

// Row-major contiguous strides for a tensor of `type` and shape `ne`.
void fill_strides(cellm_tensor_desc& desc);

}  // namespace cellm
