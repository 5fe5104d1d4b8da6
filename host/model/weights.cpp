#include "model/weights.h"

#include "error.h"
#include "plugin/host_api.h"
#include "model/model_file.h"

namespace cellm {

void fill_strides(cellm_tensor_desc& d) {
    d.nb[0] = cellm_dtype_type_size(d.type);
    d.nb[1] = d.nb[0] * (d.ne[0] / cellm_dtype_block_size(d.type));
    for (int i = 2; i < CELLM_MAX_DIMS; ++i) d.nb[i] = d.nb[i - 1] * d.ne[i - 1];
}

WeightStore::WeightStore(Backend& backend, const cellm_model_view& model) : model_(&model) {
    offsets_.resize(model.n_tensors);
    const auto& iface = backend.iface();
    const bool can_wrap = (backend.info().flags & CELLM_BACKEND_HOST_MEMORY) != 0 && iface.buffer_wrap_host != nullptr &&
                          model.mapping != nullptr;
    if (can_wrap) {
        cellm_buffer* buffer = nullptr;
        check(iface.buffer_wrap_host(backend.handle(), model.mapping, model.mapping_size, &buffer),
              std::string("backend '") + backend.name() + "': cannot map the model");
        buffer_ = std::make_unique<DeviceBuffer>(backend, buffer, model.mapping_size);
        for (uint64_t i = 0; i < model.n_tensors; ++i) {
            const auto* t = cellm_model_tensor(&model, i);
            offsets_[i] = static_cast<uint64_t>(static_cast<const char*>(t->data) - static_cast<const char*>(model.mapping));
        }
        zero_copy_ = true;
        return;
    }
    constexpr uint64_t alignment = 256;
    uint64_t total = 0;
    for (uint64_t i = 0; i < model.n_tensors; ++i) {
        offsets_[i] = total;
        total += (cellm_model_tensor(&model, i)->size + alignment - 1) / alignment * alignment;
    }
    buffer_ = DeviceBuffer::allocate(backend, total == 0 ? alignment : total, CELLM_BUFFER_WEIGHTS);
    for (uint64_t i = 0; i < model.n_tensors; ++i) {
        const auto* t = cellm_model_tensor(&model, i);
        check(iface.buffer_write(backend.handle(), buffer_->get(), offsets_[i], t->data, t->size),
              "uploading tensor '" + std::string(to_string_view(t->name)) + "'");
    }
}

cellm_tensor_desc WeightStore::tensor(uint64_t index) const {
    const auto* t = cellm_model_tensor(model_, index);
    cellm_tensor_desc d{};
    d.struct_size = sizeof(d);
    d.type = t->type;
    d.n_dims = t->n_dims;
    for (int i = 0; i < CELLM_MAX_DIMS; ++i) d.ne[i] = i < static_cast<int>(t->n_dims) ? t->ne[i] : 1;
    fill_strides(d);
    d.buffer = buffer_->get();
    d.offset = offsets_[index];
    return d;
}

}  // namespace cellm
