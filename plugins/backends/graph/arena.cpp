// graph_prepare's second half: where the values a step computes live in one arena.
#include "graph.hpp"

#include <algorithm>
#include <iterator>
#include <map>

namespace cellm::graph {

namespace {

// First-fit allocator over one arena; freed ranges merge with their neighbours.
class ArenaPlanner {
public:
    explicit ArenaPlanner(uint64_t alignment) : alignment_(alignment) {}
    uint64_t allocate(uint64_t bytes) {
        bytes = (bytes + alignment_ - 1) / alignment_ * alignment_;
        for (auto it = free_.begin(); it != free_.end(); ++it) {
            if (it->second < bytes) continue;
            const uint64_t at = it->first, left = it->second - bytes;
            free_.erase(it);
            if (left > 0) free_[at + bytes] = left;
            sizes_[at] = bytes;
            return at;
        }
        const uint64_t at = size_;
        size_ += bytes;
        sizes_[at] = bytes;
        return at;
    }
    void release(uint64_t at) {
        uint64_t bytes = sizes_.at(at);
        sizes_.erase(at);
        auto next = free_.find(at + bytes);
        if (next != free_.end()) {
            bytes += next->second;
            free_.erase(next);
        }
        auto prev = free_.lower_bound(at);
        if (prev != free_.begin() && std::prev(prev)->first + std::prev(prev)->second == at) {
            std::prev(prev)->second += bytes;
            return;
        }
        free_[at] = bytes;
    }
    uint64_t size() const { return size_; }

private:
    std::map<uint64_t, uint64_t> free_;   // offset -> length
    std::map<uint64_t, uint64_t> sizes_;  // live offset -> length
    uint64_t size_ = 0;
    uint64_t alignment_;
};

}  // namespace

bool aliases_source(cellm_op op) { return op == CELLM_OP_RESHAPE || op == CELLM_OP_KV_STORE; }
bool is_leaf_storage(cellm_op op) {
    return op == CELLM_OP_WEIGHT || op == CELLM_OP_KV_CACHE || op == CELLM_OP_STATE;
}

uint64_t plan_arena(Checked& plan, uint64_t alignment, const std::vector<int32_t>& read_at) {
    const auto n = static_cast<int32_t>(plan.nodes.size());
    std::vector<int32_t> root(plan.nodes.size()), last_use(plan.nodes.size());
    for (int32_t i = 0; i < n; ++i) {
        const Node& node = plan.nodes[static_cast<size_t>(i)];
        root[static_cast<size_t>(i)] = aliases_source(node.op) ? root[static_cast<size_t>(node.src[0])] : i;
        last_use[static_cast<size_t>(i)] = i;
        const int32_t read = read_at.empty() ? i : read_at[static_cast<size_t>(i)];
        for (int32_t s : node.src)
            if (s >= 0) {
                int32_t& last = last_use[static_cast<size_t>(root[static_cast<size_t>(s)])];
                last = std::max(last, read);
            }
    }
    for (int32_t o : plan.outputs) last_use[static_cast<size_t>(root[static_cast<size_t>(o)])] = n;

    ArenaPlanner arena(alignment);
    std::vector<std::vector<int32_t>> release_after(plan.nodes.size() + 1);
    auto place = [&](int32_t i) {
        plan.nodes[static_cast<size_t>(i)].offset = arena.allocate(plan.nodes[static_cast<size_t>(i)].bytes);
        release_after[static_cast<size_t>(last_use[static_cast<size_t>(i)])].push_back(i);
    };
    for (int32_t i = 0; i < n; ++i)
        if (plan.nodes[static_cast<size_t>(i)].op == CELLM_OP_INPUT) place(i);
    for (int32_t i = 0; i < n; ++i) {
        const cellm_op op = plan.nodes[static_cast<size_t>(i)].op;
        if (op != CELLM_OP_INPUT && !aliases_source(op) && !is_leaf_storage(op)) place(i);
        for (int32_t r : release_after[static_cast<size_t>(i)]) arena.release(plan.nodes[static_cast<size_t>(r)].offset);
    }
    for (int32_t i = 0; i < n; ++i) {
        Node& node = plan.nodes[static_cast<size_t>(i)];
        if (!aliases_source(node.op)) continue;
        const Node& source = plan.nodes[static_cast<size_t>(node.src[0])];
        node.buffer = source.buffer;
        node.offset = source.offset;
    }
    return arena.size();
}

}  // namespace cellm::graph
