// The KV block pool: hands out fixed-size blocks of token slots, counts who holds each one, and remembers
// what full blocks contain so that a later sequence with the same prefix can take them instead of computing
// them again (prefix caching). A sequence's page table lists its blocks in position order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace cellm {

// Names the content of a full block: its tokens and, through the hash of the block before it, everything
// in front of them (a block's keys and values depend on the whole prefix).
using BlockHash = uint64_t;
BlockHash hash_block(BlockHash previous, const int32_t* tokens, int32_t n_tokens);

class BlockPool {
public:
    explicit BlockPool(int32_t n_blocks);

    // A free block with one reference, or -1 when none is left. Free blocks go out least recently freed
    // first, so cached content that was used last survives longest; taking a block forgets its content.
    int32_t allocate();
    void retain(int32_t block);
    // Drops one reference; the last one puts the block back on the free list, still findable by its hash
    // until it is handed out again.
    void release(int32_t block);

    // Records that `block` now holds the full block named `hash`. A hash already held by another block
    // keeps that one (the two are interchangeable).
    void publish(int32_t block, BlockHash hash);
    // Forgets the content of `block` (it is about to be overwritten).
    void unpublish(int32_t block);
    bool published(int32_t block) const { return hashes_[static_cast<size_t>(block)] != 0; }
    // A block holding `hash`, retained for the caller (taken off the free list when it was free), or -1.
    int32_t acquire_cached(BlockHash hash);

    int32_t n_blocks() const { return static_cast<int32_t>(refs_.size()); }
    int32_t n_free() const { return n_free_; }
    int32_t n_cached() const { return static_cast<int32_t>(by_hash_.size()); }
    int32_t references(int32_t block) const { return refs_.at(static_cast<size_t>(block)); }

private:
    void unlink(int32_t block);
    void push_back(int32_t block);

    std::vector<int32_t> refs_;
    std::vector<BlockHash> hashes_;  // 0: no content worth finding
    std::unordered_map<BlockHash, int32_t> by_hash_;
    // Free list as a doubly linked list threaded through the blocks, oldest first; -1 ends it.
    std::vector<int32_t> prev_, next_;
    int32_t head_ = -1, tail_ = -1, n_free_ = 0;
};

// One sequence's blocks in position order.
struct PageTable {
    std::vector<int32_t> blocks;
    int32_t slot(int32_t position, int32_t block_size) const {
        return blocks[static_cast<size_t>(position / block_size)] * block_size + position % block_size;
    }
};

}  // namespace cellm
