#include "attention.hpp"

#include "activations_fast.hpp"
#include "blocks.h"
#include "kernels.hpp"
#include "reference_kernels.hpp"

#include <algorithm>
#include <cmath>

namespace cellm::openblas {
namespace {

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
    // I8 rows are expanded a head's segment at a time into the thread's `values` row, exactly as the reference
    // expands them, and then meet the F32 loops.
    auto key = [&](int64_t slot, int64_t offset, const float* qr, float* values) {
        switch (k_pool.type) {
        case CELLM_TYPE_F16:
            return kern.dot_f16(qr, reinterpret_cast<const uint16_t*>(k_pool.data) + slot * row + offset, a.head_dim);
        case CELLM_TYPE_I8:
            cpu::expand_i8(k_pool, plan.nodes[static_cast<size_t>(node.src[6])], slot, offset, a.head_dim, values);
            return kern.dot_f32(qr, values, a.head_dim);
        default: return kern.dot_f32(qr, k_pool.f32() + slot * row + offset, a.head_dim);
        }
    };
    auto round = [&](cellm_dtype type, const float* from, float* to, int64_t n) {
        if (type == CELLM_TYPE_F16) kern.round_f16(from, to, n);
        else if (from != to) std::copy(from, from + n, to);
    };
    auto add_value = [&](float weight, int64_t slot, int64_t offset, float* out, float* values) {
        switch (v_pool.type) {
        case CELLM_TYPE_F16:
            kern.axpy_f16(weight, reinterpret_cast<const uint16_t*>(v_pool.data) + slot * row + offset, out, a.head_dim);
            break;
        case CELLM_TYPE_I8:
            cpu::expand_i8(v_pool, plan.nodes[static_cast<size_t>(node.src[7])], slot, offset, a.head_dim, values);
            kern.axpy_f32(weight, values, out, a.head_dim);
            break;
        default: kern.axpy_f32(weight, v_pool.f32() + slot * row + offset, out, a.head_dim);
        }
    };

    // F16 pools (the default) go through the table's many-row loops when it has them, one task for the query heads
    // of a KV head, so that each K and V row is read once for all of them. Only where that leaves fewer tasks than
    // threads (one token, few KV heads) are a KV head's query heads split over several tasks: a split reads the
    // rows again, which costs more than uneven tasks do.
    const bool rows_at_once = k_pool.type == CELLM_TYPE_F16 && v_pool.type == CELLM_TYPE_F16 &&
                              kern.dots_f16 != nullptr && kern.weighted_sum_f16 != nullptr;
    const int64_t n_kv = a.n_head / a.group, units = std::max<int64_t>(1, a.n_tokens * n_kv);
    const int64_t splits =
        rows_at_once ? std::clamp<int64_t>((pool.size() + units - 1) / units, 1, a.group) : a.group;
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

    // Task (t, KV head, part) takes query heads [h, h + heads) of token t; one head each off the F16 path.
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
        for (int64_t j = first; j <= last; ++j) scores[j - first] = key(a.slot(t, j), offset, qr, values);
        weigh(scores, count);
        std::fill(out, out + a.head_dim, 0.0f);
        for (int64_t j = first; j <= last; ++j) add_value(scores[j - first], a.slot(t, j), offset, out, values);
    });
}

}  // namespace cellm::openblas
