#include "kv_cache.h"

#include "error.h"
#include "weights.h"

namespace cellm {

BlockPool::BlockPool(int32_t n_blocks) : refs_(static_cast<size_t>(n_blocks), 0) {
    free_.reserve(static_cast<size_t>(n_blocks));
    for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int32_t BlockPool::allocate() {
    if (free_.empty()) return -1;
    int32_t b = free_.back();
    free_.pop_back();
    refs_[static_cast<size_t>(b)] = 1;
    return b;
}

void BlockPool::retain(int32_t block) { ++refs_.at(static_cast<size_t>(block)); }

void BlockPool::release(int32_t block) {
    int32_t& r = refs_.at(static_cast<size_t>(block));
    if (r <= 0) throw Error("KV block " + std::to_string(block) + " released more often than retained");
    if (--r == 0) free_.push_back(block);
}

KvCache::KvCache(Backend& backend, const cellm_arch_info& arch, int32_t n_blocks, int32_t block_size, cellm_dtype type)
    : arch_(arch), block_size_(block_size), type_(type), n_slots_(static_cast<int64_t>(n_blocks) * block_size),
      pool_(n_blocks) {
    if (type != CELLM_TYPE_F32 && type != CELLM_TYPE_F16) throw Error("KV cache type must be F32 or F16");
    if (!backend.iface().supports_op(backend.handle(), CELLM_OP_KV_STORE, type)) {
        throw Error(std::string("backend '") + backend.name() + "' cannot store the KV cache as " +
                    (type == CELLM_TYPE_F16 ? "f16" : "f32"));
    }
    buffer_ = DeviceBuffer::allocate(backend, bytes_per_token() * static_cast<uint64_t>(n_slots_), CELLM_BUFFER_KV_CACHE);
}

uint64_t KvCache::bytes_per_token() const {
    return 2ull * static_cast<uint64_t>(arch_.n_layer) * static_cast<uint64_t>(arch_.kv_dim) *
           static_cast<uint64_t>(cellm_dtype_type_size(type_));
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

bool KvCache::reserve(PageTable& table, int32_t n_positions) {
    const size_t needed = static_cast<size_t>((n_positions + block_size_ - 1) / block_size_);
    const size_t had = table.blocks.size();
    while (table.blocks.size() < needed) {
        int32_t b = pool_.allocate();
        if (b < 0) {
            while (table.blocks.size() > had) {
                pool_.release(table.blocks.back());
                table.blocks.pop_back();
            }
            return false;
        }
        table.blocks.push_back(b);
    }
    return true;
}

void KvCache::shrink(PageTable& table, int32_t n_positions) {
    const size_t needed = static_cast<size_t>((n_positions + block_size_ - 1) / block_size_);
    while (table.blocks.size() > needed) {
        pool_.release(table.blocks.back());
        table.blocks.pop_back();
    }
}

}  // namespace cellm
