// What every backend does with a step's graph before it runs anything: copy the nodes out of the caller's graph,
// check each against graph.h, lay out the memory of the values it computes, and check execute's bindings. CPU
// backends point nodes at host memory; a device backend places them in its own buffers.
#pragma once

#include <cellm/backend.h>

#include <array>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace cellm::graph {

struct Node {
    cellm_op op = CELLM_OP_NONE;
    cellm_dtype type = CELLM_TYPE_F32;  // element type of the storage (a KV_STORE node has its pool's)
    std::array<int64_t, 4> ne{};
    std::array<int32_t, CELLM_MAX_SRC> src{};
    std::array<int32_t, CELLM_MAX_PARAMS> iparams{};
    std::array<float, CELLM_MAX_PARAMS> fparams{};
    std::string name;
    uint64_t bytes = 0;
    // Where the value lives: a leaf's buffer and offset; for every other node `buffer` is null and `offset` is its
    // place in the plan's arena (an alias has its root's).
    const cellm_buffer* buffer = nullptr;
    uint64_t offset = 0;
    std::byte* data = nullptr;  // host address of the value, for backends whose memory is host memory

    int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    int64_t rows() const { return ne[1] * ne[2] * ne[3]; }
    float* f32() const { return reinterpret_cast<float*>(data); }
    const int32_t* i32() const { return reinterpret_cast<const int32_t*>(data); }
};

// A checked graph: its nodes in execution order and the nodes the caller may read back.
struct Checked {
    std::vector<Node> nodes;
    std::vector<int32_t> outputs;
};

// What a backend tells the checker about its memory.
struct BufferFacts {
    uint64_t size = 0;
    bool writable = true;          // false for wrapped read-only host memory (KV pools must be writable)
    const std::byte* host = nullptr;  // host address of byte 0, or null for device memory
};

struct Rules {
    std::string prefix;  // "name: ", the start of every error message
    // Whether `op` can run with a first source (or, for leaves, storage) of `type`.
    std::function<bool(cellm_op op, cellm_dtype type)> accepts;
    // Facts about a live buffer of this backend instance, or nullopt for any other pointer.
    std::function<std::optional<BufferFacts>(const cellm_buffer* buffer)> buffer;
};

const char* op_name(cellm_op op);

// Whether `op` runs with a first source (or, for leaves, storage) of `type`, for a backend whose MATMUL and
// GET_ROWS take the weight types `weights` accepts. Every other op's types are graph.h's, the same for all.
bool op_accepts(cellm_op op, cellm_dtype type, bool (*weights)(cellm_dtype));

// "node 12 (MATMUL 'blk.0.attn_q')", for error messages.
std::string describe(const std::vector<Node>& nodes, int32_t index);

// Copies and validates `graph`; throws plugin::Failure naming the offending node.
Checked check(const cellm_graph& graph, const Rules& rules);

// Whether node `op` takes its memory from its first source (RESHAPE, KV_STORE) or from a leaf's buffer.
bool aliases_source(cellm_op op);
bool is_leaf_storage(cellm_op op);

// Gives every arena node (inputs and computed values) an offset and returns the arena's size. Inputs come first;
// a value's memory is reused once the last node reading it (directly or through an alias) has run; graph outputs
// are never reused. Offsets are multiples of `alignment`. A backend that reads some node's sources later than
// the node's place (a fused dispatch) gives read_at: node i's sources are read at node read_at[i] >= i.
uint64_t plan_arena(Checked& graph, uint64_t alignment, const std::vector<int32_t>& read_at = {});

// Checks execute's arguments against a checked graph: every INPUT node bound once with its exact size, every
// output binding naming a graph output of the right size. Throws plugin::Failure.
void check_bindings(const Checked& graph, const cellm_execute_args* args, const std::string& prefix);

// The step inputs that index memory, checked before anything reads or writes through them (every backend, with
// the same messages). Each throws plugin::Failure(CELLM_ERR_INVALID_ARGUMENT) naming node `index` and the value.
// GET_ROWS: ids[begin, end) are rows of the table.
void check_row_ids(const std::string& prefix, const std::vector<Node>& nodes, int32_t index, const int32_t* ids,
                   int64_t begin, int64_t end);
// KV_STORE: every token's slot is a row of the pool.
void check_slots(const std::string& prefix, const std::vector<Node>& nodes, int32_t index, const int32_t* slots);
// ATTENTION: every token's sequence row and position, and the block table entries its window reads.
void check_attention_inputs(const std::string& prefix, const std::vector<Node>& nodes, int32_t index,
                            const int32_t* table, const int32_t* seqs, const int32_t* positions);

// SET_ROWS: every row index names a column of src0, and no two name the same one (graph.h: distinct).
void check_set_rows(const std::string& prefix, const std::vector<Node>& nodes, int32_t index, const int32_t* rows);

// SSM_CONV and DELTA_NET: every token's sequence row is a row of the state slot table `slots` (n_seqs entries), and
// every row's slot is a slot of the state leaf `state`, no two rows sharing one (they would overwrite each other).
void check_state_rows(const std::string& prefix, const std::vector<Node>& nodes, int32_t index, const Node& state,
                      const int32_t* seqs, int64_t n_tokens, const int32_t* slots, int64_t n_seqs);

}  // namespace cellm::graph
