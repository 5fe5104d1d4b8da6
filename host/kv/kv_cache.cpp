#include "kv/kv_cache.h"

#include "error.h"
#include "plugin/host_api.h"
#include "model/weights.h"

namespace cellm {

namespace {
// The manifest's name of a KV type, for messages.
const char* kv_type_name(cellm_dtype type) {
    switch (type) {
    case CELLM_TYPE_F32: return "f32";
    case CELLM_TYPE_F16: return "f16";
    default: return "q8";
    }
}
}  // namespace

KvCache::KvCache(Backend& backend, const std::vector<cellm_arch_layer_info>& layers, int32_t n_blocks, int32_t block_size,
                 cellm_dtype type)
    : backend_(&backend), layers_(layers), block_size_(block_size), type_(type),
      n_slots_(static_cast<int64_t>(n_blocks) * block_size), pool_(n_blocks) {
    if (type != CELLM_TYPE_F32 && type != CELLM_TYPE_F16 && type != CELLM_TYPE_I8) {
        throw Error("KV cache type must be F32, F16 or I8 (q8)");
    }
    for (size_t il = 0; il < layers_.size(); ++il) {
        const cellm_arch_layer_info& layer = layers_[il];
        if (type == CELLM_TYPE_I8 && layer.kv_dim > 0 && scale_runs(layer) == 0) {
            throw Error("a q8 KV cache needs K/V rows (kv_dim) of whole heads or of a multiple of 32 values; layer " +
                        std::to_string(il) + " of this model has " + std::to_string(layer.kv_dim));
        }
    }
    if (!backend.iface().supports_op(backend.handle(), CELLM_OP_KV_STORE, type)) {
        throw Error(std::string("backend '") + backend.name() + "' cannot store the KV cache as " + kv_type_name(type));
    }
    // Every layer's K and V pools, then (I8) every layer's K and V scales. Each pool starts 256-byte aligned,
    // which satisfies every device's storage-buffer offset alignment.
    const auto aligned = [](uint64_t n) { return (n + 255) / 256 * 256; };
    const auto slots = static_cast<uint64_t>(n_slots_);
    uint64_t end = 0;
    placements_.resize(layers_.size());
    for (int32_t kind = 0; kind < n_kinds(); ++kind) {
        for (size_t il = 0; il < layers_.size(); ++il) {
            if (layers_[il].kv_dim == 0) continue;
            const uint64_t row = kind < 2 ? static_cast<uint64_t>(layers_[il].kv_dim) * cellm_dtype_type_size(type)
                                          : static_cast<uint64_t>(scale_runs(layers_[il])) * sizeof(float);
            placements_[il].offset[kind] = end;
            end = aligned(end + row * slots);
        }
    }
    buffer_ = DeviceBuffer::allocate(backend, end + 64, CELLM_BUFFER_KV_CACHE);
}

int32_t KvCache::scale_runs(const cellm_arch_layer_info& layer) {
    if (layer.n_head_kv > 0 && layer.kv_dim % layer.n_head_kv == 0) return layer.n_head_kv;
    return layer.kv_dim % 32 == 0 ? layer.kv_dim / 32 : 0;
}

uint64_t KvCache::bytes_per_token(const std::vector<cellm_arch_layer_info>& layers, cellm_dtype type) {
    uint64_t bytes = 0;
    for (const cellm_arch_layer_info& layer : layers) {
        auto row = static_cast<uint64_t>(layer.kv_dim) * static_cast<uint64_t>(cellm_dtype_type_size(type));
        if (type == CELLM_TYPE_I8) row += static_cast<uint64_t>(scale_runs(layer)) * sizeof(float);
        bytes += 2 * row;
    }
    return bytes;
}

cellm_tensor_desc KvCache::tensor(int32_t layer, int32_t kind) const {
    if (layer < 0 || static_cast<size_t>(layer) >= layers_.size() || layers_[static_cast<size_t>(layer)].kv_dim == 0) {
        throw Error("layer " + std::to_string(layer) + " has no KV cache of its own");
    }
    const cellm_arch_layer_info& info = layers_[static_cast<size_t>(layer)];
    const bool scales = kind >= 2;
    cellm_tensor_desc d{};
    d.struct_size = sizeof(d);
    d.type = scales ? CELLM_TYPE_F32 : type_;
    d.n_dims = 2;
    d.ne[0] = scales ? scale_runs(info) : info.kv_dim;
    d.ne[1] = n_slots_;
    d.ne[2] = d.ne[3] = 1;
    fill_strides(d);
    d.buffer = buffer_->get();
    d.offset = placements_[static_cast<size_t>(layer)].offset[kind];
    return d;
}

void KvCache::copy_block(int32_t from, int32_t to) {
    const Backend& b = *backend_;
    for (size_t layer = 0; layer < layers_.size(); ++layer) {
        if (layers_[layer].kv_dim == 0) continue;
        for (int32_t kind = 0; kind < n_kinds(); ++kind) {
            const cellm_tensor_desc pool = tensor(static_cast<int32_t>(layer), kind);
            const auto row = static_cast<uint64_t>(pool.nb[1]) * static_cast<uint64_t>(block_size_);
            scratch_.resize(row);
            check(b.iface().buffer_read(b.handle(), pool.buffer, pool.offset + row * static_cast<uint64_t>(from),
                                        scratch_.data(), row),
                  "copying a KV block");
            check(b.iface().buffer_write(b.handle(), pool.buffer, pool.offset + row * static_cast<uint64_t>(to),
                                         scratch_.data(), row),
                  "copying a KV block");
        }
    }
}

}  // namespace cellm
