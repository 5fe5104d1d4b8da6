#include "kv_cache.h"

#include "error.h"
#include "host_api.h"
#include "weights.h"

namespace cellm {

KvCache::KvCache(Backend& backend, const cellm_arch_info& arch, int32_t n_blocks, int32_t block_size, cellm_dtype type)
    : backend_(&backend), arch_(arch), block_size_(block_size), type_(type), n_slots_(static_cast<int64_t>(n_blocks) * block_size),
      pool_(n_blocks) {
    if (type != CELLM_TYPE_F32 && type != CELLM_TYPE_F16) throw Error("KV cache type must be F32 or F16");
    if (!backend.iface().supports_op(backend.handle(), CELLM_OP_KV_STORE, type)) {
        throw Error(std::string("backend '") + backend.name() + "' cannot store the KV cache as " +
                    (type == CELLM_TYPE_F16 ? "f16" : "f32"));
    }
    buffer_ = DeviceBuffer::allocate(backend, bytes_per_token() * static_cast<uint64_t>(n_slots_), CELLM_BUFFER_KV_CACHE);
}

uint64_t KvCache::bytes_per_token(const cellm_arch_info& arch, cellm_dtype type) {
    return 2ull * static_cast<uint64_t>(arch.n_layer) * static_cast<uint64_t>(arch.kv_dim) *
           static_cast<uint64_t>(cellm_dtype_type_size(type));
}

cellm_tensor_desc KvCache::tensor(int32_t layer, int32_t kind) const {
    cellm_tensor_desc d{};
    d.struct_size = sizeof(d);
    d.type = type_;
    d.n_dims = 2;
    d.ne[0] = arch_.kv_dim;
    d.ne[1] = n_slots_;
    d.ne[2] = d.ne[3] = 1;
    fill_strides(d);
    d.buffer = buffer_->get();
    d.offset = static_cast<uint64_t>(layer * 2 + kind) * static_cast<uint64_t>(d.nb[2]);
    return d;
}

void KvCache::copy_block(int32_t from, int32_t to) {
    const Backend& b = *backend_;
    for (int32_t layer = 0; layer < arch_.n_layer; ++layer) {
        for (int32_t kind = 0; kind < 2; ++kind) {
            const cellm_tensor_desc pool = tensor(layer, kind);
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
