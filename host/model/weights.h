// Places a model's tensors in backend memory: wrapped in place when the backend can read the memory-mapped
// files directly (no copy), uploaded once otherwise.
#pragma once

#include "model/model_file.h"
#include "plugin/backend.h"

#include <cellm/tensor.h>

#include <memory>
#include <span>
#include <vector>

namespace cellm {

class WeightStore {
public:
    // `regions` are the mapped files the tensors lie in (ModelFile::regions()); tensors outside them, and every
    // tensor on a backend that cannot wrap host memory, are uploaded.
    WeightStore(Backend& backend, const cellm_model_view& model, std::span<const MappedRegion> regions);

    // Where tensor `index` of the model view lives on the backend.
    cellm_tensor_desc tensor(uint64_t index) const;
    // Every tensor is read in place from the mapped files.
    bool zero_copy() const { return zero_copy_; }
    uint64_t device_bytes() const;

private:
    struct Place {
        size_t buffer;
        uint64_t offset;
    };
    const cellm_model_view* model_;
    std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
    std::vector<Place> places_;
    bool zero_copy_ = false;
};

// Row-major contiguous strides for a tensor of `type` and shape `ne`.
void fill_strides(cellm_tensor_desc& desc);

}  // namespace cellm
