#include "matmul.hpp"

#include "blocks.h"
#include "kernels.hpp"
#include "memory.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstring>

namespace cellm::openblas {
namespace {

template <class T>
T* sized(std::vector<T>& v, int64_t n) {
    if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
    return v.data();
}

// Rows per task: enough tasks that both cores stay busy to the end, few enough that taking one is cheap.
int64_t rows_per_task(int64_t rows, int threads, int64_t minimum) {
    return std::max<int64_t>(minimum, rows / (static_cast<int64_t>(threads) * 8));
}

// Rows [0, m) in tasks of `per_task` rows across the pool: body(r0, r1, thread) for each task.
template <class Body>
void for_row_tasks(ThreadPool& pool, int64_t m, int64_t per_task, Body body) {
    pool.run((m + per_task - 1) / per_task, [&](int64_t task, int thread) {
        const int64_t r0 = task * per_task;
        body(r0, std::min(m, r0 + per_task), thread);
    });
}

// Expands rows [r0, r1) of w into `out` (row after row).
void expand_rows(const cpu::Node& w, int64_t r0, int64_t r1, float* out) {
    const int64_t k = w.ne[0];
    const uint64_t row_bytes = blocks::row_bytes(w.type, k);
    const int s = slot(w.type);
    const RowDequantize fast = s >= 0 ? kernels().dequantize[s] : nullptr;
    for (int64_t r = r0; r < r1; ++r) {
        const std::byte* row = w.data + static_cast<uint64_t>(r) * row_bytes;
        float* dst = out + (r - r0) * k;
        if (w.type == CELLM_TYPE_F32) std::memcpy(dst, row, static_cast<size_t>(k) * sizeof(float));
        else if (fast != nullptr) fast(row, dst, k / 32);
        else blocks::dequantize_row(w.type, row, dst, k);
    }
}

// Columns from which the threads share the packing of the columns: below, the layout is small and handing it to
// the pool would cost a decode step's matmul more than the packing itself.
constexpr int64_t pack_split_columns = 16;

// The parts the packing of n columns goes in: one per thread for prefill, one on the calling thread below.
template <class Pack>
void pack_in_parts(ThreadPool& pool, int64_t n, Pack pack) {
    if (n < pack_split_columns) pack(0, 1);
    else pool.run(pool.size(), [&](int64_t part, int) { pack(part, pool.size()); });
}

// x's columns quantized in `form` in the scratch, unless they already are (by an earlier product of x, or by the op
// that made x).
void quantize_input(const cpu::Node& x, int32_t x_index, ColumnForm form, ThreadPool& pool, MatmulScratch& s) {
    const int32_t held = form == ColumnForm::q8 ? s.q8_input : s.q8k_input;
    if (x_index >= 0 && x_index == held) return;
    const int64_t k = x.ne[0], n = x.rows();
    prepare_columns(s, form, n, k);
    pool.run(n, [&](int64_t c, int) { quantize_column(s, form, x.f32() + c * k, c, k); });
    columns_hold(s, form, x_index);
}

// x's columns as Q8 blocks (blocks::quantize_q8).
Q8Columns quantized_columns(const cpu::Node& x, int32_t x_index, ThreadPool& pool, MatmulScratch& s) {
    quantize_input(x, x_index, ColumnForm::q8, pool, s);
    return {s.codes.data(), s.scales.data(), s.sums.data(), s.offsets.data(), x.ne[0] / 32};
}

// The quantized path for weight types with a Q8 dot product: bit-equal to the reference for any split.
void matmul_q8(const cpu::Node& w, const cpu::Node& x, const cpu::Node& y, ThreadPool& pool, MatmulScratch& s,
               int32_t x_index) {
    const int64_t k = w.ne[0], m = w.ne[1], n = x.rows(), nb = k / 32;
    const Kernels& kern = kernels();
    Q8Columns columns = quantized_columns(x, x_index, pool, s);
    const int sl = slot(w.type);
    if (kern.pack_columns != nullptr && sl >= 0) {
        s.packed.resize(kern.pack_columns(columns, n, sl, nullptr, 0, 1));
        pack_in_parts(pool, n, [&](int64_t part, int64_t parts) {
            kern.pack_columns(columns, n, sl, s.packed.data(), part, parts);
        });
        columns.packed = s.packed.data();
    }

    const RowsDotQ8 fast = sl >= 0 ? kern.dot_q8[sl] : nullptr;
    const cellm_dtype type = w.type;
    const uint64_t row_bytes = blocks::row_bytes(type, k);
    for_row_tasks(pool, m, rows_per_task(m, pool.size(), 16), [&](int64_t r0, int64_t r1, int) {
        if (fast != nullptr) {
            fast(w.data + static_cast<uint64_t>(r0) * row_bytes, row_bytes, r1 - r0, columns, n, y.f32() + r0, m);
            return;
        }
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = 0; c < n; ++c)
                y.f32()[c * m + r] = blocks::dot_q8(type, w.data + static_cast<uint64_t>(r) * row_bytes,
                                                    columns.codes + c * k, columns.scales + c * nb,
                                                    columns.sums + c * nb, k);
    });
}

// Whether fast precision may keep its own copy of weight w (repacked or as stored): only of read-only memory, as
// a writable buffer could change under the copy.
bool read_only(const cpu::Node& w) { return w.buffer != nullptr && !w.buffer->writable; }

// Whether fast precision's repacked path takes weight w: a block format, read-only, and a CPU with the kernel.
bool repackable(const cpu::Node& w) {
    return repacked_dot() != nullptr && repacked_format(w.type) != nullptr && read_only(w);
}

}  // namespace

ColumnForm column_form(cellm_dtype weight) {
    if (blocks::has_q8_dot(weight)) return ColumnForm::q8;
    if (blocks::has_q8k_dot(weight)) return ColumnForm::q8k;
    return ColumnForm::floats;
}

void prepare_columns(MatmulScratch& s, ColumnForm form, int64_t n, int64_t k) {
    sized(s.codes, n * k);
    if (form == ColumnForm::q8) {
        sized(s.scales, n * (k / 32));
        sized(s.sums, n * (k / 32));
        sized(s.offsets, n * (k / 32) * 8);
    } else if (form == ColumnForm::q8k) {
        sized(s.scales, n * (k / 256));
        sized(s.k_sums, n * (k / 256) * 16);
    }
}

void quantize_column(MatmulScratch& s, ColumnForm form, const float* x, int64_t c, int64_t k) {
    const Kernels& kern = kernels();
    if (form == ColumnForm::q8) {
        const int64_t nb = k / 32;
        kern.quantize_q8(x, k, s.codes.data() + c * k, s.scales.data() + c * nb, s.sums.data() + c * nb,
                         s.offsets.data() + c * nb * 8);
    } else if (form == ColumnForm::q8k) {
        const int64_t nb = k / 256;
        kern.quantize_q8k(x, k, s.codes.data() + c * k, s.scales.data() + c * nb, s.k_sums.data() + c * nb * 16);
    }
}

void columns_hold(MatmulScratch& s, ColumnForm form, int32_t x_index) {
    // The arrays hold one form at a time.
    s.q8_input = form == ColumnForm::q8 ? x_index : -1;
    s.q8k_input = form == ColumnForm::q8k ? x_index : -1;
}

bool matmul_repacked(std::span<const Product> products, const cpu::Node& x, ThreadPool& pool, MatmulScratch& s,
                     RepackedWeights& repacked, int32_t x_index) {
    const cellm_dtype type = products.front().w->type;
    for (const Product& p : products)
        if (!repackable(*p.w) || p.w->type != type) return false;
    const RepackedDot dot = repacked_dot();
    const int64_t n = x.rows(), nb = x.ne[0] / 32;
    const Q8Columns columns = quantized_columns(x, x_index, pool, s);
    // -bias times each block's code sum, from the offsets quantize_q8 already holds (-128 times each quad's sum).
    int32_t* starts = sized(s.starts, n * nb);
    const int32_t bias = repacked_format(type)->bias;
    for (int64_t b = 0; b < n * nb; ++b) {
        int32_t offset = 0;
        for (int l = 0; l < 8; ++l) offset += columns.offsets[b * 8 + l];
        starts[b] = bias * (offset / 128);
    }
    // Every product's groups of rows as one list of tasks, so that the products share one hand-off to the pool
    // and one wait for its slowest thread.
    std::vector<MatmulScratch::RepackedPart>& parts = s.parts;
    parts.clear();
    int64_t tasks = 0;
    for (const Product& p : products) {
        const RepackedWeight& rows = repacked.get(*p.w, pool);
        const int64_t per_task = std::max<int64_t>(1, rows.groups() / (static_cast<int64_t>(pool.size()) * 8));
        parts.push_back({&rows, p.y->f32(), per_task, tasks});
        tasks += (rows.groups() + per_task - 1) / per_task;
    }
    pool.run(tasks, [&](int64_t task, int) {
        size_t k = 0;
        while (k + 1 < parts.size() && task >= parts[k + 1].first_task) ++k;
        const MatmulScratch::RepackedPart& part = parts[k];
        const int64_t g0 = (task - part.first_task) * part.per_task;
        dot(*part.rows, g0, std::min(part.rows->groups(), g0 + part.per_task), columns, starts, n, part.y,
            part.rows->m);
    });
    return true;
}

namespace {

// The K-quants: each column quantized once to Q8_K blocks, then integer dots per block; bit-equal to the
// reference (blocks::dot_q8_k) for any split. The rows are read at `stored`: w's own, or fast precision's copy.
void matmul_q8k(const cpu::Node& w, const std::byte* stored, const cpu::Node& x, const cpu::Node& y, ThreadPool& pool,
                MatmulScratch& s, int32_t x_index) {
    const int64_t k = w.ne[0], m = w.ne[1], n = x.rows(), nb = k / 256;
    quantize_input(x, x_index, ColumnForm::q8k, pool, s);
    const int8_t* codes = s.codes.data();
    const float* scales = s.scales.data();
    const int16_t* sums = s.k_sums.data();
    const Kernels& kern = kernels();
    Q8KColumns columns{codes, scales, sums, nb};
    if (kern.pack_k_columns != nullptr) {
        s.packed.resize(kern.pack_k_columns(columns, n, nullptr, 0, 1));
        pack_in_parts(pool, n, [&](int64_t part, int64_t parts) {
            kern.pack_k_columns(columns, n, s.packed.data(), part, parts);
        });
        columns.packed = s.packed.data();
    }
    const int sl = k_slot(w.type);
    const RowsDotQ8K fast = sl >= 0 ? kern.dot_q8k[sl] : nullptr;
    const cellm_dtype type = w.type;
    const uint64_t row_bytes = blocks::row_bytes(type, k);
    for_row_tasks(pool, m, rows_per_task(m, pool.size(), 8), [&](int64_t r0, int64_t r1, int) {
        if (fast != nullptr) {
            fast(stored + static_cast<uint64_t>(r0) * row_bytes, row_bytes, r1 - r0, columns, n, y.f32() + r0, m);
            return;
        }
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = 0; c < n; ++c)
                y.f32()[c * m + r] = blocks::dot_q8_k(type, stored + static_cast<uint64_t>(r) * row_bytes, codes + c * k,
                                                      scales + c * nb, sums + c * nb * 16, k);
    });
}

// Activations as the weight type's dot product sees them (blocks::round_activations), column after column.
const float* round_columns(const cpu::Node& w, const cpu::Node& x, MatmulScratch& s) {
    const int64_t k = w.ne[0], n = x.rows();
    float* rounded = sized(s.rounded, n * k);
    for (int64_t c = 0; c < n; ++c) blocks::round_activations(w.type, x.f32() + c * k, rounded + c * k, k);
    return rounded;
}

}  // namespace

void matmul_sgemm(const cpu::Node& w, const cpu::Node& x, const cpu::Node& y, ThreadPool& pool, MatmulScratch& s) {
    const int64_t k = w.ne[0], m = w.ne[1], n = x.rows();
    const float* rounded = round_columns(w, x, s);
    if (w.type == CELLM_TYPE_F32 && n >= wide_columns) {
        // A wide batch of an F32 weight (a vision encoder's thousands of patches): the weight is read in place and
        // the columns go in blocks, each one SGEMM over every row, so OpenBLAS packs each column once instead of
        // once per panel of rows. The block width does not depend on the thread count, so neither do the results.
        const auto* weight = reinterpret_cast<const float*>(w.data);
        pool.run((n + wide_columns - 1) / wide_columns, [&](int64_t task, int) {
            const int64_t c0 = task * wide_columns, c1 = std::min(n, c0 + wide_columns);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(c1 - c0), static_cast<blasint>(m),
                        static_cast<blasint>(k), 1.0f, rounded + c0 * k, static_cast<blasint>(k), weight,
                        static_cast<blasint>(k), 0.0f, y.f32() + c0 * m, static_cast<blasint>(m));
        });
        return;
    }
    s.panels.resize(static_cast<size_t>(pool.size()));
    // Panels of at most ~256 KiB of floats keep the expanded rows in the core's L2 for SGEMM. The panel height
    // must not depend on the thread count: OpenBLAS rounds differently for different panel shapes, and results
    // should not change with the machine's core count.
    const int64_t per_task = std::clamp<int64_t>(std::min<int64_t>((64 * 1024) / k, m / 16), 16, 256);
    for_row_tasks(pool, m, per_task, [&](int64_t r0, int64_t r1, int thread) {
        float* panel = sized(s.panels[static_cast<size_t>(thread)], per_task * k);
        expand_rows(w, r0, r1, panel);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(n), static_cast<blasint>(r1 - r0),
                    static_cast<blasint>(k), 1.0f, rounded, static_cast<blasint>(k), panel, static_cast<blasint>(k),
                    0.0f, y.f32() + r0, static_cast<blasint>(m));
    });
}

namespace {

// Few columns of a float weight type: expand each row once, meet every column.
void matmul_rows(const cpu::Node& w, const cpu::Node& x, const cpu::Node& y, ThreadPool& pool, MatmulScratch& s) {
    const int64_t k = w.ne[0], m = w.ne[1], n = x.rows();
    const float* rounded = round_columns(w, x, s);
    s.panels.resize(static_cast<size_t>(pool.size()));
    for_row_tasks(pool, m, rows_per_task(m, pool.size(), 8), [&](int64_t r0, int64_t r1, int thread) {
        float* row = sized(s.panels[static_cast<size_t>(thread)], k);
        for (int64_t r = r0; r < r1; ++r) {
            if (w.type == CELLM_TYPE_F16) {
                // Halves widen inside the dot product (F16C); the same sums as expanding the row first.
                const auto* halves = reinterpret_cast<const uint16_t*>(w.data) + r * k;
                for (int64_t c = 0; c < n; ++c) y.f32()[c * m + r] = kernels().dot_f16(rounded + c * k, halves, k);
                continue;
            }
            expand_rows(w, r, r + 1, row);
            for (int64_t c = 0; c < n; ++c) y.f32()[c * m + r] = kernels().dot_f32(row, rounded + c * k, k);
        }
    });
}

}  // namespace

void matmul(const cpu::Node& w, const cpu::Node& x, const cpu::Node& y, ThreadPool& pool, MatmulScratch& scratch,
            RepackedWeights* repacked, int32_t x_index) {
    const Product product{&w, &y};
    if (repacked != nullptr && matmul_repacked({&product, 1}, x, pool, scratch, *repacked, x_index)) return;
    if (blocks::has_q8_dot(w.type)) matmul_q8(w, x, y, pool, scratch, x_index);
    else if (blocks::has_q8k_dot(w.type)) {
        // Fast precision reads read-only K-quant weights from its copy in huge pages (repacked.hpp).
        const bool copy = repacked != nullptr && copied_as_stored(w.type) && read_only(w);
        matmul_q8k(w, copy ? repacked->get(w, pool).data : w.data, x, y, pool, scratch, x_index);
    }
    else if (x.rows() >= blas_min_columns) matmul_sgemm(w, x, y, pool, scratch);
    else matmul_rows(w, x, y, pool, scratch);
}

}  // namespace cellm::openblas
