// Runtime index checks: token ids, KV slots, block tables and spliced rows are data, so every step checks them.
#include "graph.hpp"

#include "plugin_host.hpp"

#include <algorithm>
#include <vector>

namespace cellm::graph {

using plugin::Failure;

namespace {

[[noreturn]] void fail(const std::string& prefix, const std::vector<Node>& nodes, int32_t index, const std::string& what) {
    throw Failure(CELLM_ERR_INVALID_ARGUMENT, prefix + describe(nodes, index) + ": " + what);
}

const Node& src(const std::vector<Node>& nodes, int32_t index, int k) {
    return nodes[static_cast<size_t>(nodes[static_cast<size_t>(index)].src[static_cast<size_t>(k)])];
}

}  // namespace

void check_row_ids(const std::string& prefix, const std::vector<Node>& nodes, int32_t index, const int32_t* ids,
                   int64_t begin, int64_t end) {
    const int64_t rows = src(nodes, index, 0).ne[1];
    for (int64_t i = begin; i < end; ++i)
        if (ids[i] < 0 || ids[i] >= rows)
            fail(prefix, nodes, index, "row id " + std::to_string(ids[i]) + " at " + std::to_string(i) + " is outside [0, " +
                                           std::to_string(rows) + ")");
}

void check_slots(const std::string& prefix, const std::vector<Node>& nodes, int32_t index, const int32_t* slots) {
    const int64_t n_tokens = src(nodes, index, 1).ne[1], n_slots = nodes[static_cast<size_t>(index)].ne[1];
    for (int64_t t = 0; t < n_tokens; ++t)
        if (slots[t] < 0 || slots[t] >= n_slots)
            fail(prefix, nodes, index, "slot " + std::to_string(slots[t]) + " of token " + std::to_string(t) +
                                           " is outside [0, " + std::to_string(n_slots) + ")");
}

void check_attention_inputs(const std::string& prefix, const std::vector<Node>& nodes, int32_t index,
                            const int32_t* table, const int32_t* seqs, const int32_t* positions) {
    const Node& n = nodes[static_cast<size_t>(index)];
    const Node& shape = src(nodes, index, 3);
    const int64_t max_blocks = shape.ne[0], n_seqs = shape.ne[1], block_size = n.iparams[3], window = n.iparams[4];
    const int64_t n_slots = std::min(src(nodes, index, 1).ne[1], src(nodes, index, 2).ne[1]);
    for (int64_t t = 0; t < src(nodes, index, 0).ne[2]; ++t) {
        const int64_t r = seqs[t], p = positions[t];
        if (r < 0 || r >= n_seqs)
            fail(prefix, nodes, index, "token " + std::to_string(t) + " belongs to sequence row " + std::to_string(r) +
                                           ", outside [0, " + std::to_string(n_seqs) + ")");
        if (p < 0 || p / block_size >= max_blocks)
            fail(prefix, nodes, index, "position " + std::to_string(p) + " of token " + std::to_string(t) +
                                           " is outside the block table");
        const int32_t* blocks_of = table + r * max_blocks;
        const int64_t first = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
        for (int64_t b = first / block_size; b <= p / block_size; ++b)
            if (blocks_of[b] < 0 || (blocks_of[b] + 1) * block_size > n_slots)
                fail(prefix, nodes, index, "block table entry " + std::to_string(blocks_of[b]) + " (sequence row " +
                                               std::to_string(r) + ", block " + std::to_string(b) +
                                               ") is not a block of the KV pool");
    }
}

void check_set_rows(const std::string& prefix, const std::vector<Node>& nodes, int32_t index, const int32_t* rows) {
    const int64_t k = src(nodes, index, 2).ne[0], m = src(nodes, index, 0).ne[1];
    std::vector<int64_t> first(static_cast<size_t>(m), -1);  // where each column was first named
    for (int64_t i = 0; i < k; ++i) {
        if (rows[i] < 0 || rows[i] >= m)
            fail(prefix, nodes, index, "row index " + std::to_string(rows[i]) + " at " + std::to_string(i) +
                                           " is outside [0, " + std::to_string(m) + ")");
        int64_t& at = first[static_cast<size_t>(rows[i])];
        if (at >= 0)
            fail(prefix, nodes, index, "row index " + std::to_string(rows[i]) + " at " + std::to_string(i) +
                                           " repeats the one at " + std::to_string(at));
        at = i;
    }
}

void check_state_rows(const std::string& prefix, const std::vector<Node>& nodes, int32_t index, const Node& state,
                      const int32_t* seqs, int64_t n_tokens, const int32_t* slots, int64_t n_seqs) {
    for (int64_t t = 0; t < n_tokens; ++t)
        if (seqs[t] < 0 || seqs[t] >= n_seqs)
            fail(prefix, nodes, index, "token " + std::to_string(t) + " belongs to sequence row " + std::to_string(seqs[t]) +
                                           ", outside [0, " + std::to_string(n_seqs) + ")");
    std::vector<bool> taken(static_cast<size_t>(state.ne[1]), false);
    for (int64_t r = 0; r < n_seqs; ++r) {
        if (slots[r] < 0 || slots[r] >= state.ne[1])
            fail(prefix, nodes, index, "state slot " + std::to_string(slots[r]) + " of sequence row " + std::to_string(r) +
                                           " is outside [0, " + std::to_string(state.ne[1]) + ")");
        if (taken[static_cast<size_t>(slots[r])])
            fail(prefix, nodes, index, "state slot " + std::to_string(slots[r]) + " is given to two sequence rows");
        taken[static_cast<size_t>(slots[r])] = true;
    }
}

}  // namespace cellm::graph
