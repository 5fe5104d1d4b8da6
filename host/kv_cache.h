// The paged KV cache's storage: K and V of every layer for every block of the pool, in one backend buffer.
#pragma once

#include "backend.h"
#include "block_pool.h"

#include <cellm/arch.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace cellm {

class KvCache {
public:
    KvCache(Backend& backend, const cellm_arch_info& arch, int32_t n_blocks, int32_t block_size, cellm_dtype type);

    // The K (kind 0) or V (kind 1) pool of `layer`, shaped [kv_dim, n_slots].
    cellm_tensor_desc tensor(int32_t layer, int32_t kind) const;
    BlockPool& pool() { return pool_; }
    const BlockPool& pool() const { return pool_; }
    int32_t block_size() const { return block_size_; }
    cellm_dtype type() const { return type_; }
    uint64_t bytes() const { return buffer_->size(); }
    // Bytes one token occupies across all layers, K and V.
    uint64_t bytes_per_token() const { return bytes_per_token(arch_, type_); }
    static uint64_t bytes_per_token(const cellm_arch_info& arch, cellm_dtype type);

    // Copies every layer's keys and values of block `from` into block `to` (copy-on-write of a shared block).
    void copy_block(int32_t from, int32_t to);

private:
    Backend* backend_;
    cellm_arch_info arch_;
    int32_t block_size_;
    cellm_dtype type_;
    int64_t n_slots_;
    BlockPool pool_;
    std::unique_ptr<DeviceBuffer> buffer_;
    std::vector<uint8_t> scratch_;  // one block of one pool, on its way through host memory
};

}  // namespace cellm
