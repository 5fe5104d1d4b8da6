// The paged KV cache: a pool of fixed-size blocks of token slots, shared by every sequence, and the page
// table that maps a sequence's positions to blocks. K and V of every layer live in one backend buffer.
#pragma once

#include "backend.h"

#include <cellm/arch.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace cellm {

// Hands out block ids from a free list. Blocks carry a reference count so that sequences can share them
// (prefix reuse, forks); a block returns to the free list when its last holder releases it.
class BlockPool {
public:
    explicit BlockPool(int32_t n_blocks);
    // A free block with one reference, or -1 when none is left.
    int32_t allocate();
    void retain(int32_t block);
    void release(int32_t block);
    int32_t n_blocks() const { return static_cast<int32_t>(refs_.size()); }
    int32_t n_free() const { return static_cast<int32_t>(free_.size()); }

private:
    std::vector<int32_t> free_;  // used as a stack: the most recently freed block is reused first
    std::vector<int32_t> refs_;
};

// One sequence's blocks in position order.
struct PageTable {
    std::vector<int32_t> blocks;
    int32_t slot(int32_t position, int32_t block_size) const {
        return blocks[static_cast<size_t>(position / block_size)] * block_size + position % block_size;
    }
};

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
    uint64_t bytes_per_token() const;

    // Grows `table` so it covers positions [0, n_positions). Returns false (leaving it unchanged) when the
    // pool runs out.
    bool reserve(PageTable& table, int32_t n_positions);
    // Releases the blocks that positions >= n_positions no longer need.
    void shrink(PageTable& table, int32_t n_positions);

private:
    cellm_arch_info arch_;
    int32_t block_size_;
    cellm_dtype type_;
    int64_t n_slots_;
    BlockPool pool_;
    std::unique_ptr<DeviceBuffer> buffer_;
};

}  // namespace cellm
