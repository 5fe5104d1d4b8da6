#include "model/weights.h"

#include "error.h"
#include "plugin/host_api.h"

#include <optional>

namespace cellm {

void fill_strides(cellm_tensor_desc& d) {
    d.nb[0] = cellm_dtype_type_size(d.type);
    d.nb[1] = d.nb[0] * (d.ne[0] / cellm_dtype_block_size(d.type));
    for (int i = 2; i < CELLM_MAX_DIMS; ++i) d.nb[i] = d.nb[i - 1] * d.ne[i - 1];
}

WeightStore::WeightStore(Backend& backend, const cellm_model_view& model, std::span<const MappedRegion> regions)
    : model_(&model) {
    places_.resize(model.n_tensors);
    const auto& iface = backend.iface();
    const bool can_wrap = (backend.info().flags & CELLM_BACKEND_HOST_MEMORY) != 0 && iface.buffer_wrap_host != nullptr;

    // Each region is wrapped once, when a tensor first needs it.
    std::vector<std::optional<size_t>> wrapped(regions.size());
    std::vector<uint64_t> uploads;
    for (uint64_t i = 0; i < model.n_tensors; ++i) {
        const auto* t = cellm_model_tensor(&model, i);
        const auto* data = static_cast<const char*>(t->data);
        bool placed = false;
        for (size_t r = 0; can_wrap && !placed && r < regions.size(); ++r) {
            const auto* begin = static_cast<const char*>(regions[r].data);
            if (begin == nullptr || data < begin || static_cast<uint64_t>(data - begin) > regions[r].size ||
                regions[r].size - static_cast<uint64_t>(data - begin) < t->size) {
                continue;
            }
            if (!wrapped[r]) {
                cellm_buffer* buffer = nullptr;
                check(iface.buffer_wrap_host(backend.handle(), regions[r].data, regions[r].size, &buffer),
                      std::string("backend '") + backend.name() + "': cannot map the model");
                buffers_.push_back(std::make_unique<DeviceBuffer>(backend, buffer, regions[r].size));
                wrapped[r] = buffers_.size() - 1;
            }
            places_[i] = {*wrapped[r], static_cast<uint64_t>(data - begin)};
            placed = true;
        }
        if (!placed) uploads.push_back(i);
    }
    zero_copy_ = uploads.empty() && model.n_tensors > 0;
    if (uploads.empty()) return;

    constexpr uint64_t alignment = 256;
    uint64_t total = 0;
    for (uint64_t i : uploads) {
        places_[i] = {buffers_.size(), total};
        total += (cellm_model_tensor(&model, i)->size + alignment - 1) / alignment * alignment;
    }
    buffers_.push_back(DeviceBuffer::allocate(backend, total, CELLM_BUFFER_WEIGHTS));
    for (uint64_t i : uploads) {
        const auto* t = cellm_model_tensor(&model, i);
        check(iface.buffer_write(backend.handle(), buffers_.back()->get(), places_[i].offset, t->data, t->size),
              "uploading tensor '" + std::string(to_string_view(t->name)) + "'");
    }
}

uint64_t WeightStore::device_bytes() const {
    uint64_t total = 0;
    for (const auto& b : buffers_) total += b->size();
    return total;
}

cellm_tensor_desc WeightStore::tensor(uint64_t index) const {
    const auto* t = cellm_model_tensor(model_, index);
    cellm_tensor_desc d{};
    d.struct_size = sizeof(d);
    d.type = t->type;
    d.n_dims = t->n_dims;
    for (int i = 0; i < CELLM_MAX_DIMS; ++i) d.ne[i] = i < static_cast<int>(t->n_dims) ? t->ne[i] : 1;
    fill_strides(d);
    d.buffer = buffers_[places_[index].buffer]->get();
    d.offset = places_[index].offset;
    return d;
}

}  // namespace cellm
