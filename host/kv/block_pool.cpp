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

BlockPool::BlockPool(int32_t n_blocks, int32_t n_committed)
    : refs_(static_cast<size_t>(n_blocks), 0), hashes_(static_cast<size_t>(n_blocks), 0),
      prev_(static_cast<size_t>(n_blocks), -1), next_(static_cast<size_t>(n_blocks), -1),
      freed_at_(static_cast<size_t>(n_blocks), 0) {
    grow(n_committed < 0 ? n_blocks : n_committed);
}

void BlockPool::push_back(int32_t block) {
    const auto i = static_cast<size_t>(block);
    prev_[i] = tail_;
    next_[i] = -1;
    if (tail_ >= 0) next_[static_cast<size_t>(tail_)] = block;
    else head_ = block;
    tail_ = block;
    ++n_cached_free_;
}

void BlockPool::unlink(int32_t block) {
    const auto i = static_cast<size_t>(block);
    if (prev_[i] >= 0) next_[static_cast<size_t>(prev_[i])] = next_[i];
    else head_ = next_[i];
    if (next_[i] >= 0) prev_[static_cast<size_t>(next_[i])] = prev_[i];
    else tail_ = prev_[i];
    prev_[i] = next_[i] = -1;
    --n_cached_free_;
}

void BlockPool::make_free(int32_t block) {
    if (published(block)) {
        push_back(block);
        freed_at_[static_cast<size_t>(block)] = ++frees_;
    } else {
        blank_.insert(block);
    }
}

int32_t BlockPool::relocation_target(int32_t limit, uint64_t freed) {
    if (!blank_.empty() && *blank_.begin() < limit) return *blank_.begin();
    // The cached list is oldest first: the first one below the limit is the content least worth keeping.
    for (int32_t b = head_; b >= 0; b = next_[static_cast<size_t>(b)]) {
        if (freed_at_[static_cast<size_t>(b)] >= freed) return -1;
        if (b < limit) return b;
    }
    return -1;
}

void BlockPool::move_content(int32_t from, int32_t to) {
    const BlockHash hash = hashes_[static_cast<size_t>(from)];
    const uint64_t freed = freed_at_[static_cast<size_t>(from)];
    if (published(to)) {
        unlink(to);
        forget(to);
    } else {
        blank_.erase(to);
    }
    unlink(from);
    forget(from);
    blank_.insert(from);
    hashes_[static_cast<size_t>(to)] = hash;
    by_hash_[hash] = to;
    // Back on the cached list in the place its age gives it.
    int32_t after = tail_;
    while (after >= 0 && freed_at_[static_cast<size_t>(after)] > freed) after = prev_[static_cast<size_t>(after)];
    const auto i = static_cast<size_t>(to);
    prev_[i] = after;
    next_[i] = after >= 0 ? next_[static_cast<size_t>(after)] : head_;
    if (next_[i] >= 0) prev_[static_cast<size_t>(next_[i])] = to;
    else tail_ = to;
    if (after >= 0) next_[static_cast<size_t>(after)] = to;
    else head_ = to;
    ++n_cached_free_;
    freed_at_[i] = freed;
}

int32_t BlockPool::allocate() {
    int32_t b = -1;
    if (!blank_.empty()) {
        b = *blank_.begin();
        blank_.erase(blank_.begin());
    } else if (head_ >= 0) {
        b = head_;
        unlink(b);
        forget(b);
    } else {
        return -1;
    }
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
    if (--r == 0) make_free(block);
}

void BlockPool::publish(int32_t block, BlockHash hash) {
    if (hashes_.at(static_cast<size_t>(block)) == hash) return;
    unpublish(block);
    if (by_hash_.emplace(hash, block).second) hashes_[static_cast<size_t>(block)] = hash;
}

void BlockPool::unpublish(int32_t block) {
    if (!published(block)) return;
    if (refs_[static_cast<size_t>(block)] == 0) {
        // A free block without content becomes blank.
        unlink(block);
        forget(block);
        blank_.insert(block);
    } else {
        forget(block);
    }
}

void BlockPool::forget(int32_t block) {
    BlockHash& h = hashes_.at(static_cast<size_t>(block));
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

void BlockPool::grow(int32_t n) {
    if (n < 0 || n > n_blocks() - n_committed_) throw Error("the KV pool cannot grow by " + std::to_string(n) + " blocks");
    for (int32_t b = n_committed_; b < n_committed_ + n; ++b) blank_.insert(b);
    n_committed_ += n;
}

bool BlockPool::shrink(int32_t n) {
    if (n < 0 || n > n_committed_) throw Error("the KV pool cannot shrink by " + std::to_string(n) + " blocks");
    const int32_t first = n_committed_ - n;
    for (int32_t b = first; b < n_committed_; ++b) {
        if (refs_[static_cast<size_t>(b)] > 0) return false;
    }
    for (int32_t b = first; b < n_committed_; ++b) {
        if (published(b)) {
            unlink(b);
            forget(b);
        } else {
            blank_.erase(b);
        }
    }
    n_committed_ = first;
    return true;
}

}  // namespace cellm
