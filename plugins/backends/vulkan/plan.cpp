#include "plan.hpp"

#include "plugin_host.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>

namespace cellm::vulkan {

using graph::Node;
using plugin::Failure;

namespace {

constexpr uint64_t alignment = 256;
constexpr uint32_t max_grid = 65535;
uint64_t aligned(uint64_t x) { return (x + alignment - 1) / alignment * alignment; }

// Appends push constants in the shaders' scalar layout (every member at its natural alignment).
struct Push {
    Dispatch& d;
    template <class T>
    Push& operator<<(const T& v) {
        d.push_size = static_cast<uint32_t>((d.push_size + alignof(T) - 1) / alignof(T) * alignof(T));
        if (d.push_size + sizeof v > d.push.size()) throw Failure(CELLM_ERR_INTERNAL, "vulkan: push constants overflow");
        std::memcpy(d.push.data() + d.push_size, &v, sizeof v);
        d.push_size += static_cast<uint32_t>(sizeof v);
        return *this;
    }
};

uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }

// Workgroups for `count` units, wrapped into y beyond the x limit (common.glsl's group_index).
std::array<uint32_t, 3> grid(uint64_t count) {
    count = std::max<uint64_t>(count, 1);
    const uint64_t x = std::min<uint64_t>(count, max_grid);
    return {static_cast<uint32_t>(x), static_cast<uint32_t>((count + x - 1) / x), 1};
}
std::array<uint32_t, 3> grid(uint64_t items, uint64_t per_group) { return grid((items + per_group - 1) / per_group); }

// How a MATMUL's activations are rounded for its weight type (round_activations.comp), 0 for none (F32).
int rounding(cellm_dtype type) {
    switch (type) {
    case CELLM_TYPE_Q4_0: case CELLM_TYPE_Q5_0: case CELLM_TYPE_Q8_0: return 1;
    case CELLM_TYPE_Q4_1: case CELLM_TYPE_Q5_1: return 2;
    case CELLM_TYPE_Q4_K: case CELLM_TYPE_Q5_K: case CELLM_TYPE_Q6_K: return 3;
    case CELLM_TYPE_F16: return 4;
    case CELLM_TYPE_BF16: return 5;
    default: return 0;
    }
}
int64_t rounding_span(int r) { return r == 3 ? 256 : r == 1 || r == 2 ? 32 : 1; }

// Whether attention_fast.comp gets a workgroup per token: for decode (up to 8 tokens) and for steps of up to 64
// tokens of several sequences (many sessions' decode); a prompt's prefill gets a workgroup per head and 16 tokens.
bool attention_by_token(const Node& n, const std::vector<Node>& nodes) {
    const int64_t n_tokens = nodes[static_cast<size_t>(n.src[0])].ne[2];
    const int64_t n_seqs = nodes[static_cast<size_t>(n.src[3])].ne[1];  // the block table's rows
    return n_tokens <= 8 || (n_tokens <= 64 && n_seqs > 1);
}

// Precision "fast": attention_fast.comp takes F32 and F16 pools whose rows start at multiples of 16 bytes, and
// head_dim 64, 128 or 256.
bool fast_attention(const Node& n, const std::vector<Node>& nodes) {
    const auto type = [&](int k) { return nodes[static_cast<size_t>(n.src[static_cast<size_t>(k)])].type; };
    const auto starts_aligned = [&](int k) {
        const Node& pool = nodes[static_cast<size_t>(n.src[static_cast<size_t>(k)])];
        return pool.buffer != nullptr && (pool.buffer->memory.address + pool.offset) % 16 == 0 &&
               pool.ne[0] * cellm_dtype_type_size(pool.type) % 16 == 0;
    };
    const int32_t head_dim = n.iparams[2];
    const int64_t kv_dim = nodes[static_cast<size_t>(n.src[1])].ne[0];
    return (head_dim == 64 || head_dim == 128 || head_dim == 256) && kv_dim <= 4096 && starts_aligned(1) && starts_aligned(2) &&
           (type(1) == CELLM_TYPE_F16 || type(1) == CELLM_TYPE_F32) &&
           (type(2) == CELLM_TYPE_F16 || type(2) == CELLM_TYPE_F32);
}

// Ops done by another op's dispatch, decided from the graph alone before the arena is planned, and when each
// node's sources are read (read_at), so that the arena keeps them alive until then:
//  - a product's residual: an ADD right after a MATMUL, its only reader (both precisions), read at the ADD;
//  - precision "fast", products of at most 8 columns (matvec_fast.comp): the GLU of two such products of one
//    input, done at the GLU; an RMS_NORM whose readers are all such products, each reading the norm's input.
struct Fusions {
    std::vector<int32_t> add_residual;  // MATMUL -> the other source of the ADD it folds in, or -1
    std::vector<int32_t> norm_of;       // MATMUL -> the RMS_NORM it folds in, or -1
    std::vector<bool> folded;           // nodes another node's dispatch does
    std::vector<bool> glu_product;      // GLU nodes done as one product
    std::vector<int32_t> read_at;       // when a node's sources are read
    std::vector<int32_t> rope_in;       // MATMUL -> the adjacent-pairs ROPE its dispatch applies, or -1
    std::vector<int32_t> store_in;      // MATMUL -> the KV_STORE its dispatch does, or -1
};

Fusions find_fusions(const graph::Checked& graph, bool fast) {
    const std::vector<Node>& nodes = graph.nodes;
    const size_t count = nodes.size();
    const auto node = [&](int32_t i) -> const Node& { return nodes[static_cast<size_t>(i)]; };
    Fusions f{std::vector<int32_t>(count, -1), std::vector<int32_t>(count, -1), std::vector<bool>(count, false),
              std::vector<bool>(count, false), std::vector<int32_t>(count), std::vector<int32_t>(count, -1),
              std::vector<int32_t>(count, -1)};
    std::vector<bool> is_output(count, false);
    std::vector<std::vector<size_t>> readers(count);  // one entry per source slot that reads the node
    for (size_t j = 0; j < count; ++j) {
        f.read_at[j] = static_cast<int32_t>(j);
        for (int32_t s : nodes[j].src)
            if (s >= 0) readers[static_cast<size_t>(s)].push_back(j);
    }
    const auto uses = [&](size_t j) { return readers[j].size(); };
    for (int32_t o : graph.outputs) is_output[static_cast<size_t>(o)] = true;

    for (size_t j = 0; j + 1 < count; ++j) {
        if (nodes[j].op != CELLM_OP_MATMUL || uses(j) != 1 || nodes[j + 1].op != CELLM_OP_ADD || is_output[j]) continue;
        const auto i = static_cast<int32_t>(j);
        const Node& add = nodes[j + 1];
        const int32_t other = add.src[0] == i ? add.src[1] : add.src[1] == i ? add.src[0] : -1;
        if (other < 0 || other >= i || node(other).ne != nodes[j].ne) continue;
        f.add_residual[j] = other;
        f.read_at[j] = i + 1;
    }
    if (!fast) return f;
    const auto vector_product = [&](size_t j) {
        const Node& m = nodes[j];
        return m.op == CELLM_OP_MATMUL && node(m.src[1]).rows() <= 8 && node(m.src[0]).ne[0] % 8 == 0;
    };
    for (size_t g = 0; g < count; ++g) {
        const Node& n = nodes[g];
        if (n.op != CELLM_OP_GLU || (n.iparams[0] != 0 && n.iparams[0] != 1) || n.src[0] == n.src[1]) continue;
        const auto gate = static_cast<size_t>(n.src[0]), up = static_cast<size_t>(n.src[1]);
        if (!vector_product(gate) || !vector_product(up) || uses(gate) != 1 || uses(up) != 1 || is_output[gate] ||
            is_output[up])
            continue;
        const Node &wg = node(nodes[gate].src[0]), &wu = node(nodes[up].src[0]);
        if (nodes[gate].src[1] != nodes[up].src[1] || wg.type != wu.type || wg.ne != wu.ne) continue;
        f.folded[gate] = f.folded[up] = true;
        f.glu_product[g] = true;
        f.read_at[gate] = f.read_at[up] = static_cast<int32_t>(g);
    }
    for (size_t r = 0; r < count; ++r) {
        const Node& n = nodes[r];
        if (n.op != CELLM_OP_RMS_NORM || n.src[1] < 0 || is_output[r] || readers[r].empty() ||
            node(n.src[1]).nelements() != n.ne[0])
            continue;
        bool all = true;
        int32_t last = static_cast<int32_t>(r);
        // Every workgroup of a product takes the norm again: not worth it for a long output (the logits), where
        // one norm dispatch and a barrier cost less than thousands of workgroups' norms.
        for (size_t c : readers[r]) {
            all = all && vector_product(c) && nodes[c].src[1] == static_cast<int32_t>(r) &&
                  nodes[c].src[0] != static_cast<int32_t>(r) && nodes[c].ne[0] < 16384;
            last = std::max(last, f.read_at[c]);
        }
        if (!all) continue;
        f.folded[r] = true;
        f.read_at[r] = last;
        for (size_t c : readers[r]) f.norm_of[c] = static_cast<int32_t>(r);
    }
    // - a product's ROPE over adjacent pairs (GGUF's Llama Q/K layout), through RESHAPEs; the product writes the
    //   rotated rows into its own memory, which the ROPE's readers then read (the plan points the ROPE there);
    // - a product's KV_STORE into an F32 or F16 pool, after its ROPE or directly (V).
    const auto only_reader = [&](size_t v) -> int64_t {
        return readers[v].size() == 1 && !is_output[v] ? static_cast<int64_t>(readers[v][0]) : -1;
    };
    const auto past_reshapes = [&](size_t& tail) {
        int64_t next = only_reader(tail);
        while (next >= 0 && nodes[static_cast<size_t>(next)].op == CELLM_OP_RESHAPE) {
            tail = static_cast<size_t>(next);
            next = only_reader(tail);
        }
        return next;
    };
    // The last node reading v, directly or through RESHAPEs.
    const auto last_reader = [&](size_t v) {
        int32_t last = static_cast<int32_t>(v);
        std::vector<size_t> todo{v};
        while (!todo.empty()) {
            const size_t at = todo.back();
            todo.pop_back();
            for (size_t r : readers[at]) {
                last = std::max(last, static_cast<int32_t>(r));
                if (nodes[r].op == CELLM_OP_RESHAPE) todo.push_back(r);
            }
        }
        return is_output[v] ? static_cast<int32_t>(count) : last;
    };
    for (size_t j = 0; j < count; ++j) {
        if (!vector_product(j) || f.folded[j] || f.add_residual[j] >= 0) continue;
        const int64_t m = nodes[j].ne[0];
        size_t tail = j;
        int64_t next = past_reshapes(tail);
        if (next >= 0) {
            const Node& rope = nodes[static_cast<size_t>(next)];
            if (rope.op == CELLM_OP_ROPE && rope.src[0] == static_cast<int32_t>(tail) && rope.iparams[1] == CELLM_ROPE_ADJACENT &&
                node(rope.src[0]).ne[0] % 2 == 0 && m % node(rope.src[0]).ne[0] == 0) {
                f.rope_in[j] = static_cast<int32_t>(next);
                f.folded[static_cast<size_t>(next)] = true;
                tail = static_cast<size_t>(next);
                next = past_reshapes(tail);
            }
        }
        if (next >= 0) {
            const Node& store = nodes[static_cast<size_t>(next)];
            const Node& pool = store.op == CELLM_OP_KV_STORE ? node(store.src[0]) : store;
            if (store.op == CELLM_OP_KV_STORE && store.src[1] == static_cast<int32_t>(tail) && pool.ne[0] == m &&
                (pool.type == CELLM_TYPE_F32 || (pool.type == CELLM_TYPE_F16 && m % 2 == 0))) {
                f.store_in[j] = static_cast<int32_t>(next);
                f.folded[static_cast<size_t>(next)] = true;
                continue;
            }
        }
        // The rotated rows stay in the product's memory until the ROPE's last reader.
        if (f.rope_in[j] >= 0) f.read_at[static_cast<size_t>(f.rope_in[j])] = last_reader(static_cast<size_t>(f.rope_in[j]));
    }
    return f;
}

// Bytes [begin, end) of device memory, for placing barriers.
struct Range {
    VkDeviceAddress begin, end;
    bool overlaps(const Range& o) const { return begin < o.end && o.begin < end; }
};

}  // namespace

VkDeviceAddress Plan::address(int32_t index) const {
    const Node& n = graph_.nodes[static_cast<size_t>(index)];
    return (n.buffer != nullptr ? n.buffer->memory.address : arena_.address) + n.offset;
}

Plan::Plan(Device& device, const graph::Checked& checked, bool profile) : device_(device), graph_(checked) {
    const std::string prefix = "vulkan: ";
    auto& nodes = graph_.nodes;
    const auto node = [&](int32_t i) -> const Node& { return nodes[static_cast<size_t>(i)]; };
    auto fail = [&](int32_t i, cellm_status_code code, const std::string& what) {
        throw Failure(code, prefix + graph::describe(nodes, i) + ": " + what);
    };
    // The INPUT node behind a source (through RESHAPEs): indices the host must check before the step runs.
    auto input_of = [&](int32_t at, int k, const char* role) {
        int32_t s = node(at).src[static_cast<size_t>(k)];
        while (node(s).op == CELLM_OP_RESHAPE) s = node(s).src[0];
        if (node(s).op != CELLM_OP_INPUT)
            fail(at, CELLM_ERR_UNSUPPORTED, std::string(role) + " must come from an INPUT node (the host checks them)");
        return s;
    };
    const bool fast = device_.fast;
    const Fusions fusions = find_fusions(graph_, fast);
    arena_size_ = aligned(graph::plan_arena(graph_, alignment, fusions.read_at));
    for (size_t j = 0; j < nodes.size(); ++j) {
        const int32_t rope = fusions.rope_in[j];
        if (rope < 0 || fusions.store_in[j] >= 0) continue;
        nodes[static_cast<size_t>(rope)].offset = nodes[j].offset;
        nodes[static_cast<size_t>(rope)].buffer = nodes[j].buffer;
    }
    for (Node& n : nodes)
        if (graph::aliases_source(n.op)) {
            n.offset = nodes[static_cast<size_t>(n.src[0])].offset;
            n.buffer = nodes[static_cast<size_t>(n.src[0])].buffer;
        }

    // Scratch for rounded activations (one MATMUL input at a time), then the step's rotary angles.
    uint64_t scratch = 0;
    for (const Node& n : nodes) {
        if (n.op != CELLM_OP_MATMUL || rounding(node(n.src[0]).type) == 0) continue;
        const Node& x = node(n.src[1]);
        scratch = std::max<uint64_t>(scratch, static_cast<uint64_t>(x.nelements() + x.nelements() / 32) * 4);
    }
    scratch_offset_ = arena_size_;
    angles_offset_ = scratch_offset_ + aligned(scratch);

    // Staging: every INPUT node, then the angle tables. Readback: every graph output.
    staging_offset_.assign(nodes.size(), 0);
    readback_offset_.assign(nodes.size(), 0);
    uint64_t staging = 0, readback = 0;
    for (size_t i = 0; i < nodes.size(); ++i)
        if (nodes[i].op == CELLM_OP_INPUT) {
            staging_offset_[i] = staging;
            staging += aligned(nodes[i].bytes);
        }
    for (int32_t o : graph_.outputs) {
        readback_offset_[static_cast<size_t>(o)] = readback;
        readback += aligned(node(o).bytes);
    }

    uint64_t angles = 0;
    std::vector<ptrdiff_t> rope_of(nodes.size(), -1);  // ROPE node -> its angle table
    for (size_t i = 0; i < nodes.size(); ++i) {
        const Node& n = nodes[i];
        if (n.op != CELLM_OP_ROPE) continue;
        RopeAngles r;
        r.positions = input_of(static_cast<int32_t>(i), 1, "positions");
        r.n_rot = n.iparams[0];
        r.base = n.fparams[0];
        r.scale = n.fparams[1];
        r.factors_node = n.src[2];
        const auto same = [&](const RopeAngles& o) {
            return o.positions == r.positions && o.n_rot == r.n_rot && o.base == r.base && o.scale == r.scale &&
                   o.factors_node == r.factors_node;
        };
        if (auto it = std::find_if(ropes_.begin(), ropes_.end(), same); it != ropes_.end()) {
            rope_of[i] = it - ropes_.begin();
            continue;
        }
        if (r.factors_node >= 0) {  // a weight: read back once per table, at prepare time
            const Node& f = node(r.factors_node);
            if (f.op != CELLM_OP_WEIGHT) fail(static_cast<int32_t>(i), CELLM_ERR_UNSUPPORTED, "frequency factors must be a weight");
            r.factors.resize(static_cast<size_t>(f.nelements()));
            Allocation host(device_, f.bytes, true);
            device_.run_once([&](VkCommandBuffer cmd) {
                const VkBufferCopy region{f.offset, 0, f.bytes};
                device_.vk.vkCmdCopyBuffer(cmd, f.buffer->memory.buffer, host.buffer, 1, &region);
            });
            std::memcpy(r.factors.data(), host.mapped, f.bytes);
        }
        rope_of[i] = static_cast<ptrdiff_t>(ropes_.size());
        r.bytes = static_cast<uint64_t>(node(r.positions).nelements()) * static_cast<uint64_t>(r.n_rot) * 4;
        r.staging_offset = staging;
        r.device_offset = angles_offset_ + angles;
        staging += aligned(r.bytes);
        angles += aligned(r.bytes);
        ropes_.push_back(r);
    }

    // Precision "fast": the key chunks' partial results of split attention (attention_fast.comp), after the angles.
    std::vector<uint32_t> chunks_of(nodes.size(), 1);
    uint64_t partials = 0;
    for (size_t i = 0; fast && i < nodes.size(); ++i) {
        const Node& n = nodes[i];
        if (n.op != CELLM_OP_ATTENTION || !fast_attention(n, nodes)) continue;
        const int64_t n_tokens = node(n.src[0]).ne[2], context = node(n.src[3]).ne[0] * n.iparams[3];
        // Each chunk takes an equal share of a row's keys. A workgroup per token: shares of at least 16 keys of
        // the longest context, up to 32; prefill: enough chunks for about 256 workgroups (a head's 16 tokens
        // each), up to 8, with shares of at least 64 of the step's tokens.
        if (attention_by_token(n, nodes)) {
            chunks_of[i] = static_cast<uint32_t>(std::clamp<int64_t>(context / 16, 1, 32));
        } else {
            const int64_t workgroups = n.iparams[0] * ((n_tokens + 15) / 16);
            chunks_of[i] = static_cast<uint32_t>(std::clamp<int64_t>(std::min(256 / workgroups, n_tokens / 64), 1, 8));
        }
        partials = std::max<uint64_t>(partials, static_cast<uint64_t>(n.iparams[0] * n_tokens) * chunks_of[i] *
                                                    static_cast<uint64_t>(n.iparams[2] + 2) * 4);
    }
    partials_offset_ = angles_offset_ + aligned(angles);
    arena_ = Allocation(device_, partials_offset_ + std::max<uint64_t>(partials, alignment), false);
    staging_ = Allocation(device_, std::max<uint64_t>(staging, alignment), true);
    readback_ = Allocation(device_, std::max<uint64_t>(readback, alignment), true);

    // Dispatches, with the memory each reads and writes for the barrier placement below.
    std::vector<std::vector<Range>> reads, writes;
    const auto range = [&](int32_t i) { return Range{address(i), address(i) + node(i).bytes}; };
    const VkDeviceAddress scratch_at = arena_.address + scratch_offset_;
    std::pair<int32_t, int> rounded{-1, 0};  // which (node, rounding) the scratch holds
    auto emit = [&](Dispatch d, std::vector<Range> r, std::vector<Range> w) {
        dispatches_.push_back(std::move(d));
        reads.push_back(std::move(r));
        writes.push_back(std::move(w));
    };

    // The fusions were chosen before the arena was planned (Fusions, which kept what they read alive long
    // enough); the dispatches check that, as the barriers rely on it.
    std::vector<bool> fused_add(nodes.size(), false);
    const std::vector<int32_t>& norm_of = fusions.norm_of;
    const std::vector<bool>&folded = fusions.folded, &glu_product = fusions.glu_product;
    const auto disjoint = [&](const Range& out, const std::vector<Range>& in) {
        for (const Range& r : in)
            if (out.overlaps(r)) throw Failure(CELLM_ERR_INTERNAL, "vulkan: a fused dispatch would overwrite what it reads");
    };
    // The residual of the ADD a product folds in (out = W x + other), or -1.
    const auto fusable_add = [&](size_t j, std::vector<Range> product_reads) -> int32_t {
        const int32_t other = fusions.add_residual[j];
        if (other < 0) return -1;
        product_reads.push_back(range(other));
        disjoint(range(static_cast<int32_t>(j) + 1), product_reads);
        fused_add[j + 1] = true;
        return other;
    };

    for (size_t idx = 0; idx < nodes.size(); ++idx) {
        const auto i = static_cast<int32_t>(idx);
        const Node& n = nodes[idx];
        const auto src = [&](int k) { return n.src[static_cast<size_t>(k)]; };
        Dispatch d;
        d.kind = graph::op_name(n.op);
        Push p{d};
        switch (n.op) {
        case CELLM_OP_WEIGHT: case CELLM_OP_KV_CACHE: case CELLM_OP_STATE: case CELLM_OP_INPUT: case CELLM_OP_RESHAPE:
            continue;
        case CELLM_OP_GET_ROWS: {
            input_of(i, 1, "row ids");
            const Node& table = node(src(0));
            d.shader = "get_rows_" + std::to_string(table.type);
            p << address(src(0)) << address(src(1)) << address(i) << u32(table.ne[0]) << u32(n.ne[1]);
            d.groups = grid(static_cast<uint64_t>(n.nelements()), 256);
            emit(d, {range(src(0)), range(src(1))}, {range(i)});
            break;
        }
        case CELLM_OP_MATMUL: {
            if (folded[idx]) continue;  // done by its GLU's dispatch
            const Node& w = node(src(0));
            const Node& x = node(src(1));
            const int64_t k = w.ne[0], m = w.ne[1], cols = x.rows();
            if (fast && k % 8 == 0) {
                const int32_t norm = norm_of[idx], xin = norm >= 0 ? node(norm).src[0] : src(1);
                std::vector<Range> reads_of{range(src(0)), range(xin)};
                if (norm >= 0) reads_of.push_back(range(node(norm).src[1]));
                const int32_t residual = fusable_add(idx, reads_of);
                const int32_t target = residual >= 0 ? i + 1 : i;
                const VkDeviceAddress out = address(target), add = residual >= 0 ? address(residual) : out;
                if (residual >= 0) {
                    reads_of.push_back(range(residual));
                    d.kind = "MATMUL+ADD";
                }
                std::vector<Range> writes_of{range(target)};
                if (cols <= 8) {
                    const int32_t rope = fusions.rope_in[idx], store = fusions.store_in[idx];
                    VkDeviceAddress angle_table = out, slots = out, dest = out;
                    uint32_t head_dim = 2, half_rot = 0, pool_type = 0;
                    if (rope >= 0) {
                        const RopeAngles& table = ropes_[static_cast<size_t>(rope_of[static_cast<size_t>(rope)])];
                        angle_table = arena_.address + table.device_offset;
                        reads_of.push_back(Range{angle_table, angle_table + table.bytes});
                        head_dim = u32(node(node(rope).src[0]).ne[0]);
                        half_rot = u32(node(rope).iparams[0] / 2);
                        d.kind = "MATMUL+ROPE";
                    }
                    if (store >= 0) {
                        const Node& st = node(store);
                        slots = address(st.src[2]);
                        reads_of.push_back(range(st.src[2]));
                        dest = address(store);
                        pool_type = u32(node(st.src[0]).type);
                        writes_of = {range(store)};
                        d.kind = rope >= 0 ? "MATMUL+ROPE+KV_STORE" : "MATMUL+KV_STORE";
                    }
                    d.shader = "matvec_fast_" + std::to_string(w.type);
                    p << address(src(0)) << address(src(0)) << address(xin)
                      << (norm >= 0 ? address(node(norm).src[1]) : address(xin)) << dest << add << angle_table << slots
                      << u32(k) << u32(m) << u32(cols)
                      << ((residual >= 0 ? 1u : 0u) | (norm >= 0 ? 2u : 0u) | (rope >= 0 ? 16u : 0u) | (store >= 0 ? 32u : 0u))
                      << (norm >= 0 ? node(norm).fparams[0] : 0.0f) << head_dim << half_rot << pool_type;
                    d.groups = grid(static_cast<uint64_t>(m), 4);
                } else {
                    d.shader = "matmul_fast_" + std::to_string(w.type);
                    p << address(src(0)) << address(xin) << out << add << u32(k) << u32(m) << u32(cols)
                      << uint32_t{residual >= 0 ? 1u : 0u};
                    d.groups = {u32((m + 63) / 64), u32((cols + 63) / 64), 1};
                }
                for (const Range& wr : writes_of) disjoint(wr, reads_of);
                d.kind += " (type " + std::to_string(w.type) + (cols <= 8 ? ")" : ", tiled)");  // for the profile
                emit(d, reads_of, writes_of);
                break;
            }
            const int r = rounding(w.type);
            if (k % rounding_span(r) != 0) fail(i, CELLM_ERR_UNSUPPORTED, "row length not a multiple of the rounding block");
            // A single column rounds itself inside the product (decode); more go through the rounding dispatch,
            // whose result the products of the same input share. Q8 and Q8_K roundings leave codes, then a scale
            // per block and sums (one per block for Q8, per 16 codes for Q8_K).
            const bool q8 = r == 1 || r == 2, q8k = r == 3;
            const bool fused_rounding = r != 0 && cols == 1 && k <= 4096;
            const uint64_t blocks = static_cast<uint64_t>(k / rounding_span(r) * cols);
            const uint64_t n_sums = q8k ? static_cast<uint64_t>(k / 16 * cols) : blocks;
            const VkDeviceAddress codes = scratch_at, scales = codes + static_cast<uint64_t>(k * cols),
                                  sums = scales + 4 * blocks;
            const Range xr{scratch_at, q8 || q8k ? sums + 4 * n_sums : scratch_at + static_cast<uint64_t>(k * cols) * 4};
            if (r != 0 && !fused_rounding && rounded != std::pair{src(1), r}) {
                Dispatch rd;
                rd.kind = "ROUND";
                rd.shader = "round_" + std::to_string(r);
                Push rp{rd};
                rp << address(src(1)) << codes << scales << sums << u32(k) << u32(cols);
                rd.groups = grid(static_cast<uint64_t>(k / rounding_span(r) * cols), 64);
                emit(rd, {range(src(1))}, {xr});
                rounded = {src(1), r};
            }
            const int32_t residual = fusable_add(idx, {range(src(1))});
            const int32_t target = residual >= 0 ? i + 1 : i;
            if (residual >= 0) d.kind = "MATMUL+ADD";
            const bool tiled = cols > 8;
            const bool rounded_x = r != 0 && !fused_rounding;
            const VkDeviceAddress out = address(target), add = residual >= 0 ? address(residual) : out;
            d.shader = std::string(q8 ? "matmul_q8_" : q8k ? "matmul_q8k_" : "matmul_") +
                       (tiled ? "tiled_" : fused_rounding ? "vec1_" : "vec_") + std::to_string(w.type);
            if (q8 || q8k) {
                p << address(src(0)) << address(src(1)) << codes << scales << sums << out << add;
                d.groups = tiled ? std::array<uint32_t, 3>{u32((m + 31) / 32), u32((cols + 31) / 32), 1} : grid(static_cast<uint64_t>(m), 16);
            } else {
                p << address(src(0)) << (rounded_x ? codes : address(src(1))) << out << add;
                d.groups = tiled ? std::array<uint32_t, 3>{u32((m + 63) / 64), u32((cols + 31) / 32), 1} : grid(static_cast<uint64_t>(m), 4);
            }
            p << u32(k) << u32(m) << u32(cols) << uint32_t{residual >= 0 ? 1u : 0u};
            std::vector<Range> reads_of{range(src(0)), rounded_x ? xr : range(src(1))};
            if (residual >= 0) reads_of.push_back(range(residual));
            d.kind += " (type " + std::to_string(w.type) + (tiled ? ", tiled)" : ")");  // for the profile
            emit(d, reads_of, {range(target)});
            break;
        }
        case CELLM_OP_ADD: case CELLM_OP_MUL: case CELLM_OP_SCALE: case CELLM_OP_SILU: case CELLM_OP_GELU:
        case CELLM_OP_TANH: case CELLM_OP_GLU: case CELLM_OP_SIGMOID: case CELLM_OP_SOFTPLUS: {
            if (fused_add[idx]) continue;  // done by the product before it
            if (glu_product[idx]) {
                const Node& gate = node(src(0));
                const Node& w = node(gate.src[0]);
                const int32_t norm = norm_of[static_cast<size_t>(src(0))], xin = norm >= 0 ? node(norm).src[0] : gate.src[1];
                d.kind = "MATMUL+GLU";
                d.shader = "matvec_fast_" + std::to_string(w.type);
                p << address(gate.src[0]) << address(node(src(1)).src[0]) << address(xin)
                  << (norm >= 0 ? address(node(norm).src[1]) : address(xin)) << address(i) << address(i)
                  << address(i) << address(i) << u32(w.ne[0]) << u32(w.ne[1]) << u32(node(xin).rows())
                  << ((norm >= 0 ? 2u : 0u) | 4u | (n.iparams[0] == 1 ? 8u : 0u)) << (norm >= 0 ? node(norm).fparams[0] : 0.0f)
                  << uint32_t{2} << uint32_t{0} << uint32_t{0};
                d.groups = grid(static_cast<uint64_t>(w.ne[1]), 4);
                std::vector<Range> r{range(gate.src[0]), range(node(src(1)).src[0]), range(xin)};
                if (norm >= 0) r.push_back(range(node(norm).src[1]));
                disjoint(range(i), r);
                emit(d, r, {range(i)});
                break;
            }
            uint32_t op = 0;
            switch (n.op) {
            case CELLM_OP_ADD: op = 0; break;
            case CELLM_OP_MUL: op = 1; break;
            case CELLM_OP_SCALE: op = 2; break;
            case CELLM_OP_SILU: op = 3; break;
            case CELLM_OP_GELU: op = 4; break;
            case CELLM_OP_TANH: op = 5; break;
            case CELLM_OP_SIGMOID: op = 8; break;
            case CELLM_OP_SOFTPLUS: op = 9; break;
            default: op = n.iparams[0] == 0 ? 6 : 7; break;
            }
            const bool binary = n.op == CELLM_OP_ADD || n.op == CELLM_OP_MUL || n.op == CELLM_OP_GLU;
            d.shader = "elementwise";
            p << address(src(0)) << (binary ? address(src(1)) : address(src(0))) << address(i);
            for (int64_t v : n.ne) p << u32(v);
            for (int64_t v : (binary ? node(src(1)).ne : n.ne)) p << u32(v);
            p << op << n.fparams[0];
            d.groups = grid(static_cast<uint64_t>(n.nelements()), 256);
            std::vector<Range> r{range(src(0))};
            if (binary) r.push_back(range(src(1)));
            emit(d, r, {range(i)});
            break;
        }
        case CELLM_OP_RMS_NORM: {
            if (folded[idx]) continue;  // done by the products that read it
            const bool weighted = src(1) >= 0;
            d.shader = "rms_norm";
            p << address(src(0)) << (weighted ? address(src(1)) : address(src(0))) << address(i);
            for (int64_t v : n.ne) p << u32(v);
            for (int64_t v : (weighted ? node(src(1)).ne : n.ne)) p << u32(v);
            p << uint32_t{weighted ? 1u : 0u} << n.fparams[0];
            d.groups = grid(static_cast<uint64_t>(n.rows()));
            std::vector<Range> r{range(src(0))};
            if (weighted) r.push_back(range(src(1)));
            emit(d, r, {range(i)});
            break;
        }
        case CELLM_OP_ROPE: {
            if (folded[idx]) continue;  // done by the product before it
            const RopeAngles* table_of = &ropes_[static_cast<size_t>(rope_of[idx])];
            const Node& x = node(src(0));
            if (x.ne[0] % 2 != 0) fail(i, CELLM_ERR_UNSUPPORTED, "head_dim must be even");
            d.shader = "rope";
            const VkDeviceAddress table = arena_.address + table_of->device_offset;
            p << address(src(0)) << table << address(i) << u32(x.ne[0]) << u32(x.ne[1]) << u32(x.ne[2])
              << u32(n.iparams[0] / 2) << uint32_t{n.iparams[1] == CELLM_ROPE_ADJACENT ? 1u : 0u};
            d.groups = grid(static_cast<uint64_t>(x.nelements() / 2), 256);
            emit(d, {range(src(0)), Range{table, table + table_of->bytes}}, {range(i)});
            break;
        }
        case CELLM_OP_KV_STORE: {
            if (folded[idx]) continue;  // done by the product that makes its rows
            input_of(i, 2, "slots");
            const Node& pool = node(src(0));
            const Node& rows = node(src(1));
            const bool coded = pool.type == CELLM_TYPE_R4 || pool.type == CELLM_TYPE_R3;
            const int64_t per_word = pool.type == CELLM_TYPE_F32 ? 1 : pool.type == CELLM_TYPE_F16 ? 2 : 4;
            const bool scaled = pool.type == CELLM_TYPE_I8 || coded;
            const int64_t groups = scaled ? node(src(3)).ne[0] : 1;
            // A coded pool's invocation writes one group's codes: the group fills whole words.
            const int64_t word_values = coded ? (pool.type == CELLM_TYPE_R4 ? 8 : 32) : per_word;
            if ((coded ? pool.ne[0] / groups : pool.ne[0]) % word_values != 0 || n.offset % 4 != 0)
                fail(i, CELLM_ERR_UNSUPPORTED, coded ? "a coded pool's groups must fill whole 32-bit words"
                                                     : "pool rows must fill whole 32-bit words");
            d.shader = "kv_store_" + std::to_string(pool.type);
            p << address(src(1)) << address(src(2)) << address(i) << (scaled ? address(src(3)) : address(i))
              << u32(pool.ne[0]) << u32(rows.ne[1]) << u32(groups);
            d.groups = coded ? grid(static_cast<uint64_t>(groups * rows.ne[1]), 256)
                             : grid(static_cast<uint64_t>(pool.ne[0] / per_word * rows.ne[1]), 256);
            std::vector<Range> w{range(i)};
            if (scaled) w.push_back(range(src(3)));
            emit(d, {range(src(1)), range(src(2))}, w);
            break;
        }
        case CELLM_OP_ATTENTION: {
            for (int k : {3, 4, 5}) input_of(i, k, "block table, sequence rows and positions");
            if (n.iparams[2] > 256 || n.iparams[2] % 2 != 0) fail(i, CELLM_ERR_UNSUPPORTED, "head_dim must be even and at most 256");
            const Node& q = node(src(0));
            const Node& kp = node(src(1));
            const Node& vp = node(src(2));
            if (fast && fast_attention(n, nodes)) {
                const uint32_t chunks = chunks_of[idx], head_dim = u32(n.iparams[2]);
                const bool by_token = attention_by_token(n, nodes);
                const uint64_t rows = static_cast<uint64_t>(n.iparams[0]) * static_cast<uint64_t>(q.ne[2]);
                const VkDeviceAddress partial = arena_.address + partials_offset_;
                const Range partial_range{partial, partial + rows * chunks * (head_dim + 2) * 4};
                const uint32_t parts = device_.subgroup >= head_dim / 16 ? head_dim / 16 : 4;
                d.shader = "attention_fast_" + std::to_string(head_dim) + "_" + std::to_string(parts);
                p << address(src(0)) << address(src(1)) << address(src(2)) << address(src(3)) << address(src(4))
                  << address(src(5)) << (chunks > 1 ? partial : address(i));
                p << u32(n.iparams[0]) << u32(n.iparams[0] / n.iparams[1]) << u32(n.iparams[3]) << u32(n.iparams[4])
                  << u32(node(src(3)).ne[0]) << u32(kp.ne[0]) << u32(kp.type) << u32(vp.type) << u32(q.ne[2])
                  << chunks << uint32_t{by_token ? 1u : 0u} << n.fparams[0] << n.fparams[1];
                // Decode: a workgroup per token and 16 heads; prefill: per head and 16 tokens.
                const uint64_t n_head = static_cast<uint64_t>(n.iparams[0]), n_tokens = static_cast<uint64_t>(q.ne[2]);
                d.groups = by_token ? grid(n_tokens * ((n_head + 15) / 16)) : grid(n_head * ((n_tokens + 15) / 16));
                d.groups[2] = chunks;
                std::vector<Range> r;
                for (int k = 0; k < 6; ++k) r.push_back(range(src(k)));
                emit(d, r, {chunks > 1 ? partial_range : range(i)});
                if (chunks > 1) {
                    Dispatch c;
                    c.kind = "ATTENTION";
                    c.shader = "attention_combine";
                    Push cp{c};
                    cp << partial << address(i) << head_dim << u32(n.iparams[0]) << u32(q.ne[2]) << chunks;
                    c.groups = grid(rows * head_dim, 256);
                    emit(c, {partial_range}, {range(i)});
                }
                break;
            }
            d.shader = "attention";
            p << address(src(0)) << address(src(1)) << address(src(2)) << address(src(3)) << address(src(4))
              << address(src(5)) << (src(6) >= 0 ? address(src(6)) : address(src(1)))
              << (src(7) >= 0 ? address(src(7)) : address(src(2))) << address(i);
            p << u32(n.iparams[0]) << u32(n.iparams[0] / n.iparams[1]) << u32(n.iparams[2]) << u32(n.iparams[3])
              << u32(n.iparams[4]) << u32(node(src(3)).ne[0]) << u32(kp.ne[0]) << u32(kp.type) << u32(vp.type)
              << u32(src(6) >= 0 ? node(src(6)).ne[0] : 1) << u32(src(7) >= 0 ? node(src(7)).ne[0] : 1) << n.fparams[0]
              << n.fparams[1];
            d.groups = {u32(n.iparams[0]), u32(q.ne[2]), 1};
            std::vector<Range> r;
            for (int k = 0; k < 8; ++k)
                if (src(k) >= 0) r.push_back(range(src(k)));
            emit(d, r, {range(i)});
            break;
        }
        case CELLM_OP_HADAMARD: {
            const uint64_t runs = static_cast<uint64_t>(n.nelements() / n.iparams[0]);
            d.shader = "hadamard";
            p << address(src(0)) << address(src(1)) << address(i) << u32(n.iparams[0]) << u32(static_cast<int64_t>(runs))
              << uint32_t{n.iparams[1] == 1 ? 1u : 0u} << n.fparams[0];
            d.groups = grid(runs, 64);
            emit(d, {range(src(0)), range(src(1))}, {range(i)});
            break;
        }
        case CELLM_OP_VIEW: {
            if (node(src(0)).nelements() > int64_t{UINT32_MAX}) fail(i, CELLM_ERR_UNSUPPORTED, "source of 2^32 elements or more");
            d.shader = "view";
            p << address(src(0)) << address(i);
            for (int64_t v : n.ne) p << u32(v);
            for (int k = 0; k < 4; ++k) p << u32(n.iparams[static_cast<size_t>(k)]);
            d.groups = grid(static_cast<uint64_t>(n.nelements()), 256);
            emit(d, {range(src(0))}, {range(i)});
            break;
        }
        case CELLM_OP_LAYER_NORM: {
            const bool weighted = src(1) >= 0, biased = src(2) >= 0;
            d.shader = "layer_norm";
            p << address(src(0)) << (weighted ? address(src(1)) : address(src(0)))
              << (biased ? address(src(2)) : address(src(0))) << address(i);
            for (int64_t v : n.ne) p << u32(v);
            for (int64_t v : (weighted ? node(src(1)).ne : n.ne)) p << u32(v);
            for (int64_t v : (biased ? node(src(2)).ne : n.ne)) p << u32(v);
            p << ((weighted ? 1u : 0u) | (biased ? 2u : 0u)) << n.fparams[0];
            d.groups = grid(static_cast<uint64_t>(n.rows()));
            std::vector<Range> r{range(src(0))};
            if (weighted) r.push_back(range(src(1)));
            if (biased) r.push_back(range(src(2)));
            emit(d, r, {range(i)});
            break;
        }
        case CELLM_OP_PATCHES: {
            const Node& images = node(src(0));
            d.shader = "patches";
            p << address(src(0)) << address(i) << u32(images.ne[0]) << u32(images.ne[1]) << u32(images.ne[2])
              << u32(n.iparams[0]) << u32(n.ne[1]);
            d.groups = grid(static_cast<uint64_t>(n.nelements()), 256);
            emit(d, {range(src(0))}, {range(i)});
            break;
        }
        case CELLM_OP_SELF_ATTENTION: {
            if (n.iparams[2] > 256) fail(i, CELLM_ERR_UNSUPPORTED, "head_dim must be at most 256");
            const int64_t n_tokens = n.ne[1];
            d.shader = "self_attention";
            p << address(src(0)) << address(src(1)) << address(src(2)) << address(i) << u32(n.iparams[0])
              << u32(n.iparams[1]) << u32(n.iparams[2]) << u32(n.iparams[3]) << u32(n_tokens) << n.fparams[0];
            // A workgroup per query head and token; tokens past the y limit wrap into z.
            const uint64_t y = std::min<uint64_t>(static_cast<uint64_t>(n_tokens), max_grid);
            d.groups = {u32(n.iparams[0]), u32(y), u32((static_cast<uint64_t>(n_tokens) + y - 1) / y)};
            emit(d, {range(src(0)), range(src(1)), range(src(2))}, {range(i)});
            break;
        }
        case CELLM_OP_SET_ROWS: {
            // src0 copied whole (view.comp with its own strides), then the new rows over their columns. The row
            // indices come from an INPUT node, checked on the host before the step runs (check_inputs).
            input_of(i, 2, "row indices");
            const Node& into = node(src(0));
            const Node& rows = node(src(1));
            d.shader = "view";
            p << address(src(0)) << address(i);
            for (int64_t v : into.ne) p << u32(v);
            p << uint32_t{0} << u32(into.ne[0]) << u32(into.ne[0] * into.ne[1]) << u32(into.ne[0] * into.ne[1] * into.ne[2]);
            d.groups = grid(static_cast<uint64_t>(into.nelements()), 256);
            emit(d, {range(src(0))}, {range(i)});
            Dispatch s;
            s.kind = d.kind;
            s.shader = "set_rows";
            Push sp{s};
            sp << address(src(1)) << address(src(2)) << address(i) << u32(rows.ne[0]) << u32(rows.ne[1]);
            s.groups = grid(static_cast<uint64_t>(rows.nelements()), 256);
            emit(s, {range(src(1)), range(src(2))}, {range(i)});
            break;
        }
        case CELLM_OP_SSM_CONV: {
            // The sequence rows and state slots come from INPUT nodes, checked on the host (check_inputs).
            for (int k : {3, 4}) input_of(i, k, "sequence rows and state slots");
            const Node& x = node(src(0));
            const Node& state = node(src(2));
            const int64_t kernel = node(src(1)).ne[0], n_seqs = node(src(4)).ne[0];
            if (kernel > 16) fail(i, CELLM_ERR_UNSUPPORTED, "kernel of " + std::to_string(kernel) + " taps, at most 16");
            d.shader = "ssm_conv";
            p << address(src(0)) << address(src(1)) << address(src(2)) << address(src(3)) << address(src(4)) << address(i)
              << u32(x.ne[0]) << u32(x.ne[1]) << u32(kernel) << u32(n_seqs) << u32(state.ne[0]);
            d.groups = grid(static_cast<uint64_t>(n_seqs * x.ne[0]), 64);
            emit(d, {range(src(0)), range(src(1)), range(src(2)), range(src(3)), range(src(4))}, {range(i), range(src(2))});
            break;
        }
        case CELLM_OP_DELTA_NET: {
            for (int k : {6, 7}) input_of(i, k, "sequence rows and state slots");
            const Node& q = node(src(0));
            const Node& v = node(src(2));
            const Node& state = node(src(5));
            const int64_t n_seqs = node(src(7)).ne[0];
            d.shader = "delta_net";
            for (int k = 0; k < 8; ++k) p << address(src(k));
            p << address(i) << u32(q.ne[0]) << u32(q.ne[1]) << u32(v.ne[0]) << u32(v.ne[1]) << u32(q.ne[2]) << u32(n_seqs)
              << u32(state.ne[0]) << uint32_t{n.iparams[0] == 1 ? 1u : 0u};
            d.groups = grid(static_cast<uint64_t>(n_seqs * v.ne[1] * v.ne[0]), 64);
            std::vector<Range> r;
            for (int k = 0; k < 8; ++k) r.push_back(range(src(k)));
            emit(d, r, {range(i), range(src(5))});
            break;
        }
        default: fail(i, CELLM_ERR_UNSUPPORTED, "op not supported by this backend");
        }
    }

    // A barrier goes before a dispatch that reads what an earlier one wrote since the last barrier, or writes
    // what one read or wrote since then (the arena reuses memory).
    std::vector<Range> pending_reads, pending_writes;
    for (size_t k = 0; k < dispatches_.size(); ++k) {
        const auto hits = [](const std::vector<Range>& a, const std::vector<Range>& b) {
            for (const Range& x : a)
                for (const Range& y : b)
                    if (x.overlaps(y)) return true;
            return false;
        };
        const bool barrier = hits(reads[k], pending_writes) || hits(writes[k], pending_writes) || hits(writes[k], pending_reads);
        barrier_before_.push_back(barrier);
        if (barrier) {
            pending_reads.clear();
            pending_writes.clear();
            ++profile_.barriers;
        }
        pending_reads.insert(pending_reads.end(), reads[k].begin(), reads[k].end());
        pending_writes.insert(pending_writes.end(), writes[k].begin(), writes[k].end());
    }
    profile_.dispatches = dispatches_.size();
    for (const Dispatch& d : dispatches_) device_.pipeline(d.shader);

    if (profile && device_.timestamp_period > 0) {
        VkQueryPoolCreateInfo info{};
        info.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
        info.queryType = VK_QUERY_TYPE_TIMESTAMP;
        info.queryCount = static_cast<uint32_t>(dispatches_.size() + 1);
        check(device_.vk.vkCreateQueryPool(device_.device, &info, nullptr, &queries_), "vkCreateQueryPool");
    }
    record();
}

Plan::~Plan() {
    if (cmd_ != VK_NULL_HANDLE) device_.vk.vkFreeCommandBuffers(device_.device, device_.pool, 1, &cmd_);
    if (queries_ != VK_NULL_HANDLE) device_.vk.vkDestroyQueryPool(device_.device, queries_, nullptr);
}

void Plan::record() {
    const Vk& vk = device_.vk;
    VkCommandBufferAllocateInfo alloc{};
    alloc.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    alloc.commandPool = device_.pool;
    alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    alloc.commandBufferCount = 1;
    check(vk.vkAllocateCommandBuffers(device_.device, &alloc, &cmd_), "vkAllocateCommandBuffers");
    VkCommandBufferBeginInfo begin{};
    begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    check(vk.vkBeginCommandBuffer(cmd_, &begin), "vkBeginCommandBuffer");

    const auto barrier = [&](VkPipelineStageFlags from, VkAccessFlags from_access, VkPipelineStageFlags to, VkAccessFlags to_access) {
        VkMemoryBarrier b{};
        b.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
        b.srcAccessMask = from_access;
        b.dstAccessMask = to_access;
        vk.vkCmdPipelineBarrier(cmd_, from, to, 0, 1, &b, 0, nullptr, 0, nullptr);
    };
    if (queries_ != VK_NULL_HANDLE) {
        vk.vkCmdResetQueryPool(cmd_, queries_, 0, static_cast<uint32_t>(dispatches_.size() + 1));
        vk.vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries_, 0);
    }
    // The step's inputs and angles, from staging into device memory.
    std::vector<VkBufferCopy> in;
    for (size_t i = 0; i < graph_.nodes.size(); ++i)
        if (graph_.nodes[i].op == CELLM_OP_INPUT) in.push_back({staging_offset_[i], graph_.nodes[i].offset, graph_.nodes[i].bytes});
    for (const RopeAngles& r : ropes_) in.push_back({r.staging_offset, r.device_offset, r.bytes});
    if (!in.empty()) vk.vkCmdCopyBuffer(cmd_, staging_.buffer, arena_.buffer, static_cast<uint32_t>(in.size()), in.data());
    barrier(VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
            VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);

    VkPipeline bound = VK_NULL_HANDLE;
    for (size_t k = 0; k < dispatches_.size(); ++k) {
        const Dispatch& d = dispatches_[k];
        if (barrier_before_[k])
            barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT,
                    VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
        const VkPipeline p = device_.pipeline(d.shader);
        if (p != bound) vk.vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, bound = p);
        vk.vkCmdPushConstants(cmd_, device_.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, d.push_size, d.push.data());
        vk.vkCmdDispatch(cmd_, d.groups[0], d.groups[1], d.groups[2]);
        if (queries_ != VK_NULL_HANDLE)
            vk.vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_, static_cast<uint32_t>(k + 1));
    }

    barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_ACCESS_TRANSFER_READ_BIT);
    std::vector<VkBufferCopy> out;
    for (int32_t o : graph_.outputs) {
        const Node& n = graph_.nodes[static_cast<size_t>(o)];
        if (n.buffer != nullptr) {
            const VkBufferCopy region{n.offset, readback_offset_[static_cast<size_t>(o)], n.bytes};
            vk.vkCmdCopyBuffer(cmd_, n.buffer->memory.buffer, readback_.buffer, 1, &region);
        } else {
            out.push_back({n.offset, readback_offset_[static_cast<size_t>(o)], n.bytes});
        }
    }
    if (!out.empty()) vk.vkCmdCopyBuffer(cmd_, arena_.buffer, readback_.buffer, static_cast<uint32_t>(out.size()), out.data());
    barrier(VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
    check(vk.vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
}

// The runtime data that indexes memory, checked on the host before the GPU reads or writes through it.
void Plan::check_inputs(const std::vector<const std::byte*>& inputs) const {
    const std::string prefix = "vulkan: ";
    const auto& nodes = graph_.nodes;
    const auto root = [&](int32_t s) {
        while (nodes[static_cast<size_t>(s)].op == CELLM_OP_RESHAPE) s = nodes[static_cast<size_t>(s)].src[0];
        return s;
    };
    const auto data = [&](const Node& n, int k) {
        return reinterpret_cast<const int32_t*>(inputs[static_cast<size_t>(root(n.src[static_cast<size_t>(k)]))]);
    };
    for (size_t idx = 0; idx < nodes.size(); ++idx) {
        const Node& n = nodes[idx];
        const auto i = static_cast<int32_t>(idx);
        if (n.op == CELLM_OP_GET_ROWS) graph::check_row_ids(prefix, nodes, i, data(n, 1), 0, n.ne[1]);
        else if (n.op == CELLM_OP_KV_STORE) graph::check_slots(prefix, nodes, i, data(n, 2));
        else if (n.op == CELLM_OP_ATTENTION) graph::check_attention_inputs(prefix, nodes, i, data(n, 3), data(n, 4), data(n, 5));
        else if (n.op == CELLM_OP_SET_ROWS) graph::check_set_rows(prefix, nodes, i, data(n, 2));
        else if (n.op == CELLM_OP_SSM_CONV)
            graph::check_state_rows(prefix, nodes, i, nodes[static_cast<size_t>(n.src[2])], data(n, 3), n.ne[1], data(n, 4),
                                    nodes[static_cast<size_t>(n.src[4])].ne[0]);
        else if (n.op == CELLM_OP_DELTA_NET)
            graph::check_state_rows(prefix, nodes, i, nodes[static_cast<size_t>(n.src[5])], data(n, 6), n.ne[2], data(n, 7),
                                    nodes[static_cast<size_t>(n.src[7])].ne[0]);
    }
}

void Plan::execute(const cellm_execute_args& args) {
    const auto started = std::chrono::steady_clock::now();
    graph::check_bindings(graph_, &args, "vulkan: ");
    std::vector<const std::byte*> inputs(graph_.nodes.size(), nullptr);
    for (size_t k = 0; k < args.n_inputs; ++k) {
        const cellm_input_binding& b = *cellm_input_at(&args, k);
        inputs[static_cast<size_t>(b.node)] = static_cast<const std::byte*>(b.data);
        std::memcpy(staging_.mapped + staging_offset_[static_cast<size_t>(b.node)], b.data, b.size);
    }
    check_inputs(inputs);
    for (const RopeAngles& r : ropes_) {
        const auto* pos = reinterpret_cast<const int32_t*>(inputs[static_cast<size_t>(r.positions)]);
        const int64_t n_tokens = graph_.nodes[static_cast<size_t>(r.positions)].nelements(), half = r.n_rot / 2;
        auto* table = reinterpret_cast<float*>(staging_.mapped + r.staging_offset);
        for (int64_t t = 0; t < n_tokens; ++t)
            for (int64_t i = 0; i < half; ++i) {
                double theta = pos[t] * r.scale * std::pow(r.base, -2.0 * static_cast<double>(i) / static_cast<double>(2 * half));
                if (!r.factors.empty()) theta /= r.factors[static_cast<size_t>(i)];
                table[t * 2 * half + i] = static_cast<float>(std::cos(theta));
                table[t * 2 * half + half + i] = static_cast<float>(std::sin(theta));
            }
    }
    device_.submit(cmd_);
    for (size_t k = 0; k < args.n_outputs; ++k) {
        const cellm_output_binding& b = *cellm_output_at(&args, k);
        std::memcpy(b.data, readback_.mapped + readback_offset_[static_cast<size_t>(b.node)], b.size);
    }
    if (queries_ == VK_NULL_HANDLE) return;
    std::vector<uint64_t> ticks(dispatches_.size() + 1);
    check(device_.vk.vkGetQueryPoolResults(device_.device, queries_, 0, static_cast<uint32_t>(ticks.size()),
                                           ticks.size() * sizeof(uint64_t), ticks.data(), sizeof(uint64_t),
                                           VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
          "vkGetQueryPoolResults");
    const double period = device_.timestamp_period;
    for (size_t k = 0; k < dispatches_.size(); ++k) {
        const double ns = static_cast<double>(ticks[k + 1] - ticks[k]) * period;
        auto it = std::find_if(profile_.kinds.begin(), profile_.kinds.end(), [&](const auto& e) { return e.first == dispatches_[k].kind; });
        if (it == profile_.kinds.end()) it = profile_.kinds.insert(profile_.kinds.end(), {dispatches_[k].kind, {0, 0.0}});
        it->second.first += 1;
        it->second.second += ns;
    }
    profile_.gpu_ns += static_cast<double>(ticks.back() - ticks.front()) * period;
    profile_.wall_ns += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - started).count();
    ++profile_.steps;
}

}  // namespace cellm::vulkan
