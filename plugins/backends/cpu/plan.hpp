// A prepared graph on a CPU backend: the checked nodes (graph.hpp), each pointing at host memory (weights and KV
// pools where their buffers are, everything else in the arena at offsets planned once), and scratch for the
// kernels. The arena is the backend instance's, shared by all its plans (it runs one at a time): a host that keeps
// many prepared graphs (one per batch shape) holds one arena of the largest, not one per graph.
#pragma once

#include "blocks.h"
#include "graph.hpp"
#include "memory.hpp"

#include <cellm/backend.h>

#include <string>
#include <vector>

namespace cellm::cpu {

using graph::Node;

struct Plan : graph::Checked {
    uint64_t arena_size = 0;
    const std::byte* arena = nullptr;  // the arena the nodes' addresses were resolved against
    std::vector<float> row;     // one dequantized weight row, or rotary angles, or one K/V row plus an accumulator
    std::vector<float> scores;  // attention weights of one query
    std::vector<blocks::Activations> columns;  // MATMUL activations prepared for the weight type, one per column
};

using graph::op_name;

// "node 12 (MATMUL 'blk.0.attn_q')", for error messages.
inline std::string describe(const Plan& plan, int32_t index) { return graph::describe(plan.nodes, index); }

// Whether `op` can run with a first source (or, for leaves, storage) of `type`.
bool op_accepts(cellm_op op, cellm_dtype type);

}  // namespace cellm::cpu

// The ABI's opaque plan handle.
struct cellm_plan : cellm::cpu::Plan {};

namespace cellm::cpu {

// Whether `buffer` is a live buffer of `backend` (frame.cpp); leaves must live in one.
bool owns(const cellm_backend& backend, const cellm_buffer* buffer);

// "name: " of the loaded backend, the prefix of its error messages.
std::string error_prefix();

// Validates `graph` and plans its memory; throws plugin::Failure naming the offending node.
void prepare(const cellm_backend& backend, const cellm_graph& graph, cellm_plan& plan);
// Points the nodes that live in the arena at `arena`, which holds at least plan.arena_size bytes.
void place_in_arena(cellm_plan& plan, std::byte* arena);

}  // namespace cellm::cpu
