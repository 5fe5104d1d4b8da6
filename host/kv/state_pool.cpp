#include "kv/state_pool.h"

#include "error.h"
#include "model/weights.h"
#include "plugin/host_api.h"

#include <algorithm>

namespace cellm {

StatePool::StatePool(Backend& backend, const std::vector<cellm_arch_layer_info>& layers, int32_t n_slots)
    : backend_(&backend), layers_(layers), offsets_(layers.size()), free_(static_cast<size_t>(n_slots), true) {
    // Each tensor starts 256-byte aligned, as the KV pools do.
    const auto aligned = [](uint64_t n) { return (n + 255) / 256 * 256; };
    uint64_t end = 0;
    for (size_t il = 0; il < layers_.size(); ++il) {
        for (size_t which = 0; which < 2; ++which) {
            const auto size = static_cast<uint64_t>(layers_[il].state_size[which]) * sizeof(float);
            if (size == 0) continue;
            offsets_[il][which] = end;
            end = aligned(end + size * static_cast<uint64_t>(n_slots));
            bytes_per_slot_ += size;
        }
    }
    if (empty()) return;
    if (!backend.iface().supports_op(backend.handle(), CELLM_OP_STATE, CELLM_TYPE_F32)) {
        throw Error(std::string("backend '") + backend.name() +
                    "' cannot run recurrent layers (no kernels for the recurrent state ops of ABI 1.2)");
    }
    buffer_ = DeviceBuffer::allocate(backend, end, CELLM_BUFFER_KV_CACHE);
}

template <class F>
void StatePool::for_each_state(int32_t slot, F f) const {
    for (size_t il = 0; il < layers_.size(); ++il) {
        for (size_t which = 0; which < 2; ++which) {
            const auto size = static_cast<uint64_t>(layers_[il].state_size[which]) * sizeof(float);
            if (size > 0) f(offsets_[il][which] + size * static_cast<uint64_t>(slot), size);
        }
    }
}

int32_t StatePool::acquire() {
    const auto it = std::find(free_.begin(), free_.end(), true);
    if (it == free_.end()) return -1;
    const auto slot = static_cast<int32_t>(it - free_.begin());
    clear(slot);
    *it = false;
    return slot;
}

void StatePool::release(int32_t slot) { free_.at(static_cast<size_t>(slot)) = true; }

int32_t StatePool::n_free() const { return static_cast<int32_t>(std::count(free_.begin(), free_.end(), true)); }

void StatePool::clear(int32_t slot) {
    const Backend& b = *backend_;
    for_each_state(slot, [&](uint64_t offset, uint64_t size) {
        scratch_.assign(size, 0);
        check(b.iface().buffer_write(b.handle(), buffer_->get(), offset, scratch_.data(), size), "zeroing a recurrent state");
    });
}

void StatePool::copy(int32_t from, int32_t to) {
    const Backend& b = *backend_;
    for_each_state(from, [&](uint64_t offset, uint64_t size) {
        const uint64_t target = offset + (static_cast<uint64_t>(to) - static_cast<uint64_t>(from)) * size;
        scratch_.resize(size);
        check(b.iface().buffer_read(b.handle(), buffer_->get(), offset, scratch_.data(), size), "copying a recurrent state");
        check(b.iface().buffer_write(b.handle(), buffer_->get(), target, scratch_.data(), size), "copying a recurrent state");
    });
}

cellm_tensor_desc StatePool::tensor(int32_t layer, int32_t which) const {
    if (layer < 0 || static_cast<size_t>(layer) >= layers_.size() || which < 0 || which > 1 ||
        layers_[static_cast<size_t>(layer)].state_size[which] == 0) {
        throw Error("layer " + std::to_string(layer) + " has no recurrent state " + std::to_string(which));
    }
    cellm_tensor_desc d{};
    d.struct_size = sizeof(d);
    d.type = CELLM_TYPE_F32;
    d.n_dims = 2;
    d.ne[0] = layers_[static_cast<size_t>(layer)].state_size[which];
    d.ne[1] = n_slots();
    d.ne[2] = d.ne[3] = 1;
    fill_strides(d);
    d.buffer = buffer_->get();
    d.offset = offsets_[static_cast<size_t>(layer)][static_cast<size_t>(which)];
    return d;
}

}  // namespace cellm
