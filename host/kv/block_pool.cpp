#include "kv/block_pool.h"

#include "error.h"

#include <string>

namespace cellm {

BlockHash hash_block(BlockHash previous, const int32_t* tokens, int32_t n_tokens) {
    // FNV-1a over the previous hash and the token ids, then a final mix; 0 is reserved for "no content".
    uint64_t h = 1469598103934665603ull ^ previous;
    auto mix = [&h](uint64_t v) {
        for (int i = 0; i < 8; ++i) {
            h ^= (v >> (8 * i)) & 0xff;
            h *= 1099511628211ull;
        }
    };
    mix(previous);
    for (int32_t i = 0; i < n_tokens; ++i) mix(static_cast<uint32_t>(tokens[i]));
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h == 0 ? 1 : h;
}

BlockPool::BlockPool(int32_t n_blocks)
    : refs_(static_cast<size_t>(n_blocks), 0), hashes_(static_cast<size_t>(n_blocks), 0),
      prev_(static_cast<size_t>(n_blocks), -1), next_(static_cast<size_t>(n_blocks), -1) {
    for (int32_t b = 0; b < n_blocks; ++b) push_back(b);
}

void BlockPool::push_back(int32_t block) {
    const auto i = static_cast<size_t>(block);
    prev_[i] = tail_;
    next_[i] = -1;
    if (tail_ >= 0) next_[static_cast<size_t>(tail_)] = block;
    else head_ = block;
    tail_ = block;
    ++n_free_;
}

void BlockPool::unlink(int32_t block) {
    const auto i = static_cast<size_t>(block);
    if (prev_[i] >= 0) next_[static_cast<size_t>(prev_[i])] = next_[i];
    else head_ = next_[i];
    if (next_[i] >= 0) prev_[static_cast<size_t>(next_[i])] = prev_[i];
    else tail_ = prev_[i];
    prev_[i] = next_[i] = -1;
    --n_free_;
}

int32_t BlockPool::allocate() {
    if (head_ < 0) return -1;
    const int32_t b = head_;
    unlink(b);
    unpublish(b);
    refs_[static_cast<size_t>(b)] = 1;
    return b;
}

void BlockPool::retain(int32_t block) {
    int32_t& r = refs_.at(static_cast<size_t>(block));
    if (r <= 0) throw Error("KV block " + std::to_string(block) + " is free and cannot be retained");
    ++r;
}

void BlockPool::release(int32_t block) {
    int32_t& r = refs_.at(static_cast<size_t>(block));
    if (r <= 0) throw Error("KV block " + std::to_string(block) + " released more often than retained");
    if (--r == 0) push_back(block);
}

void BlockPool::publish(int32_t block, BlockHash hash) {
    if (hashes_.at(static_cast<size_t>(block)) == hash) return;
    unpublish(block);
    if (by_hash_.emplace(hash, block).second) hashes_[static_cast<size_t>(block)] = hash;
}

void BlockPool::unpublish(int32_t block) {
    BlockHash& h = hashes_.at(static_cast<size_t>(block));
    if (h == 0) return;
    by_hash_.erase(h);
    h = 0;
}

int32_t BlockPool::acquire_cached(BlockHash hash) {
    const auto it = by_hash_.find(hash);
    if (it == by_hash_.end()) return -1;
    const int32_t b = it->second;
    if (refs_[static_cast<size_t>(b)]++ == 0) unlink(b);
    return b;
}

}  // namespace cellm
