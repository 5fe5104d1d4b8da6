// The KV block pool: hands out fixed-size blocks of token slots, counts who holds each one, and remembers
// what full blocks contain so that a later sequence with the same prefix can take them instead of computing
// them again (prefix caching). A sequence's page table lists its blocks in position order.
//
// Only the first n_committed() blocks have memory behind them (kv_cache.h commits and gives back memory as
// use grows and shrinks); the rest count as free but are handed out only after the pool grows over them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <unordered_map>
#include <vector>

namespace cellm {

// Names the content of a full block: its tokens and, through the hash of the block before it, everything
// in front of them (a block's keys and values depend on the whole prefix).
using BlockHash = uint64_t;
BlockHash hash_block(BlockHash previous, const int32_t* tokens, int32_t n_tokens);

class BlockPool {
public:
    // `n_committed` of the `n_blocks` are usable at once (all when omitted).
    explicit BlockPool(int32_t n_blocks, int32_t n_committed = -1);

    // A free committed block with one reference, or -1 when none is left. Blank blocks (no content worth
    // finding) go first, lowest index first, so use packs at the bottom of the pool and its top can be given
    // back; then cached blocks, least recently freed first, so content used last survives longest. Taking a
    // block forgets its content.
    int32_t allocate();
    void retain(int32_t block);
    // Drops one reference; the last one makes the block free, still findable by its hash until it is handed
    // out again.
    void release(int32_t block);

    // Records that `block` now holds the full block named `hash`. A hash already held by another block
    // keeps that one (the two are interchangeable).
    void publish(int32_t block, BlockHash hash);
    // Forgets the content of `block` (it is about to be overwritten).
    void unpublish(int32_t block);
    bool published(int32_t block) const { return hashes_[static_cast<size_t>(block)] != 0; }
    // A block holding `hash`, retained for the caller (taken off the free lists when it was free), or -1.
    int32_t acquire_cached(BlockHash hash);

    // Makes the next `n` blocks usable (their memory was just committed).
    void grow(int32_t n);
    // Before the top `n` blocks are given back: moves what their free cached blocks hold into free blocks below,
    // blank ones first, then ones whose content was freed earlier, newest content first. `copy(from, to)`
    // copies a block's keys and values; the pool then names `to` by the hash.
    template <typename Copy>
    void relocate_top(int32_t n, Copy&& copy);
    // Takes the top `n` committed blocks out of use, forgetting their content, when every one of them is free
    // (their memory is about to be given back). False, and nothing changes, when one is held.
    bool shrink(int32_t n);

    int32_t n_blocks() const { return static_cast<int32_t>(refs_.size()); }
    int32_t n_committed() const { return n_committed_; }
    // Free blocks, the uncommitted ones included: what sequences may still take.
    int32_t n_free() const { return n_free_committed() + n_blocks() - n_committed_; }
    int32_t n_free_committed() const { return static_cast<int32_t>(blank_.size()) + n_cached_free_; }
    int32_t n_cached() const { return static_cast<int32_t>(by_hash_.size()); }
    int32_t references(int32_t block) const { return refs_.at(static_cast<size_t>(block)); }

private:
    // The free committed block below `limit` to receive content freed at `freed`, or -1.
    int32_t relocation_target(int32_t limit, uint64_t freed);
    void move_content(int32_t from, int32_t to);
    void make_free(int32_t block);
    void forget(int32_t block);  // drops the block's hash, whatever list it is on
    void unlink(int32_t block);
    void push_back(int32_t block);

    std::vector<int32_t> refs_;
    std::vector<BlockHash> hashes_;  // 0: no content worth finding
    std::unordered_map<BlockHash, int32_t> by_hash_;
    std::set<int32_t> blank_;  // free committed blocks without content
    // Free committed blocks with content, as a doubly linked list threaded through the blocks, oldest first;
    // -1 ends it.
    std::vector<int32_t> prev_, next_;
    int32_t head_ = -1, tail_ = -1, n_cached_free_ = 0;
    int32_t n_committed_ = 0;
    std::vector<uint64_t> freed_at_;  // when each cached free block was freed, by a counter
    uint64_t frees_ = 0;
};

template <typename Copy>
void BlockPool::relocate_top(int32_t n, Copy&& copy) {
    const int32_t first = n_committed_ - n;
    std::vector<int32_t> movers;
    for (int32_t b = first; b < n_committed_; ++b) {
        if (refs_[static_cast<size_t>(b)] == 0 && published(b)) movers.push_back(b);
    }
    std::sort(movers.begin(), movers.end(), [this](int32_t a, int32_t b) {
        return freed_at_[static_cast<size_t>(a)] > freed_at_[static_cast<size_t>(b)];
    });
    for (int32_t from : movers) {
        const int32_t to = relocation_target(first, freed_at_[static_cast<size_t>(from)]);
        if (to < 0) break;
        copy(from, to);
        move_content(from, to);
    }
}

// One sequence's blocks in position order.
struct PageTable {
    std::vector<int32_t> blocks;
    int32_t slot(int32_t position, int32_t block_size) const {
        return blocks[static_cast<size_t>(position / block_size)] * block_size + position % block_size;
    }
};

}  // namespace cellm
