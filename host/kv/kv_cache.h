// The paged KV cache's storage: K and V of every layer for every block of the pool, in one backend buffer. Each
// layer's rows have that layer's width (a layer may have none: it reads another layer's pools, or keeps a
// recurrent state). An I8 (q8) cache also holds each pool's scales (graph.h): one per token and KV head.
#pragma once

#include "plugin/backend.h"
#include "kv/block_pool.h"

#include <cellm/arch.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace cellm {

class KvCache {
public:
    // Scales per token row of an I8 cache: one per KV head; runs of 32 values (llama.cpp's q8_0 block) for an
    // arch plugin that does not report its head count (ABI 1.0); 0 when neither divides the row.
    static int32_t scale_runs(const cellm_arch_layer_info& layer);

    // `layers`: every layer's row (Model::layers()).
    KvCache(Backend& backend, const std::vector<cellm_arch_layer_info>& layers, int32_t n_blocks, int32_t block_size,
            cellm_dtype type);

    // The K (kind 0) or V (kind 1) pool of `layer`, shaped [kv_dim, n_slots]; in an I8 cache also the scale
    // pools of K (kind 2) and V (kind 3), F32 [scale_runs, n_slots]. Throws for a layer without pools.
    cellm_tensor_desc tensor(int32_t layer, int32_t kind) const;
    // Kinds of pool per layer: K and V, and their scales in an I8 cache.
    int32_t n_kinds() const { return type_ == CELLM_TYPE_I8 ? 4 : 2; }
    BlockPool& pool() { return pool_; }
    const BlockPool& pool() const { return pool_; }
    int32_t block_size() const { return block_size_; }
    cellm_dtype type() const { return type_; }
    uint64_t bytes() const { return buffer_->size(); }
    // Bytes one token occupies across all layers, K and V (and their scales).
    uint64_t bytes_per_token() const { return bytes_per_token(layers_, type_); }
    static uint64_t bytes_per_token(const std::vector<cellm_arch_layer_info>& layers, cellm_dtype type);

    // Copies every layer's keys and values (and scales) of block `from` into block `to` (copy-on-write of a
    // shared block).
    void copy_block(int32_t from, int32_t to);

private:
    // Where one layer's four pools start in the buffer (the scale pools only in an I8 cache).
    struct Placement {
        uint64_t offset[4] = {};
    };

    Backend* backend_;
    std::vector<cellm_arch_layer_info> layers_;
    std::vector<Placement> placements_;
    int32_t block_size_;
    cellm_dtype type_;
    int64_t n_slots_;
    BlockPool pool_;
    std::unique_ptr<DeviceBuffer> buffer_;
    std::vector<uint8_t> scratch_;  // one block of one pool, on its way through host memory
};

}  // namespace cellm
