#include "repacked.hpp"

#include "blocks.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace cellm::openblas {
namespace {

// Where a stored block keeps its fields (ggml's layouts).
struct Stored {
    int64_t bytes;
    int64_t m_at;   // fp16 min, or -1
    int64_t qh_at;  // 32 fifth bits, or -1
    int64_t qs_at;
};

Stored stored(cellm_dtype type) {
    switch (type) {
    case CELLM_TYPE_Q4_0: return {18, -1, -1, 2};
    case CELLM_TYPE_Q4_1: return {20, 2, -1, 4};
    case CELLM_TYPE_Q5_0: return {22, -1, 2, 6};
    case CELLM_TYPE_Q5_1: return {24, 2, 4, 8};
    default: return {34, -1, -1, 2};  // Q8_0
    }
}

// Rows of group g into `out` (the group's blocks).
void repack_group(const cpu::Node& w, const RepackedFormat& f, int64_t g, std::byte* out) {
    const Stored s = stored(w.type);
    const int64_t k = w.ne[0], m = w.ne[1], nb = k / 32;
    const uint64_t row_bytes = blocks::row_bytes(w.type, k);
    std::memset(out, 0, static_cast<size_t>(nb * f.block_bytes()));
    for (int64_t r = 0; r < group_rows && g * group_rows + r < m; ++r) {
        const auto* row = reinterpret_cast<const uint8_t*>(w.data) + static_cast<uint64_t>(g * group_rows + r) * row_bytes;
        for (int64_t i = 0; i < nb; ++i) {
            const uint8_t* block = row + i * s.bytes;
            auto* codes = reinterpret_cast<uint8_t*>(out + i * f.block_bytes());
            if (f.nibbles) {
                for (int q = 0; q < 4; ++q) std::memcpy(codes + q * 64 + r * 4, block + s.qs_at + 4 * q, 4);
            } else {
                // x86's VNNI multiplies unsigned by signed bytes, so the codes move up by 128 (the starts take it
                // back); ARM's SDOT multiplies signed bytes, so they stay as stored.
#if defined(__aarch64__)
                constexpr int code_bias = 0;
#else
                constexpr int code_bias = 128;
#endif
                for (int e = 0; e < 32; ++e)
                    codes[e / 4 * 64 + r * 4 + e % 4] =
                        static_cast<uint8_t>(static_cast<int8_t>(block[s.qs_at + e]) + code_bias);
            }
            if (f.fifth_bits) {
                uint32_t qh;
                std::memcpy(&qh, block + s.qh_at, sizeof qh);
#if defined(__aarch64__)
                // ARM: byte 4r + t holds, in bit j, the fifth bit of row r's element 4j + t.
                for (int t = 0; t < 4; ++t)
                    for (int j = 0; j < 8; ++j)
                        codes[256 + 4 * r + t] |= static_cast<uint8_t>(((qh >> (4 * j + t)) & 1u) << j);
#else
                for (int j = 0; j < 8; ++j) {
                    uint64_t mask;
                    std::memcpy(&mask, codes + 256 + 8 * j, sizeof mask);
                    mask |= uint64_t{(qh >> (4 * j)) & 0xFu} << (4 * r);
                    std::memcpy(codes + 256 + 8 * j, &mask, sizeof mask);
                }
#endif
            }
            std::memcpy(codes + f.code_bytes() + 2 * r, block, 2);
            if (f.affine) std::memcpy(codes + f.code_bytes() + 32 + 2 * r, block + s.m_at, 2);
        }
    }
}

// Rows of group g copied as they are stored (copied_as_stored).
void copy_group(const cpu::Node& w, int64_t g, std::byte* out) {
    const uint64_t row_bytes = blocks::row_bytes(w.type, w.ne[0]);
    const int64_t rows = std::min(group_rows, w.ne[1] - g * group_rows);
    std::memcpy(out, w.data + static_cast<uint64_t>(g * group_rows) * row_bytes, static_cast<size_t>(rows) * row_bytes);
}

// Whether [begin, end) lies in one read-only private mapping of a file: dropping its pages from this process
// then loses nothing, as a later read faults them in again from the page cache or the file.
bool in_read_only_file_mapping(uintptr_t begin, uintptr_t end) {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
        uintptr_t lo = 0, hi = 0;
        char perms[5] = {};
        unsigned long long offset = 0, inode = 0;
        char dev[16] = {};
        if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " %4s %llx %15s %llu", &lo, &hi, perms, &offset, dev,
                        &inode) != 6)
            continue;
        if (begin >= lo && end <= hi) return perms[1] == '-' && perms[3] == 'p' && inode != 0;
    }
    return false;
}

// Drops this process's pages inside [data, data + size) (whole pages only).
void release_pages(const std::byte* data, uint64_t size) {
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
    const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + size) / page * page;
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);  // advice: failure is fine
}

// Groups repacked between page releases: about 4096 rows, so a large weight (Gemma-3's 178 MB embedding) never
// has its stored rows and its copy resident at once.
constexpr int64_t release_groups = 256;

// The size of a shared chunk of repacked weights; larger weights get a chunk of their own.
constexpr uint64_t chunk_bytes = uint64_t{32} << 20;

}  // namespace

const RepackedFormat* repacked_format(cellm_dtype type) {
    static constexpr RepackedFormat q4_0{true, false, false, 8}, q4_1{true, false, true, 0},
        q5_0{true, true, false, 16}, q5_1{true, true, true, 0}, q8_0{false, false, false, 128};
    switch (type) {
    case CELLM_TYPE_Q4_0: return &q4_0;
    case CELLM_TYPE_Q4_1: return &q4_1;
    case CELLM_TYPE_Q5_0: return &q5_0;
    case CELLM_TYPE_Q5_1: return &q5_1;
    case CELLM_TYPE_Q8_0: return &q8_0;
    default: return nullptr;
    }
}

bool copied_as_stored(cellm_dtype type) {
    return type == CELLM_TYPE_Q4_K || type == CELLM_TYPE_Q5_K || type == CELLM_TYPE_Q6_K;
}

const RepackedWeight& RepackedWeights::get(const cpu::Node& w, ThreadPool& pool) {
    auto found = by_address_.find(w.data);
    if (found != by_address_.end() && found->second.type == w.type && found->second.k == w.ne[0] &&
        found->second.m == w.ne[1])
        return found->second;
    if (found != by_address_.end()) {
        bytes_ -= found->second.bytes;
        by_address_.erase(found);
    }
    const RepackedFormat* f = repacked_format(w.type);
    RepackedWeight r;
    r.type = w.type;
    r.k = w.ne[0];
    r.m = w.ne[1];
    const uint64_t row_bytes = blocks::row_bytes(w.type, r.k);
    const auto group_bytes = f != nullptr ? r.k / 32 * f->block_bytes() : static_cast<int64_t>(group_rows * row_bytes);
    r.bytes = f != nullptr ? static_cast<uint64_t>(r.groups() * group_bytes) : row_bytes * static_cast<uint64_t>(r.m);
    std::byte* base = allocate(r.bytes, r.chunk);
    r.data = base;
    // Products no longer read the stored rows, so where they are a read-only file mapping (a GGUF opened in
    // place) their pages leave this process as they are repacked. Other memory is left alone.
    const auto first = reinterpret_cast<uintptr_t>(w.data);
    const bool release = in_read_only_file_mapping(first, first + row_bytes * static_cast<uint64_t>(r.m));
    for (int64_t g0 = 0; g0 < r.groups(); g0 += release_groups) {
        const int64_t n = std::min(release_groups, r.groups() - g0);
        pool.run(n, [&](int64_t g, int) {
            if (f != nullptr) repack_group(w, *f, g0 + g, base + (g0 + g) * group_bytes);
            else copy_group(w, g0 + g, base + (g0 + g) * group_bytes);
        });
        if (release) {
            const int64_t rows = std::min(n * group_rows, r.m - g0 * group_rows);
            release_pages(w.data + static_cast<uint64_t>(g0 * group_rows) * row_bytes, static_cast<uint64_t>(rows) * row_bytes);
        }
    }
    bytes_ += r.bytes;
    new_bytes_ += r.bytes;
    ++new_count_;
    return by_address_.emplace(w.data, std::move(r)).first->second;
}

std::byte* RepackedWeights::allocate(uint64_t bytes, std::shared_ptr<const cpu::AlignedBytes>& chunk) {
    const uint64_t size = (bytes + cpu::alignment - 1) / cpu::alignment * cpu::alignment;
    if (size >= chunk_bytes) {
        chunk = std::make_shared<const cpu::AlignedBytes>(cpu::AlignedBytes::huge(size, cpu::AlignedBytes::Commit::on_touch));
        return chunk->data();
    }
    chunk = filling_.lock();
    if (chunk == nullptr || filling_used_ + size > chunk_bytes) {
        chunk = std::make_shared<const cpu::AlignedBytes>(cpu::AlignedBytes::huge(chunk_bytes, cpu::AlignedBytes::Commit::on_touch));
        filling_ = chunk;
        filling_used_ = 0;
    }
    std::byte* at = chunk->data() + filling_used_;
    filling_used_ += size;
    return at;
}

void RepackedWeights::forget(const std::byte* begin, uint64_t size) {
    for (auto it = by_address_.lower_bound(begin); it != by_address_.end() && it->first < begin + size;) {
        bytes_ -= it->second.bytes;
        it = by_address_.erase(it);
    }
}

#if defined(__aarch64__)
// Chosen here, in code built for every ARM core, rather than in the SDOT file itself.
RepackedDot repacked_dot() {
    static const bool sdot = std::ranges::find(runnable_kernels(), dotprod_kernels()) != runnable_kernels().end();
    return sdot ? repacked_dot_sdot : nullptr;
}
#elif !defined(__x86_64__)
RepackedDot repacked_dot() { return nullptr; }
#endif

}  // namespace cellm::openblas
