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

KvCache::KvCache(Backend& backend, const cellm_arch_info& arch, int32_t n_blocks, int32_t block_size, cellm_dtype type)
    : backend_(&backend), arch_(arch), block_size_(block_size), type_(type), n_slots_(static_cast<int64_t>(n_blocks) * block_size),
      pool_(n_blocks) {
    if (type != CELLM_TYPE_F32 && type != CELLM_TYPE_F16 && type != CELLM_TYPE_I8) {
        throw Error("KV cache type must be F32, F16 or I8 (q8)");
    }
    if (type == CELLM_TYPE_I8 && scale_runs(arch) == 0) {
        throw Error("a q8 KV cache needs K/V rows (kv_dim) of whole heads or of a multiple of 32 values; this model's have " +
                    std::to_string(arch.kv_dim));
    }
    if (!backend.iface().supports_op(backend.handle(), CELLM_OP_KV_STORE, type)) {
        throw Error(std::string("backend '") + backend.name() + "' cannot store the KV cache as " + kv_type_name(type));
    }
    buffer_ = DeviceBuffer::allocate(backend, bytes_per_token() * static_cast<uint64_t>(n_slots_) + 64, CELLM_BUFFER_KV_CACHE);
}

int32_t KvCache::scale_runs(const cellm_arch_info& arch) {
    if (arch.n_head_kv > 0 && arch.kv_dim % arch.n_head_kv == 0) return arch.n_head_kv;
    return arch.kv_dim % 32 == 0 ? arch.kv_dim / 32 : 0;
}

uint64_t KvCache::bytes_per_token(const cellm_arch_info& arch, cellm_dtype type) {
    auto row = static_cast<uint64_t>(arch.kv_dim) * static_cast<uint64_t>(cellm_dtype_type_size(type));
    if (type == CELLM_TYPE_I8) row += static_cast<uint64_t>(scale_runs(arch)) * sizeof(float);
    return 2ull * static_cast<uint64_t>(arch.n_layer) * row;
}

cellm_tensor_desc KvCache::tensor(int32_t layer, int32_t kind) const {
    const bool scales = kind >= 2;
    cellm_tensor_desc d{};
    d.struct_size = sizeof(d);
    d.type = scales ? CELLM_TYPE_F32 : type_;
    d.n_dims = 2;
    d.ne[0] = scales ? scale_runs(arch_) : arch_.kv_dim;
    d.ne[1] = n_slots_;
    d.ne[2] = d.ne[3] = 1;
    fill_strides(d);
    d.buffer = buffer_->get();
    // Every layer's K and V pools, then (I8) every layer's K and V scales, which start 64-byte aligned.
    const auto before = static_cast<uint64_t>(layer * 2 + kind % 2);
    d.offset = (scales ? scales_offset() : 0) + before * static_cast<uint64_t>(d.nb[2]);
    return d;
}

uint64_t KvCache::scales_offset() const {
    const uint64_t pools = 2ull * static_cast<uint64_t>(arch_.n_layer) * static_cast<uint64_t>(arch_.kv_dim) *
                           static_cast<uint64_t>(n_slots_) * static_cast<uint64_t>(cellm_dtype_type_size(type_));
    return (pools + 63) / 64 * 64;
}

void KvCache::copy_block(int32_t from, int32_t to) {
    const Backend& b = *backend_;
    for (int32_t layer = 0; layer < arch_.n_layer; ++layer) {
        for (int32_t kind = 0; kind < n_kinds(); ++kind) {
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
