// A prepared graph: the nodes copied out of the caller's graph, validated, with storage for every node
// (weights and KV pools where their buffers are, everything else in one arena planned once).
#pragma once

#include "blocks.h"

#include "memory.hpp"

#include <cellm/backend.h>

#include <array>
#include <string>
#include <vector>

namespace cellm::cpu {

struct Node {
    cellm_op op = CELLM_OP_NONE;
    cellm_dtype type = CELLM_TYPE_F32;  // element type of the storage (a KV_STORE node has its pool's)
    std::array<int64_t, 4> ne{};
    std::array<int32_t, CELLM_MAX_SRC> src{};
    std::array<int32_t, CELLM_MAX_PARAMS> iparams{};
    std::array<float, CELLM_MAX_PARAMS> fparams{};
    std::string name;
    uint64_t bytes = 0;
    std::byte* data = nullptr;  // fixed when the plan is made

    int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    int64_t rows() const { return ne[1] * ne[2] * ne[3]; }
    float* f32() const { return reinterpret_cast<float*>(data); }
    const int32_t* i32() const { return reinterpret_cast<const int32_t*>(data); }
};

struct Plan {
    std::vector<Node> nodes;
    std::vector<int32_t> outputs;  // nodes the caller may read back
    AlignedBytes arena;
    uint64_t arena_size = 0;
    std::vector<float> row;     // one dequantized weight row, or rotary angles, or one K/V row plus an accumulator
    std::vector<float> scores;  // attention weights of one query
    std::vector<blocks::Activations> columns;  // MATMUL activations prepared for the weight type, one per column
};

const char* op_name(cellm_op op);

// "node 12 (MATMUL 'blk.0.attn_q')", for error messages.
std::string describe(const Plan& plan, int32_t index);

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

}  // namespace cellm::cpu
