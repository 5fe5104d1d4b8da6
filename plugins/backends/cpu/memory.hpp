// Host memory of the CPU backends: 64-byte aligned allocations and buffers (owned or borrowed).
#pragma once

#include <cellm/backend.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace cellm::cpu {

inline constexpr size_t alignment = 64;

// An aligned byte array allocated once.
class AlignedBytes {
public:
    AlignedBytes() = default;
    explicit AlignedBytes(uint64_t size);
    // The same, from 2 MiB on as its own mapping, aligned to 2 MiB and advised to use transparent huge pages
    // (where the kernel's policy is "madvise", Debian's default): for what a decode step streams, weights and KV
    // pools, whose rows in 4 KiB pages missed the TLB on most reads (SmolLM2 decoded 20% faster on huge pages).
    // Memory that is allocated often (a plan's arena) stays on the heap, which reuses it: each fresh huge page is
    // zeroed by the kernel when it is committed.
    // `commit`: Commit::now faults every page in here, so that nothing is zeroed on the serving path later. A KV
    // pool filled as sessions grow took its page faults inside decode steps (8 sessions: 0.5 ms of an 8.5 ms
    // step on the VM), as llama.cpp, which clears its cache at load, does not. Commit::on_touch leaves pages
    // to their first write (memory that may stay partly unused, like a repacking chunk).
    enum class Commit { now, on_touch };
    static AlignedBytes huge(uint64_t size, Commit commit);
    // Memory whose owner commits and gives back ranges itself (set_resident): a mapping of small pages, since a
    // huge page would commit 2 MiB of a pool for its first row. Heap memory below a page or under ASan.
    static AlignedBytes by_range(uint64_t size);
    // Commits [offset, offset + size) (pages rounded outward, contents kept) or gives it back (pages rounded
    // inward, contents then zero). Heap memory is always committed: nothing to do.
    void set_resident(uint64_t offset, uint64_t size, bool resident) const;
    std::byte* data() const { return data_.get(); }

private:
    struct Free {
        uint64_t mapped;  // bytes mapped at the pointer, 0 for operator new
        void operator()(std::byte* p) const;
    };
    std::unique_ptr<std::byte, Free> data_;
};

}  // namespace cellm::cpu

// The ABI's opaque buffer handle.
struct cellm_buffer {
    std::byte* data = nullptr;
    uint64_t size = 0;
    bool writable = true;            // false for wrapped host memory
    cellm::cpu::AlignedBytes owned;  // empty when wrapping
};
