#include "attention.hpp"

#include "blocks.h"
#include "kernels.hpp"
#include "reference_kernels.hpp"

#include <algorithm>

namespace cellm::openblas {

void attention(cpu::Plan& plan, int32_t index, ThreadPool& pool, AttentionScratch& scratch) {
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

    // F16 pools (the default) go through the table's many-row loops when it has them.
    const bool rows_at_once = k_pool.type == CELLM_TYPE_F16 && v_pool.type == CELLM_TYPE_F16 &&
                              kern.dots_f16 != nullptr && kern.weighted_sum_f16 != nullptr;
    scratch.rows.resize(static_cast<size_t>(pool.size()));
    scratch.scores.resize(static_cast<size_t>(pool.size()));
    scratch.query.resize(static_cast<size_t>(pool.size()));
    scratch.values.resize(static_cast<size_t>(pool.size()));
    const size_t window = static_cast<size_t>(a.max_blocks * a.block_size);
    for (auto& s : scratch.scores) s.resize(std::max(s.size(), window));
    for (auto& s : scratch.rows) s.resize(std::max(s.size(), window));
    for (auto& s : scratch.query) s.resize(std::max(s.size(), static_cast<size_t>(a.head_dim)));
    for (auto& s : scratch.values) s.resize(std::max(s.size(), static_cast<size_t>(a.head_dim)));

    pool.run(a.n_tokens * a.n_head, [&](int64_t task, int thread) {
        const int64_t t = task / a.n_head, h = task % a.n_head;
        const int64_t first = a.first(t), last = a.position(t), offset = a.kv_offset(h);
        float* scores = scratch.scores[static_cast<size_t>(thread)].data();
        float* qr = scratch.query[static_cast<size_t>(thread)].data();
        float* values = scratch.values[static_cast<size_t>(thread)].data();
        // Rounded as the reference rounds MATMUL operands: q to the K pool's type, each weight to V's.
        round(k_pool.type, q.f32() + task * a.head_dim, qr, a.head_dim);
        const int64_t count = last - first + 1;
        float* out = node.f32() + task * a.head_dim;
        if (rows_at_once) {
            int64_t* rows = scratch.rows[static_cast<size_t>(thread)].data();
            for (int64_t j = first; j <= last; ++j) rows[j - first] = a.slot(t, j) * row + offset;
            kern.dots_f16(qr, 1, reinterpret_cast<const uint16_t*>(k_pool.data), rows, count, a.head_dim, scores);
            cpu::attention_weights(a, scores, count);
            round(v_pool.type, scores, scores, count);
            kern.weighted_sum_f16(scores, 1, reinterpret_cast<const uint16_t*>(v_pool.data), rows, count, a.head_dim, out);
            return;
        }
        for (int64_t j = first; j <= last; ++j) scores[j - first] = key(a.slot(t, j), offset, qr, values);
        cpu::attention_weights(a, scores, count);
        round(v_pool.type, scores, scores, count);
        std::fill(out, out + a.head_dim, 0.0f);
        for (int64_t j = first; j <= last; ++j) add_value(scores[j - first], a.slot(t, j), offset, out, values);
    });
}

}  // namespace cellm::openblas
