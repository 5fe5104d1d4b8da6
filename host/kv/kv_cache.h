// The paged KV cache's storage: K and V of every layer for every block of the pool, in one backend buffer. Each
// layer's rows have that layer's width (a layer may have none: it reads another layer's pools, or keeps a
// recurrent state). An I8 (q8) cache also holds each pool's scales (graph.h): one per token and KV head; so does a
// coded (r4, r3) cache, whose layers also keep the constants of the rotation around their pools (graph.h, kinds
// 4..7): a fixed per-channel shift and scale of the keys (calibrated on the model, kv/kv_calibration.h) and signs.
//
// On a backend that commits memory on request (buffer_commit, the CPU backends) the pool starts with no memory
// behind it: blocks are committed a chunk ahead of need, so the steps that write them take no page faults,
// and whole free chunks at the top are given back, so resident memory follows the tokens held. There, too, the
// rows of sliding-window layers that no query can read any more go back (the engine says which blocks, as
// sequences move on): for Gemma 3, 5 of every 6 layers then hold only their window of a long context.
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

    // The K (kind 0) or V (kind 1) pool of `layer`, shaped [kv_dim, n_slots]; in an I8 or coded cache also the
    // scale pools of K (kind 2) and V (kind 3), [scale_runs, n_slots] (F32, coded: F16), and in a coded cache the
    // constants of kinds 4..7 (graph.h). Throws for a layer without pools.
    cellm_tensor_desc tensor(int32_t layer, int32_t kind) const;
    // Kinds of pool per layer that hold a row per slot: K and V, and their scales in an I8 or coded cache.
    int32_t n_kinds() const { return type_ == CELLM_TYPE_I8 || coded() ? 4 : 2; }
    // Whether the pools are R4 or R3 (graph.h, "Coded pools").
    bool coded() const { return type_ == CELLM_TYPE_R4 || type_ == CELLM_TYPE_R3; }
    // Sets a coded cache's key transform of `layer`: keys are stored as (k + shift) * scale (both kv_dim values)
    // and queries multiplied by 1 / scale, so q.k changes by q.shift only, the same for every key of a query.
    // Until set, shift 0 and scale 1. Blocks already written keep the transform they were written with.
    void set_key_transform(int32_t layer, const std::vector<float>& shift, const std::vector<float>& scale);
    // Folded into the prefix cache's block hashes: blocks of caches with another type or rotation never match.
    uint64_t hash_seed() const;
    // The seed of the rotation's signs (splitmix64; tools/kv_study measured it against others).
    static constexpr uint64_t rotation_seed = 0x6B76;
    // A block for a sequence (BlockPool::allocate), committing the next chunk first when few committed blocks
    // are left; -1 when the pool is full.
    int32_t allocate();
    // Gives back the memory of free chunks at the top of the pool while more than `keep_free` committed blocks
    // stay free, moving the cached content they hold into free blocks below where it is newer than what
    // those hold (the rest is forgotten). Cheap when there is nothing to give back.
    void give_back(int32_t keep_free);
    // Bytes with memory behind them: bytes() on a backend that commits everything at once.
    uint64_t committed_bytes() const;

    // The longest sliding window of the layers that have one, when their rows can be given back (the backend
    // commits memory on request); 0 otherwise.
    int32_t window() const { return window_; }
    // Gives back the windowed layers' rows of `block`, which no query of those layers will read again. Its
    // other layers' rows stay. Taking the block for new content (allocate) commits them again.
    void release_window_rows(int32_t block);
    bool window_rows_released(int32_t block) const { return window_released_[static_cast<size_t>(block)]; }
    int32_t n_window_released() const { return n_window_released_; }

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
    // The shape and type of kind `kind` of a layer (see tensor()), without its place.
    cellm_tensor_desc tensor_shape(const cellm_arch_layer_info& info, int32_t kind) const;
    void write_constant(int32_t layer, int32_t kind, const std::vector<float>& values);
    // Commits (or gives back) the memory of blocks [first, end) in every pool, or only in the windowed layers'.
    void set_resident(int32_t first, int32_t end, bool resident, bool windowed_only = false);
    void restore_window_rows(int32_t block);

    // Where each of a layer's kinds (see tensor()) starts in the buffer.
    struct Placement {
        uint64_t offset[8] = {};
    };

    Backend* backend_;
    std::vector<cellm_arch_layer_info> layers_;
    std::vector<Placement> placements_;
    int32_t block_size_;
    cellm_dtype type_;
    int64_t n_slots_;
    BlockPool pool_;
    std::unique_ptr<DeviceBuffer> buffer_;
    decltype(cellm_backend_iface::buffer_commit) commit_ = nullptr;  // null: all committed at allocation
    int32_t chunk_blocks_;  // blocks committed or given back at once
    int32_t window_ = 0;
    std::vector<bool> window_released_;  // per block
    int32_t n_window_released_ = 0;
    uint64_t window_bytes_per_token_ = 0;  // the windowed layers' share of bytes_per_token()
    std::vector<uint8_t> scratch_;  // one block of one pool, on its way through host memory
};

}  // namespace cellm
