#include "attention.hpp"

#include "activations_fast.hpp"
#include "blocks.h"
#include "kernels.hpp"
#include "reference_kernels.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>

namespace cellm::openblas {
namespace {

// The most floats of K (and as many of V) a block-table row expands once for a step: 16 MiB each.
constexpr int64_t max_dense_floats = int64_t{4} << 20;

// cpu::attention_weights without a soft cap, bit for bit, with the exps a vector at a time (libm_exp): they were
// most of an exact step's attention. The sum stays the reference's, one float add at a time in key order.
void exact_weights(float* scores, int64_t n, float scale, ExpF32 exp) {
    float best = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
        scores[j] *= scale;
        best = std::max(best, scores[j]);
    }
    for (int64_t j = 0; j < n; ++j) scores[j] -= best;
    exp(scores, scores, n);
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) sum += scores[j];
    for (int64_t j = 0; j < n; ++j) scores[j] /= sum;
}

}  // namespace

void attention(cpu::Plan& plan, int32_t index, ThreadPool& pool, AttentionScratch& scratch, bool fast) {
    const cpu::AttentionShape a = cpu::check_attention(plan, index);
    const cpu::Node& node = plan.nodes[static_cast<size_t>(index)];
    const cpu::Node& q = plan.nodes[static_cast<size_t>(node.src[0])];
    const cpu::Node& k_pool = plan.nodes[static_cast<size_t>(node.src[1])];
    const cpu::Node& v_pool = plan.nodes[static_cast<size_t>(node.src[2])];
    const Kernels& kern = kernels();
    const int64_t row = k_pool.ne[0];
    // A head's segment of a K or V row as floats: in place in an F32 pool; I8 and coded rows expanded into the
    // thread's `values` row, exactly as the reference expands them, to meet the F32 loops.
    auto segment = [&](const cpu::Node& p, int32_t scales, int64_t slot, int64_t offset, float* values, int64_t n) -> const float* {
        if (p.type == CELLM_TYPE_F32) return p.f32() + slot * row + offset;
        const cpu::Node& s = plan.nodes[static_cast<size_t>(scales)];
        if (p.type == CELLM_TYPE_I8) cpu::expand_i8(p, s, slot, offset, n, values);
        else cpu::expand_slot(p, s, slot, offset, n, values);
        return values;
    };
    // One query head at a time, where an F16 pool has no many-row loops (or meets a pool of another type).
    auto key = [&](int64_t slot, int64_t offset, const float* qr, float* values) {
        if (k_pool.type == CELLM_TYPE_F16)
            return kern.dot_f16(qr, reinterpret_cast<const uint16_t*>(k_pool.data) + slot * row + offset, a.head_dim);
        return kern.dot_f32(qr, segment(k_pool, node.src[6], slot, offset, values, a.head_dim), a.head_dim);
    };
    auto round = [&](cellm_dtype type, const float* from, float* to, int64_t n) {
        if (type == CELLM_TYPE_F16) kern.round_f16(from, to, n);
        else if (from != to) std::copy(from, from + n, to);
    };
    auto add_value = [&](float weight, int64_t slot, int64_t offset, float* out, float* values) {
        if (v_pool.type == CELLM_TYPE_F16)
            kern.axpy_f16(weight, reinterpret_cast<const uint16_t*>(v_pool.data) + slot * row + offset, out, a.head_dim);
        else kern.axpy_f32(weight, segment(v_pool, node.src[7], slot, offset, values, a.head_dim), out, a.head_dim);
    };

    // F16 pools (the default) go through the table's many-row loops when it has them, and the other types expand
    // each row once, in both cases one task for the query heads of a KV head, so that each K and V row is read (and
    // decoded) once for all of them. Only where that leaves fewer tasks than threads (one token, few KV heads) are
    // a KV head's query heads split over several tasks: a split reads the rows again, which costs more than uneven
    // tasks do.
    const bool rows_at_once = k_pool.type == CELLM_TYPE_F16 && v_pool.type == CELLM_TYPE_F16 &&
                              kern.dots_f16 != nullptr && kern.weighted_sum_f16 != nullptr;
    const bool expands = k_pool.type != CELLM_TYPE_F16 && v_pool.type != CELLM_TYPE_F16;
    const int64_t n_kv = a.n_head / a.group, units = std::max<int64_t>(1, a.n_tokens * n_kv);
    const int64_t splits = rows_at_once || expands ? std::clamp<int64_t>((pool.size() + units - 1) / units, 1, a.group)
                                                   : a.group;
    scratch.rows.resize(static_cast<size_t>(pool.size()));
    scratch.scores.resize(static_cast<size_t>(pool.size()));
    scratch.query.resize(static_cast<size_t>(pool.size()));
    scratch.values.resize(static_cast<size_t>(pool.size()));
    const size_t window = static_cast<size_t>(a.max_blocks * a.block_size);
    const auto heads_most = static_cast<size_t>((a.group + splits - 1) / splits);
    for (auto& s : scratch.scores) s.resize(std::max(s.size(), heads_most * window));
    for (auto& s : scratch.rows) s.resize(std::max(s.size(), window));
    for (auto& s : scratch.query) s.resize(std::max(s.size(), heads_most * static_cast<size_t>(a.head_dim)));
    for (auto& s : scratch.values) s.resize(std::max(s.size(), static_cast<size_t>(a.head_dim)));

    // Scores to weights: the reference's softmax (exps vectorised by exact_weights where it can), or fast
    // precision's vectorised one where there is no soft cap;
    // then each weight rounded to V's type as MATMUL operands are (and as llama.cpp's f16 attention does: left
    // unrounded, Gemma-3's logits moved 2x further from llama.cpp's than its own noise).
    const ExpF32 exp = libm_exp();
    auto weigh = [&](float* scores, int64_t count) {
        if (fast && a.softcap == 0.0f) softmax_fast(scores, count, a.scale);
        else if (a.softcap == 0.0f && exp != nullptr) exact_weights(scores, count, a.scale, exp);
        else cpu::attention_weights(a, scores, count);
        round(v_pool.type, scores, scores, count);
    };

    // A block-table row with several tokens in the step (a prefill chunk) would expand each of its keys once per
    // token: its K and V rows are expanded once for the step instead, in position order (first[r] .. last[r]).
    // A 2,048-token prefill of SmolLM2 with an r4 cache spent 42% of its time expanding rows before.
    const bool encoded = expands && (k_pool.type != CELLM_TYPE_F32 || v_pool.type != CELLM_TYPE_F32);
    const int64_t n_rows = plan.nodes[static_cast<size_t>(node.src[3])].ne[1];
    std::vector<int64_t>& dense_at = scratch.dense_at;
    dense_at.assign(static_cast<size_t>(n_rows), -1);
    if (encoded && a.n_tokens > 1) {
        std::vector<int64_t> lo(static_cast<size_t>(n_rows), INT64_MAX), hi(static_cast<size_t>(n_rows), -1), uses(lo.size(), 0);
        std::vector<int64_t> token_of(lo.size(), -1);
        for (int64_t t = 0; t < a.n_tokens; ++t) {
            const auto r = static_cast<size_t>(a.seq_of[t]);
            lo[r] = std::min(lo[r], a.first(t));
            hi[r] = std::max(hi[r], a.position(t));
            ++uses[r];
            token_of[r] = t;
        }
        int64_t total = 0;
        std::vector<std::array<int64_t, 2>> work;  // (row, position) pairs to expand
        // Only rows whose table names a pool block for every position in between (the engine's prefill chunks
        // are consecutive positions; the check above covers only the positions some token reads).
        const int64_t n_blocks = k_pool.ne[1] / a.block_size;
        const auto whole_table = [&](size_t r) {
            for (int64_t b = lo[r] / a.block_size; b <= hi[r] / a.block_size; ++b) {
                const int32_t block = a.block_table[static_cast<int64_t>(r) * a.max_blocks + b];
                if (block < 0 || block >= n_blocks) return false;
            }
            return true;
        };
        for (size_t r = 0; r < lo.size(); ++r) {
            if (uses[r] < 2 || (hi[r] - lo[r] + 1) * row > max_dense_floats || !whole_table(r)) continue;
            dense_at[r] = total;
            total += (hi[r] - lo[r] + 1) * row;
            for (int64_t j = lo[r]; j <= hi[r]; ++j) work.push_back({static_cast<int64_t>(r), j});
        }
        scratch.dense_k.resize(static_cast<size_t>(total));
        scratch.dense_v.resize(static_cast<size_t>(total));
        scratch.dense_first = lo;
        constexpr int64_t per_task = 16;
        pool.run((static_cast<int64_t>(work.size()) + per_task - 1) / per_task, [&](int64_t task, int) {
            for (int64_t w = task * per_task; w < std::min<int64_t>(static_cast<int64_t>(work.size()), (task + 1) * per_task); ++w) {
                const auto [r, j] = work[static_cast<size_t>(w)];
                const int64_t slot = a.slot(token_of[static_cast<size_t>(r)], j);
                const int64_t at = dense_at[static_cast<size_t>(r)] + (j - lo[static_cast<size_t>(r)]) * row;
                const float* k = segment(k_pool, node.src[6], slot, 0, scratch.dense_k.data() + at, row);
                if (k != scratch.dense_k.data() + at) std::copy(k, k + row, scratch.dense_k.data() + at);
                const float* v = segment(v_pool, node.src[7], slot, 0, scratch.dense_v.data() + at, row);
                if (v != scratch.dense_v.data() + at) std::copy(v, v + row, scratch.dense_v.data() + at);
            }
        });
    }

    // Task (t, KV head, part) takes query heads [h, h + heads) of token t; one head each on the F16 path without
    // many-row loops.
    pool.run(a.n_tokens * n_kv * splits, [&](int64_t task, int thread) {
        const int64_t t = task / (n_kv * splits), kv = task / splits % n_kv, part = task % splits;
        const int64_t h = kv * a.group + part * a.group / splits;
        const int64_t heads = kv * a.group + (part + 1) * a.group / splits - h;
        const int64_t first = a.first(t), last = a.position(t), offset = a.kv_offset(h);
        float* scores = scratch.scores[static_cast<size_t>(thread)].data();
        float* qr = scratch.query[static_cast<size_t>(thread)].data();
        float* values = scratch.values[static_cast<size_t>(thread)].data();
        // Rounded as the reference rounds MATMUL operands: q to the K pool's type, each weight to V's.
        round(k_pool.type, q.f32() + (t * a.n_head + h) * a.head_dim, qr, heads * a.head_dim);
        const int64_t count = last - first + 1;
        float* out = node.f32() + (t * a.n_head + h) * a.head_dim;
        if (rows_at_once) {
            int64_t* rows = scratch.rows[static_cast<size_t>(thread)].data();
            a.slot_offsets(t, first, last, row, offset, rows);
            kern.dots_f16(qr, heads, reinterpret_cast<const uint16_t*>(k_pool.data), rows, count, a.head_dim, scores);
            for (int64_t g = 0; g < heads; ++g) weigh(scores + g * count, count);
            kern.weighted_sum_f16(scores, heads, reinterpret_cast<const uint16_t*>(v_pool.data), rows, count, a.head_dim,
                                  out);
            return;
        }
        if (expands) {
            const auto r = static_cast<size_t>(a.seq_of[t]);
            const bool from_dense = dense_at[r] >= 0;
            const float* dense_k = from_dense ? scratch.dense_k.data() + dense_at[r] - scratch.dense_first[r] * row + offset : nullptr;
            const float* dense_v = from_dense ? scratch.dense_v.data() + dense_at[r] - scratch.dense_first[r] * row + offset : nullptr;
            for (int64_t j = first; j <= last; ++j) {
                const float* k = from_dense ? dense_k + j * row : segment(k_pool, node.src[6], a.slot(t, j), offset, values, a.head_dim);
                for (int64_t g = 0; g < heads; ++g) scores[g * count + j - first] = kern.dot_f32(qr + g * a.head_dim, k, a.head_dim);
            }
            for (int64_t g = 0; g < heads; ++g) weigh(scores + g * count, count);
            std::fill(out, out + heads * a.head_dim, 0.0f);
            for (int64_t j = first; j <= last; ++j) {
                const float* v = from_dense ? dense_v + j * row : segment(v_pool, node.src[7], a.slot(t, j), offset, values, a.head_dim);
                for (int64_t g = 0; g < heads; ++g) kern.axpy_f32(scores[g * count + j - first], v, out + g * a.head_dim, a.head_dim);
            }
            return;
        }
        for (int64_t j = first; j <= last; ++j) scores[j - first] = key(a.slot(t, j), offset, qr, values);
        weigh(scores, count);
        std::fill(out, out + a.head_dim, 0.0f);
        for (int64_t j = first; j <= last; ++j) add_value(scores[j - first], a.slot(t, j), offset, out, values);
    });
}

}  // namespace cellm::openblas
