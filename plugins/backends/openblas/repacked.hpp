// Fast precision's products for the 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): weight rows
// repacked once, at their first product, into groups of 16 rows interleaved four codes at a time, so that one
// 512-bit register holds the same four codes of sixteen rows and one vpdpbusd adds four products to each row's
// sum. A block's integer sum is complete in its lane, and it meets the floats once per block and column, as in
// ggml's plain C dot product (sumf += d_w * d_a * sum + m_w * s_a), where exact precision keeps the reference's
// eight float lanes per block and pays three float operations for every integer one.
//
// Layout of group g (rows 16g .. 16g + 15, zero rows past the end), block after block:
// - codes: for the 4- and 5-bit formats, four chunks of 64 bytes (chunk q: row r's stored nibble bytes
//   4q .. 4q + 3 at 4r; low nibbles are elements 4q.., high nibbles 16 + 4q..), and for Q5 the fifth bits in
//   64 bytes: on x86 eight 64-bit masks (mask j: bit 4r + t is the fifth bit of row r's element 4j + t), as
//   AVX-512's mask registers take them, on ARM 64 bytes of eight bits (byte 4r + t: bit j is that same bit),
//   which a shift and an AND turn into a register of the 16s to add; for Q8_0 eight chunks of 64 bytes (chunk j:
//   row r's codes 4j .. 4j + 3, plus 128 as unsigned bytes on x86, as stored on ARM);
// - d: the 16 rows' fp16 scales as stored; m: their fp16 mins (Q4_1, Q5_1).
// Every format keeps its stored size.
//
// The K-quants (Q4_K, Q5_K, Q6_K) keep their stored layout, which their integer kernels read at the speed of
// memory already; their rows are only copied, so that they too stream from huge pages (memory.hpp) rather than
// from a file mapping's 4 KiB pages.
#pragma once

#include "kernels.hpp"
#include "memory.hpp"
#include "plan.hpp"
#include "thread_pool.hpp"

#include <cellm/tensor.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace cellm::openblas {

inline constexpr int64_t group_rows = 16;

struct RepackedFormat {
    bool nibbles;      // codes as nibble chunks (the 4- and 5-bit formats)
    bool fifth_bits;   // and fifth-bit masks (Q5_0, Q5_1)
    bool affine;       // a min per block (Q4_1, Q5_1)
    int32_t bias;      // what the unsigned codes carry over the stored value: 8, 16, 128, or 0 when affine
    constexpr int64_t code_bytes() const { return nibbles ? 256 + (fifth_bits ? 64 : 0) : 512; }
    constexpr int64_t block_bytes() const { return code_bytes() + 32 + (affine ? 32 : 0); }
};

// The format of a weight type, or nullptr for types fast precision does not repack.
const RepackedFormat* repacked_format(cellm_dtype type);

// Whether fast precision copies a weight type's rows as stored (the K-quants).
bool copied_as_stored(cellm_dtype type);

struct RepackedWeight {
    cellm_dtype type = CELLM_TYPE_F32;
    int64_t k = 0, m = 0;  // row length and rows
    uint64_t bytes = 0;
    const std::byte* data = nullptr;  // inside `chunk`
    std::shared_ptr<const cpu::AlignedBytes> chunk;
    int64_t groups() const { return (m + group_rows - 1) / group_rows; }
};

// Rows [g0 * 16, g1 * 16) of a repacked weight against n_cols quantized columns:
// y[c * y_stride + r] = sum over blocks of (d_r * scale_c) * (integer sum - bias * code sum) + m_r * sum_c.
// `starts` holds, per column and block (c * n_blocks + i), -bias times the block's code sum.
using RepackedDot = void (*)(const RepackedWeight& w, int64_t g0, int64_t g1, const Q8Columns& x,
                             const int32_t* starts, int64_t n_cols, float* y, int64_t y_stride);

// Calls f.template operator()<Nibbles, Fifth, Affine>() with a repacked weight type's RepackedFormat fields as
// constants (Q8_0 for any type without a repacked format): the kernels' one dispatch on the type.
template <class F>
void with_repacked_format(cellm_dtype type, F&& f) {
    switch (type) {
    case CELLM_TYPE_Q4_0: f.template operator()<true, false, false>(); break;
    case CELLM_TYPE_Q4_1: f.template operator()<true, false, true>(); break;
    case CELLM_TYPE_Q5_0: f.template operator()<true, true, false>(); break;
    case CELLM_TYPE_Q5_1: f.template operator()<true, true, true>(); break;
    default: f.template operator()<false, false, false>(); break;  // Q8_0
    }
}

// The AVX-512 VNNI kernel (repacked_avx512.cpp) or the ARM SDOT one (repacked_dotprod.cpp), or nullptr when this
// CPU (or build) has neither.
RepackedDot repacked_dot();
#if defined(__aarch64__)
extern const RepackedDot repacked_dot_sdot;  // repacked_dotprod.cpp: run it only where the CPU has SDOT
#endif

// Repacked weights of one backend instance, made at a weight's first fast product and kept until the host frees
// the buffer they came from.
class RepackedWeights {
public:
    // The repacked form (or the copy) of weight node `w` (read-only host memory), made now if needed, on the
    // pool's threads.
    const RepackedWeight& get(const cpu::Node& w, ThreadPool& pool);
    void forget(const std::byte* begin, uint64_t size);
    uint64_t bytes() const { return bytes_; }
    // Weights repacked since the last call, and their bytes.
    std::pair<int, uint64_t> take_new() { return {std::exchange(new_count_, 0), std::exchange(new_bytes_, 0)}; }

private:
    // Repacked weights share chunks of huge pages (cpu::AlignedBytes): SmolLM2's are 211 weights of 0.1 to
    // 0.5 MB, each too small for a huge page of its own. A chunk is freed with the last weight in it.
    std::byte* allocate(uint64_t bytes, std::shared_ptr<const cpu::AlignedBytes>& chunk);
    std::weak_ptr<const cpu::AlignedBytes> filling_;  // the chunk new weights go to, while any weight uses it
    uint64_t filling_used_ = 0;

    std::map<const std::byte*, RepackedWeight> by_address_;
    uint64_t bytes_ = 0, new_bytes_ = 0;
    int new_count_ = 0;
};

}  // namespace cellm::openblas
