// graph_prepare on a CPU backend: the shared check and arena plan (graph.hpp), then host addresses and scratch.
#include "plan.hpp"

#include "blocks.h"

#include <algorithm>

namespace cellm::cpu {

bool op_accepts(cellm_op op, cellm_dtype type) { return graph::op_accepts(op, type, blocks::supported); }

void prepare(const cellm_backend& backend, const cellm_graph& graph, cellm_plan& plan) {
    const graph::Rules rules{error_prefix(), op_accepts, [&](const cellm_buffer* b) -> std::optional<graph::BufferFacts> {
                                 if (!owns(backend, b)) return std::nullopt;
                                 return graph::BufferFacts{b->size, b->writable, b->data};
                             }};
    static_cast<graph::Checked&>(plan) = graph::check(graph, rules);
    plan.arena_size = graph::plan_arena(plan, alignment);
    for (Node& n : plan.nodes) {
        if (n.buffer != nullptr) n.data = n.buffer->data + n.offset;
    }

    // Scratch the kernels share, sized for the largest node that uses it.
    for (const Node& n : plan.nodes) {
        const auto at_least = [](auto& v, int64_t size) { v.resize(std::max(v.size(), static_cast<size_t>(size))); };
        const auto src = [&](int k) -> const Node& { return plan.nodes[static_cast<size_t>(n.src[static_cast<size_t>(k)])]; };
        switch (n.op) {
        case CELLM_OP_MATMUL:
            at_least(plan.row, src(0).ne[0]);
            at_least(plan.columns, src(1).rows());
            break;
        case CELLM_OP_ROPE: at_least(plan.row, n.iparams[0]); break;
        case CELLM_OP_ATTENTION:
            at_least(plan.row, 3 * static_cast<int64_t>(n.iparams[2]));
            at_least(plan.scores, src(3).ne[0] * n.iparams[3]);
            break;
        default: break;
        }
    }
}

void place_in_arena(cellm_plan& plan, std::byte* arena) {
    if (plan.arena == arena) return;
    for (Node& n : plan.nodes) {
        if (n.buffer == nullptr) n.data = arena + n.offset;
    }
    plan.arena = arena;
}

}  // namespace cellm::cpu
