#include "memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include <new>

namespace cellm::cpu {
namespace {

constexpr uint64_t huge_page = uint64_t{2} << 20;

// A private anonymous mapping of `size` bytes (a multiple of huge_page) starting on a huge-page boundary:
// mapped one huge page larger, then trimmed at both ends. nullptr when the system refuses.
std::byte* map_huge_aligned(uint64_t size, AlignedBytes::Commit commit) {
    void* p = mmap(nullptr, size + huge_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    const auto begin = reinterpret_cast<uintptr_t>(p);
    const uintptr_t aligned = (begin + huge_page - 1) & ~(huge_page - 1);
    if (aligned > begin) munmap(p, aligned - begin);
    const uintptr_t end = begin + size + huge_page;
    if (end > aligned + size) munmap(reinterpret_cast<void*>(aligned + size), end - aligned - size);
    madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);  // advice: a kernel without THP ignores it
    // After the huge-page advice, so that the pages committed are huge. A kernel before 5.14 refuses the
    // request, and C library headers without the flag leave it out: the pages then come on first touch.
#if defined(MADV_POPULATE_WRITE)
    if (commit == AlignedBytes::Commit::now) madvise(reinterpret_cast<void*>(aligned), size, MADV_POPULATE_WRITE);
#else
    (void)commit;
#endif
    return reinterpret_cast<std::byte*>(aligned);
}

// AddressSanitizer guards heap blocks, not mappings: its builds keep every allocation on the heap.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool map_large = false;
#else
constexpr bool map_large = true;
#endif

}  // namespace

AlignedBytes::AlignedBytes(uint64_t size)
    : data_(static_cast<std::byte*>(::operator new(size > 0 ? size : 1, std::align_val_t{alignment})), Free{0}) {}

AlignedBytes AlignedBytes::huge(uint64_t size, Commit commit) {
    if (!map_large || size < huge_page) return AlignedBytes(size);
    const uint64_t mapped = (size + huge_page - 1) & ~(huge_page - 1);
    std::byte* p = map_huge_aligned(mapped, commit);
    if (p == nullptr) throw std::bad_alloc();
    AlignedBytes bytes;
    bytes.data_ = std::unique_ptr<std::byte, Free>(p, Free{mapped});
    return bytes;
}

AlignedBytes AlignedBytes::by_range(uint64_t size) {
    const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    if (!map_large || size < page) return AlignedBytes(size);
    const uint64_t mapped = (size + page - 1) / page * page;
    void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    // Where transparent huge pages are "always", a first touch would still commit 2 MiB.
    madvise(p, mapped, MADV_NOHUGEPAGE);
    AlignedBytes bytes;
    bytes.data_ = std::unique_ptr<std::byte, Free>(static_cast<std::byte*>(p), Free{mapped});
    return bytes;
}

void AlignedBytes::set_resident(uint64_t offset, uint64_t size, bool resident) const {
    const uint64_t mapped = data_.get_deleter().mapped;
    if (mapped == 0 || size == 0) return;
    const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t end = std::min(mapped, offset + size);
    const uint64_t first = resident ? offset / page * page : (offset + page - 1) / page * page;
    const uint64_t last = resident ? std::min(mapped, (end + page - 1) / page * page) : end / page * page;
    if (first >= last) return;
    std::byte* p = data_.get() + first;
    if (!resident) {
        madvise(p, last - first, MADV_DONTNEED);
        return;
    }
#if defined(MADV_POPULATE_WRITE)
    if (madvise(p, last - first, MADV_POPULATE_WRITE) == 0) return;
#endif
    // A kernel before 5.14: fault each page in by rewriting one of its bytes, which keeps the contents.
    for (uint64_t at = 0; at < last - first; at += page) {
        volatile std::byte* b = p + at;
        *b = *b;
    }
}

void AlignedBytes::Free::operator()(std::byte* p) const {
    if (mapped > 0) munmap(p, mapped);
    else ::operator delete(p, std::align_val_t{alignment});
}

}  // namespace cellm::cpu
