// graph_prepare's first half for every backend: copy the caller's graph and check each node against graph.h.
#include "graph.hpp"

#include "plugin_host.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace cellm::graph {

using plugin::Failure;

const char* op_name(cellm_op op) {
    switch (op) {
    case CELLM_OP_NONE: return "NONE";
    case CELLM_OP_WEIGHT: return "WEIGHT";
    case CELLM_OP_KV_CACHE: return "KV_CACHE";
    case CELLM_OP_INPUT: return "INPUT";
    case CELLM_OP_GET_ROWS: return "GET_ROWS";
    case CELLM_OP_MATMUL: return "MATMUL";
    case CELLM_OP_ADD: return "ADD";
    case CELLM_OP_MUL: return "MUL";
    case CELLM_OP_SCALE: return "SCALE";
    case CELLM_OP_RMS_NORM: return "RMS_NORM";
    case CELLM_OP_SILU: return "SILU";
    case CELLM_OP_GELU: return "GELU";
    case CELLM_OP_TANH: return "TANH";
    case CELLM_OP_GLU: return "GLU";
    case CELLM_OP_ROPE: return "ROPE";
    case CELLM_OP_RESHAPE: return "RESHAPE";
    case CELLM_OP_KV_STORE: return "KV_STORE";
    case CELLM_OP_ATTENTION: return "ATTENTION";
    case CELLM_OP_VIEW: return "VIEW";
    case CELLM_OP_SIGMOID: return "SIGMOID";
    case CELLM_OP_SOFTPLUS: return "SOFTPLUS";
    case CELLM_OP_STATE: return "STATE";
    case CELLM_OP_SSM_CONV: return "SSM_CONV";
    case CELLM_OP_DELTA_NET: return "DELTA_NET";
    case CELLM_OP_LAYER_NORM: return "LAYER_NORM";
    case CELLM_OP_PATCHES: return "PATCHES";
    case CELLM_OP_SELF_ATTENTION: return "SELF_ATTENTION";
    case CELLM_OP_SET_ROWS: return "SET_ROWS";
    case CELLM_OP_HADAMARD: return "HADAMARD";
    case CELLM_OP_COUNT: break;
    }
    return "unknown op";
}

bool op_accepts(cellm_op op, cellm_dtype type, bool (*weights)(cellm_dtype)) {
    switch (op) {
    case CELLM_OP_WEIGHT: case CELLM_OP_GET_ROWS: case CELLM_OP_MATMUL: return weights(type);
    case CELLM_OP_KV_CACHE: case CELLM_OP_KV_STORE:
        return type == CELLM_TYPE_F32 || type == CELLM_TYPE_F16 || type == CELLM_TYPE_I8 || type == CELLM_TYPE_R4 ||
               type == CELLM_TYPE_R3;
    case CELLM_OP_INPUT: return type == CELLM_TYPE_I32 || type == CELLM_TYPE_F32;  // per kind: input() checks
    case CELLM_OP_RESHAPE: return type == CELLM_TYPE_F32 || type == CELLM_TYPE_I32;
    case CELLM_OP_ADD: case CELLM_OP_MUL: case CELLM_OP_SCALE: case CELLM_OP_RMS_NORM: case CELLM_OP_SILU:
    case CELLM_OP_GELU: case CELLM_OP_TANH: case CELLM_OP_GLU: case CELLM_OP_ROPE: case CELLM_OP_ATTENTION:
    case CELLM_OP_VIEW:
        return type == CELLM_TYPE_F32;
    case CELLM_OP_SIGMOID: case CELLM_OP_SOFTPLUS: case CELLM_OP_STATE: case CELLM_OP_SSM_CONV: case CELLM_OP_DELTA_NET:
        return type == CELLM_TYPE_F32;
    case CELLM_OP_LAYER_NORM: case CELLM_OP_PATCHES: case CELLM_OP_SELF_ATTENTION: case CELLM_OP_SET_ROWS:
    case CELLM_OP_HADAMARD:
        return type == CELLM_TYPE_F32;
    default: return false;
    }
}

std::string describe(const std::vector<Node>& nodes, int32_t index) {
    const Node& n = nodes[static_cast<size_t>(index)];
    std::string s = "node " + std::to_string(index) + " (" + op_name(n.op);
    if (n.op <= CELLM_OP_NONE || n.op >= CELLM_OP_COUNT) s += " " + std::to_string(n.op);
    if (!n.name.empty()) s += " '" + n.name + "'";
    return s + ")";
}

namespace {

using Shape = std::array<int64_t, 4>;

std::string shape_text(const Shape& ne) {
    std::string s = "[";
    for (size_t d = 0; d < ne.size(); ++d) {
        if (d > 0) s += ", ";
        s += std::to_string(ne[d]);
    }
    return s + "]";
}

// Sources an op needs, and how many optional ones may follow them.
struct Arity {
    int required;
    int optional;
};
Arity arity(cellm_op op) {
    switch (op) {
    case CELLM_OP_WEIGHT: case CELLM_OP_KV_CACHE: case CELLM_OP_INPUT: return {0, 0};
    case CELLM_OP_SCALE: case CELLM_OP_SILU: case CELLM_OP_GELU: case CELLM_OP_TANH: case CELLM_OP_RESHAPE:
    case CELLM_OP_VIEW:
        return {1, 0};
    case CELLM_OP_RMS_NORM: return {1, 1};
    case CELLM_OP_GET_ROWS: case CELLM_OP_MATMUL: case CELLM_OP_ADD: case CELLM_OP_MUL: case CELLM_OP_GLU:
        return {2, 0};
    case CELLM_OP_ROPE: return {2, 1};
    case CELLM_OP_KV_STORE: return {3, 1};
    case CELLM_OP_ATTENTION: return {6, 2};
    case CELLM_OP_STATE: return {0, 0};
    case CELLM_OP_SIGMOID: case CELLM_OP_SOFTPLUS: return {1, 0};
    case CELLM_OP_SSM_CONV: return {5, 0};
    case CELLM_OP_DELTA_NET: return {8, 0};
    case CELLM_OP_LAYER_NORM: return {1, 2};
    case CELLM_OP_PATCHES: return {1, 0};
    case CELLM_OP_SELF_ATTENTION: case CELLM_OP_SET_ROWS: return {3, 0};
    case CELLM_OP_HADAMARD: return {2, 0};
    default: return {-1, 0};
    }
}

// Checks one node of a plan whose earlier nodes are already checked.
class NodeCheck {
public:
    NodeCheck(const Rules& rules, const cellm_node& raw, std::vector<Node>& nodes, int32_t index)
        : rules_(rules), raw_(raw), nodes_(nodes), index_(index), n_(nodes[static_cast<size_t>(index)]) {}

    void run() {
        const Arity a = arity(n_.op);
        if (a.required < 0) fail(CELLM_ERR_UNSUPPORTED, "op not supported by this backend");
        for (int k = 0; k < CELLM_MAX_SRC; ++k) {
            const int32_t s = n_.src[static_cast<size_t>(k)];
            if (k < a.required && s < 0) fail(CELLM_ERR_INVALID_ARGUMENT, "missing src[" + std::to_string(k) + "]");
            if (k >= a.required + a.optional && s != -1)
                fail(CELLM_ERR_INVALID_ARGUMENT, "src[" + std::to_string(k) + "] must be -1 for this op");
            if (s < -1 || s >= index_)
                fail(CELLM_ERR_INVALID_ARGUMENT, "src[" + std::to_string(k) + "] = " + std::to_string(s) +
                                                     " is not an earlier node");
        }
        for (int64_t d : n_.ne)
            if (d < 1) fail(CELLM_ERR_INVALID_ARGUMENT, "shape " + shape_text(n_.ne) + " has an empty dimension");
        switch (n_.op) {
        case CELLM_OP_WEIGHT: case CELLM_OP_KV_CACHE: leaf(); break;
        case CELLM_OP_INPUT: input(); break;
        case CELLM_OP_GET_ROWS: get_rows(); break;
        case CELLM_OP_MATMUL: matmul(); break;
        case CELLM_OP_ADD: case CELLM_OP_MUL: broadcast_binary(); break;
        case CELLM_OP_SCALE: case CELLM_OP_SILU: case CELLM_OP_GELU: case CELLM_OP_TANH: unary(); break;
        case CELLM_OP_RMS_NORM: rms_norm(); break;
        case CELLM_OP_GLU: glu(); break;
        case CELLM_OP_ROPE: rope(); break;
        case CELLM_OP_RESHAPE: reshape(); break;
        case CELLM_OP_KV_STORE: kv_store(); break;
        case CELLM_OP_ATTENTION: attention(); break;
        case CELLM_OP_VIEW: view(); break;
        case CELLM_OP_STATE: newer_op(); leaf(); break;
        case CELLM_OP_SIGMOID: case CELLM_OP_SOFTPLUS: newer_op(); unary(); break;
        case CELLM_OP_SSM_CONV: newer_op(); ssm_conv(); break;
        case CELLM_OP_DELTA_NET: newer_op(); delta_net(); break;
        case CELLM_OP_LAYER_NORM: newer_op(); layer_norm(); break;
        case CELLM_OP_PATCHES: newer_op(); patches(); break;
        case CELLM_OP_SELF_ATTENTION: newer_op(); self_attention(); break;
        case CELLM_OP_SET_ROWS: newer_op(); set_rows(); break;
        case CELLM_OP_HADAMARD: newer_op(); hadamard(); break;
        default: break;
        }
        if (n_.bytes == 0) n_.bytes = static_cast<uint64_t>(n_.nelements()) * sizeof(float);
    }

private:
    [[noreturn]] void fail(cellm_status_code code, const std::string& what) const {
        throw Failure(code, rules_.prefix + describe(nodes_, index_) + ": " + what);
    }

    const Node& src(int k) const { return nodes_[static_cast<size_t>(n_.src[static_cast<size_t>(k)])]; }
    bool has(int k) const { return n_.src[static_cast<size_t>(k)] >= 0; }

    void expect(bool ok, const std::string& what) const {
        if (!ok) fail(CELLM_ERR_INVALID_ARGUMENT, what);
    }
    void expect_type(int k, cellm_dtype type, const char* role) const {
        if (src(k).type != type)
            fail(CELLM_ERR_INVALID_ARGUMENT, std::string(role) + " (src[" + std::to_string(k) + "]) has type " +
                                                 std::to_string(src(k).type) + ", expected " + std::to_string(type));
    }
    void expect_output(cellm_dtype type, const Shape& ne) const {
        expect(n_.type == type, "output type " + std::to_string(n_.type) + ", expected " + std::to_string(type));
        expect(n_.ne == ne, "output shape " + shape_text(n_.ne) + ", expected " + shape_text(ne));
    }
    void expect_vector(int k, int64_t length, const char* role) const {
        expect_type(k, CELLM_TYPE_I32, role);
        expect(src(k).ne == Shape{length, 1, 1, 1},
               std::string(role) + " shape " + shape_text(src(k).ne) + ", expected [" + std::to_string(length) + "]");
    }
    void expect_supported(cellm_dtype type) const {
        if (!rules_.accepts(n_.op, type))
            fail(CELLM_ERR_UNSUPPORTED, "element type " + std::to_string(type) + " not supported");
    }
    // Each dim of src[k] equals the node's or is 1.
    void expect_broadcastable(int k) const {
        for (size_t d = 0; d < 4; ++d)
            expect(src(k).ne[d] == n_.ne[d] || src(k).ne[d] == 1,
                   "src[" + std::to_string(k) + "] shape " + shape_text(src(k).ne) + " does not broadcast to " +
                       shape_text(n_.ne));
    }

    // Source k is the scale pool (graph.h) of `pool` when pool is I8 (F32 scales) or coded (F16), and absent
    // otherwise.
    void expect_scales(int k, const Node& pool, const std::string& pool_role) const {
        const std::string role = "src[" + std::to_string(k) + "]";
        const bool coded = pool.type == CELLM_TYPE_R4 || pool.type == CELLM_TYPE_R3;
        if (pool.type != CELLM_TYPE_I8 && !coded) {
            expect(!has(k), role + " (scales) is only for an I8, R4 or R3 pool, and " + pool_role + " is not one");
            return;
        }
        expect(has(k), "the " + std::string(coded ? "coded" : "I8") + " pool " + pool_role + " needs its scale pool as " + role);
        const Node& scales = src(k);
        expect(scales.op == CELLM_OP_KV_CACHE, role + " (scales) must be a KV_CACHE leaf");
        expect_type(k, coded ? CELLM_TYPE_F16 : CELLM_TYPE_F32, "scales");
        expect(scales.ne[1] == pool.ne[1] && scales.ne[2] == 1 && scales.ne[3] == 1 && pool.ne[0] % scales.ne[0] == 0,
               role + " (scales) shape " + shape_text(scales.ne) + " is not [n_groups, n_slots] for the pool " +
                   shape_text(pool.ne) + " (n_groups must divide " + std::to_string(pool.ne[0]) + ")");
    }

    void leaf() {
        const cellm_tensor_desc& t = raw_.tensor;
        expect(CELLM_HAS_FIELD(&t, cellm_tensor_desc, offset), "tensor descriptor too small");
        expect_supported(n_.type);
        expect(t.type == n_.type, "tensor type " + std::to_string(t.type) + " differs from node type " +
                                      std::to_string(n_.type));
        expect(Shape{t.ne[0], t.ne[1], t.ne[2], t.ne[3]} == n_.ne, "tensor shape differs from node shape");
        // The ABI's sizes, not blocks::, which knows only the weight formats (a KV pool may be I8).
        const int64_t block = cellm_dtype_block_size(n_.type);
        expect(n_.ne[0] % block == 0, "ne[0] not a multiple of the block size " + std::to_string(block));
        const auto row_bytes = static_cast<uint64_t>(cellm_dtype_type_size(n_.type) * (n_.ne[0] / block));
        uint64_t stride = static_cast<uint64_t>(cellm_dtype_type_size(n_.type));
        for (uint32_t d = 0; d < std::min<uint32_t>(t.n_dims, CELLM_MAX_DIMS); ++d) {
            expect(t.nb[d] == static_cast<int64_t>(stride), "tensor is not contiguous (nb[" + std::to_string(d) + "])");
            stride *= static_cast<uint64_t>(d == 0 ? n_.ne[0] / block : n_.ne[d]);
        }
        n_.bytes = row_bytes * static_cast<uint64_t>(n_.rows());
        expect(t.buffer != nullptr, "tensor has no buffer");
        const std::optional<BufferFacts> facts = rules_.buffer(t.buffer);
        expect(facts.has_value(), "tensor's buffer does not belong to this backend");
        expect(t.offset <= facts->size && n_.bytes <= facts->size - t.offset,
               "tensor of " + std::to_string(n_.bytes) + " bytes at offset " + std::to_string(t.offset) +
                   " exceeds its buffer of " + std::to_string(facts->size) + " bytes");
        n_.buffer = t.buffer;
        n_.offset = t.offset;
        // Kernels read F32 and F16 leaves as arrays.
        const uint64_t element = static_cast<uint64_t>(cellm_dtype_type_size(n_.type));
        if (n_.type == CELLM_TYPE_F32 || n_.type == CELLM_TYPE_F16)
            expect((reinterpret_cast<uintptr_t>(facts->host) + t.offset) % element == 0, "tensor data is not aligned to its type");
        if (n_.op == CELLM_OP_KV_CACHE) {
            expect(facts->writable, "KV pool lives in a read-only buffer");
            // Kind 6, a coded pool's query channel scale, is [head_dim, 1, n_head_kv] (graph.h).
            expect((n_.ne[2] == 1 || n_.iparams[1] == 6) && n_.ne[3] == 1, "KV pool must be [kv_dim, n_slots]");
        }
        if (n_.op == CELLM_OP_STATE) {
            expect(facts->writable, "state lives in a read-only buffer");
            expect(n_.ne[2] == 1 && n_.ne[3] == 1, "state must be [state_size, n_state_slots]");
        }
    }

    // Pixels and embeddings (ABI 1.3) are F32, every other kind I32 (graph.h); both are 4 bytes an element.
    void input() {
        const int32_t kind = n_.iparams[0];
        expect(kind >= 0 && kind < CELLM_INPUT_COUNT, "unknown input kind " + std::to_string(kind));
        const bool floats = kind == CELLM_INPUT_PIXELS || kind == CELLM_INPUT_EMBEDDINGS;
        const cellm_dtype type = floats ? CELLM_TYPE_F32 : CELLM_TYPE_I32;
        expect(n_.type == type, "input kind " + std::to_string(kind) + " has type " + std::to_string(n_.type) +
                                    ", expected " + std::to_string(type) + (floats ? " (F32)" : " (I32)"));
        expect_supported(n_.type);
        bool fits = n_.ne[2] == 1 && n_.ne[3] == 1 && n_.ne[1] == 1;  // [n]
        if (kind == CELLM_INPUT_BLOCK_TABLE || kind == CELLM_INPUT_EMBEDDINGS) fits = n_.ne[2] == 1 && n_.ne[3] == 1;
        if (kind == CELLM_INPUT_PIXELS) fits = n_.ne[0] == n_.ne[1] && n_.ne[2] == 3;  // [side, side, 3, n_images]
        expect(fits, "input shape " + shape_text(n_.ne) + " does not fit its kind");
        n_.bytes = static_cast<uint64_t>(n_.nelements()) * static_cast<uint64_t>(cellm_dtype_type_size(n_.type));
    }

    void get_rows() {
        const Node& table = src(0);
        expect_supported(table.type);
        expect(table.ne[2] == 1 && table.ne[3] == 1, "table must be 2-D");
        expect_vector(1, src(1).nelements(), "row ids");
        expect_output(CELLM_TYPE_F32, {table.ne[0], src(1).ne[0], 1, 1});
    }

    void matmul() {
        const Node& w = src(0);
        const Node& x = src(1);
        expect_supported(w.type);
        expect(w.ne[2] == 1 && w.ne[3] == 1, "weight must be 2-D");
        expect_type(1, CELLM_TYPE_F32, "activations");
        expect(x.ne[0] == w.ne[0], "inner dimensions differ: weight " + shape_text(w.ne) + ", activations " +
                                       shape_text(x.ne));
        expect_output(CELLM_TYPE_F32, {w.ne[1], x.ne[1], x.ne[2], x.ne[3]});
    }

    void broadcast_binary() {
        expect_type(0, CELLM_TYPE_F32, "src0");
        expect_type(1, CELLM_TYPE_F32, "src1");
        expect_output(CELLM_TYPE_F32, src(0).ne);
        expect_broadcastable(1);
    }

    void unary() {
        expect_type(0, CELLM_TYPE_F32, "src0");
        expect_output(CELLM_TYPE_F32, src(0).ne);
    }

    void rms_norm() {
        unary();
        if (has(1)) {
            expect_type(1, CELLM_TYPE_F32, "weight");
            expect(src(1).ne[0] == n_.ne[0], "weight length differs from the normalised dimension");
            expect_broadcastable(1);
        }
    }

    // Like RMS_NORM's weight: each of the optional weight (src1) and bias (src2) is [ne0], or broadcasts to the node.
    void layer_norm() {
        unary();
        for (int k : {1, 2}) {
            if (!has(k)) continue;
            const char* role = k == 1 ? "weight" : "bias";
            expect_type(k, CELLM_TYPE_F32, role);
            expect(src(k).ne[0] == n_.ne[0], std::string(role) + " length differs from the normalised dimension");
            expect_broadcastable(k);
        }
    }

    void patches() {
        const Node& image = src(0);
        const int64_t p = n_.iparams[0], width = image.ne[0], height = image.ne[1];
        expect_type(0, CELLM_TYPE_F32, "images");
        expect(p > 0, "patch size (iparams[0]) must be positive, got " + std::to_string(p));
        expect(width >= p && height >= p, "images " + shape_text(image.ne) + " are smaller than one patch of " +
                                              std::to_string(p) + " x " + std::to_string(p));
        expect_output(CELLM_TYPE_F32, {image.ne[2] * p * p, (height / p) * (width / p) * image.ne[3], 1, 1});
    }

    void self_attention() {
        const Node& q = src(0);
        const int32_t n_head = n_.iparams[0], n_head_kv = n_.iparams[1], head_dim = n_.iparams[2], group = n_.iparams[3];
        const int64_t n_tokens = q.ne[2];
        expect(n_head > 0 && n_head_kv > 0 && n_head % n_head_kv == 0,
               "n_head (" + std::to_string(n_head) + ") must be a positive multiple of n_head_kv (" +
                   std::to_string(n_head_kv) + ")");
        expect(head_dim > 0, "head_dim must be positive");
        expect(group > 0 && n_tokens % group == 0, "n_tokens (" + std::to_string(n_tokens) +
                                                        ") must be a multiple of the group size (" + std::to_string(group) + ")");
        expect_type(0, CELLM_TYPE_F32, "q");
        expect(q.ne == Shape{head_dim, n_head, n_tokens, 1},
               "q shape " + shape_text(q.ne) + " is not [head_dim, n_head, n_tokens] of iparams");
        for (int k : {1, 2}) {
            expect_type(k, CELLM_TYPE_F32, k == 1 ? "k" : "v");
            expect(src(k).ne == Shape{head_dim, n_head_kv, n_tokens, 1},
                   std::string(k == 1 ? "k" : "v") + " shape " + shape_text(src(k).ne) + ", expected " +
                       shape_text({head_dim, n_head_kv, n_tokens, 1}));
        }
        expect_output(CELLM_TYPE_F32, {static_cast<int64_t>(head_dim) * n_head, n_tokens, 1, 1});
    }

    void set_rows() {
        const Node& into = src(0);
        expect_type(0, CELLM_TYPE_F32, "src0");
        expect(into.ne[2] == 1 && into.ne[3] == 1, "src0 shape " + shape_text(into.ne) + " is not [n, m]");
        expect_type(1, CELLM_TYPE_F32, "new rows");
        expect(src(1).ne[0] == into.ne[0] && src(1).ne[2] == 1 && src(1).ne[3] == 1,
               "new rows " + shape_text(src(1).ne) + " are not [" + std::to_string(into.ne[0]) + ", k]");
        expect_vector(2, src(1).ne[1], "row indices");
        expect_output(CELLM_TYPE_F32, into.ne);
    }

    void glu() {
        expect_type(0, CELLM_TYPE_F32, "gate");
        expect_type(1, CELLM_TYPE_F32, "up");
        expect(src(1).ne == src(0).ne, "gate and up shapes differ");
        expect(n_.iparams[0] == 0 || n_.iparams[0] == 1, "iparams[0] must be 0 (SiLU) or 1 (GELU)");
        expect_output(CELLM_TYPE_F32, src(0).ne);
    }

    void rope() {
        const Node& x = src(0);
        expect_type(0, CELLM_TYPE_F32, "src0");
        expect(x.ne[3] == 1, "src0 must be [head_dim, n_heads, n_tokens]");
        expect_vector(1, x.ne[2], "positions");
        const int32_t n_rot = n_.iparams[0];
        expect(n_rot > 0 && n_rot % 2 == 0 && n_rot <= x.ne[0], "n_rot must be even and in (0, head_dim]");
        expect(n_.iparams[1] == CELLM_ROPE_ADJACENT || n_.iparams[1] == CELLM_ROPE_HALVES, "unknown rope mode");
        expect(n_.fparams[0] > 0.0f, "freq_base must be positive");
        if (has(2)) {
            expect_type(2, CELLM_TYPE_F32, "frequency factors");
            expect(src(2).nelements() == n_rot / 2, "frequency factors must have n_rot/2 elements");
        }
        expect_output(CELLM_TYPE_F32, x.ne);
    }

    void reshape() {
        expect_supported(src(0).type);
        expect(n_.type == src(0).type, "type differs from its source");
        expect(n_.nelements() == src(0).nelements(), "element count differs from its source");
        n_.bytes = src(0).bytes;
    }

    void hadamard() {
        const int32_t d = n_.iparams[0];
        expect_type(0, CELLM_TYPE_F32, "src0");
        expect(d >= 2 && d <= (1 << 16) && (d & (d - 1)) == 0, "run length " + std::to_string(d) + " is not a power of two in [2, 65536]");
        expect(src(0).ne[0] % d == 0, "src0 shape " + shape_text(src(0).ne) + " is not made of runs of " + std::to_string(d));
        expect_type(1, CELLM_TYPE_F32, "signs");
        expect(src(1).ne == Shape{d, 1, 1, 1}, "signs shape " + shape_text(src(1).ne) + " is not [" + std::to_string(d) + "]");
        expect(n_.iparams[1] == 0 || n_.iparams[1] == 1, "direction must be 0 (forward) or 1 (inverse)");
        expect_output(CELLM_TYPE_F32, src(0).ne);
    }

    void view() {
        expect_type(0, CELLM_TYPE_F32, "src0");
        expect(n_.type == CELLM_TYPE_F32, "output type " + std::to_string(n_.type) + ", expected F32");
        int64_t last = n_.iparams[0] + n_.ne[0] - 1;
        for (size_t d = 0; d < 4; ++d) expect(n_.iparams[d] >= 0, "offset and strides must not be negative");
        for (size_t d = 1; d < 4; ++d) last += (n_.ne[d] - 1) * n_.iparams[d];
        expect(last < src(0).nelements(), "the window reaches element " + std::to_string(last) + " of a source of " +
                                              std::to_string(src(0).nelements()));
    }

    void kv_store() {
        const Node& pool = src(0);
        expect(pool.op == CELLM_OP_KV_CACHE || pool.op == CELLM_OP_KV_STORE, "src0 must be a KV pool");
        expect_supported(pool.type);
        expect_type(1, CELLM_TYPE_F32, "new rows");
        expect(src(1).ne[0] == pool.ne[0] && src(1).ne[2] == 1 && src(1).ne[3] == 1,
               "new rows " + shape_text(src(1).ne) + " do not match the pool " + shape_text(pool.ne));
        expect_vector(2, src(1).ne[1], "slots");
        expect_scales(3, pool, "src[0]");
        // The output is the pool itself; graph.h says outputs are F32, so accept that or the pool's type.
        expect(n_.type == pool.type || n_.type == CELLM_TYPE_F32, "output type differs from the pool's");
        expect(n_.ne == pool.ne, "output shape differs from the pool's");
        n_.type = pool.type;
        n_.bytes = pool.bytes;
    }

    void attention() {
        const Node& q = src(0);
        const int32_t n_head = n_.iparams[0], n_head_kv = n_.iparams[1], head_dim = n_.iparams[2];
        const int32_t block_size = n_.iparams[3], window = n_.iparams[4];
        expect_type(0, CELLM_TYPE_F32, "q");
        expect(n_head > 0 && n_head_kv > 0 && n_head % n_head_kv == 0, "n_head must be a multiple of n_head_kv");
        expect(head_dim > 0 && block_size > 0 && window >= 0, "head_dim and block_size must be positive, window >= 0");
        expect(q.ne == Shape{head_dim, n_head, q.ne[2], 1}, "q shape " + shape_text(q.ne) + " does not match iparams");
        for (int k : {1, 2}) {
            const Node& pool = src(k);
            expect(pool.op == CELLM_OP_KV_STORE || pool.op == CELLM_OP_KV_CACHE,
                   "src[" + std::to_string(k) + "] must be a KV pool");
            expect(rules_.accepts(CELLM_OP_KV_STORE, pool.type), "KV pool type not supported");
            expect(pool.ne[0] == static_cast<int64_t>(head_dim) * n_head_kv,
                   "KV pool row of " + std::to_string(pool.ne[0]) + " is not head_dim * n_head_kv");
            expect_scales(k + 5, pool, "src[" + std::to_string(k) + "]");
        }
        expect_type(3, CELLM_TYPE_I32, "block table");
        expect(src(3).ne[2] == 1 && src(3).ne[3] == 1, "block table must be [max_blocks, n_seqs]");
        expect_vector(4, q.ne[2], "token sequences");
        expect_vector(5, q.ne[2], "positions");
        expect_output(CELLM_TYPE_F32, {static_cast<int64_t>(head_dim) * n_head, q.ne[2], 1, 1});
    }

    // The ops added for recurrent layers (ABI 1.2) and for vision encoders (ABI 1.3) are F32 only; a backend without
    // kernels for them declines here, once, naming the node.
    void newer_op() const {
        if (!rules_.accepts(n_.op, CELLM_TYPE_F32)) fail(CELLM_ERR_UNSUPPORTED, "op not supported by this backend");
    }

    // src[k] is a STATE leaf of `size` floats per slot.
    void expect_state(int k, int64_t size) const {
        const std::string role = "src[" + std::to_string(k) + "] (state)";
        expect(src(k).op == CELLM_OP_STATE, role + " must be a STATE leaf");
        expect_type(k, CELLM_TYPE_F32, "state");
        expect(src(k).ne[0] == size, role + " shape " + shape_text(src(k).ne) + " has " + std::to_string(src(k).ne[0]) +
                                         " floats per slot, expected " + std::to_string(size));
    }

    void expect_state_slots(int k) const {
        expect_type(k, CELLM_TYPE_I32, "state slots");
        expect(src(k).ne[1] == 1 && src(k).ne[2] == 1 && src(k).ne[3] == 1,
               "state slots (src[" + std::to_string(k) + "]) shape " + shape_text(src(k).ne) + " is not [n_seqs]");
    }

    void ssm_conv() {
        const Node& x = src(0);
        const Node& w = src(1);
        expect_type(0, CELLM_TYPE_F32, "x");
        expect(x.ne[2] == 1 && x.ne[3] == 1, "x shape " + shape_text(x.ne) + " is not [channels, n_tokens]");
        expect_type(1, CELLM_TYPE_F32, "weights");
        expect(w.ne[0] >= 2 && w.ne[1] == x.ne[0] && w.ne[2] == 1 && w.ne[3] == 1,
               "weights shape " + shape_text(w.ne) + " is not [kernel >= 2, " + std::to_string(x.ne[0]) + "]");
        expect_state(2, (w.ne[0] - 1) * x.ne[0]);
        expect_vector(3, x.ne[1], "token sequences");
        expect_state_slots(4);
        expect_output(CELLM_TYPE_F32, x.ne);
    }

    void delta_net() {
        const Node& q = src(0);
        const Node& v = src(2);
        const int64_t d_k = q.ne[0], n_k = q.ne[1], n_tokens = q.ne[2], d_v = v.ne[0], n_v = v.ne[1];
        expect_type(0, CELLM_TYPE_F32, "q");
        expect_type(1, CELLM_TYPE_F32, "k");
        expect_type(2, CELLM_TYPE_F32, "v");
        expect(q.ne[3] == 1, "q shape " + shape_text(q.ne) + " is not [d_k, n_k_heads, n_tokens]");
        expect(src(1).ne == q.ne, "k shape " + shape_text(src(1).ne) + " differs from q's " + shape_text(q.ne));
        expect(v.ne[2] == n_tokens && v.ne[3] == 1,
               "v shape " + shape_text(v.ne) + " is not [d_v, n_v_heads, " + std::to_string(n_tokens) + "]");
        expect(n_v % n_k == 0, "value heads (" + std::to_string(n_v) + ") are not a multiple of key heads (" +
                                   std::to_string(n_k) + ")");
        expect(n_.iparams[0] == 0 || n_.iparams[0] == 1, "iparams[0] (head order) must be 0 or 1");
        for (int k : {3, 4}) {
            expect_type(k, CELLM_TYPE_F32, k == 3 ? "g" : "beta");
            expect(src(k).ne == Shape{n_v, n_tokens, 1, 1},
                   "src[" + std::to_string(k) + "] shape " + shape_text(src(k).ne) + " is not [n_v_heads, n_tokens]");
        }
        expect_state(5, n_v * d_k * d_v);
        expect_vector(6, n_tokens, "token sequences");
        expect_state_slots(7);
        expect_output(CELLM_TYPE_F32, v.ne);
    }

    const Rules& rules_;
    const cellm_node& raw_;
    std::vector<Node>& nodes_;
    int32_t index_;
    Node& n_;
};

}  // namespace

Checked check(const cellm_graph& graph, const Rules& rules) {
    Checked plan;
    if (!CELLM_HAS_FIELD(&graph, cellm_graph, outputs))
        throw Failure(CELLM_ERR_INVALID_ARGUMENT, rules.prefix + "graph struct too small");
    if (graph.n_nodes <= 0 || graph.nodes == nullptr || graph.node_size < sizeof(cellm_node))
        throw Failure(CELLM_ERR_INVALID_ARGUMENT, rules.prefix + "graph has no nodes or a node_size below this ABI's");
    plan.nodes.resize(static_cast<size_t>(graph.n_nodes));
    for (int32_t i = 0; i < graph.n_nodes; ++i) {
        const cellm_node& raw = *cellm_graph_node(&graph, i);
        Node& n = plan.nodes[static_cast<size_t>(i)];
        n.op = raw.op;
        n.type = raw.type;
        std::copy(std::begin(raw.ne), std::end(raw.ne), n.ne.begin());
        std::copy(std::begin(raw.src), std::end(raw.src), n.src.begin());
        std::copy(std::begin(raw.iparams), std::end(raw.iparams), n.iparams.begin());
        std::copy(std::begin(raw.fparams), std::end(raw.fparams), n.fparams.begin());
        n.name = raw.name != nullptr ? raw.name : "";
        NodeCheck(rules, raw, plan.nodes, i).run();
    }
    if (graph.n_outputs < 0 || (graph.n_outputs > 0 && graph.outputs == nullptr))
        throw Failure(CELLM_ERR_INVALID_ARGUMENT, rules.prefix + "graph outputs missing");
    for (int32_t k = 0; k < graph.n_outputs; ++k) {
        const int32_t o = graph.outputs[k];
        if (o < 0 || o >= graph.n_nodes)
            throw Failure(CELLM_ERR_INVALID_ARGUMENT, rules.prefix + "graph output " + std::to_string(k) + " names node " +
                                                          std::to_string(o) + ", which does not exist");
        plan.outputs.push_back(o);
    }
    return plan;
}

void check_bindings(const Checked& plan, const cellm_execute_args* args, const std::string& prefix) {
    if (args == nullptr || !CELLM_HAS_FIELD(args, cellm_execute_args, output_stride))
        throw Failure(CELLM_ERR_INVALID_ARGUMENT, prefix + "graph_execute needs a backend, plan and arguments");
    const size_t n_inputs = args->n_inputs, n_outputs = args->n_outputs;
    if ((n_inputs > 0 && (args->inputs == nullptr || args->input_stride < sizeof(cellm_input_binding))) ||
        (n_outputs > 0 && (args->outputs == nullptr || args->output_stride < sizeof(cellm_output_binding))))
        throw Failure(CELLM_ERR_INVALID_ARGUMENT, prefix + "graph_execute: binding arrays missing or strides too small");
    const auto n_nodes = static_cast<int32_t>(plan.nodes.size());
    std::vector<bool> bound(plan.nodes.size(), false);
    for (size_t k = 0; k < n_inputs; ++k) {
        const cellm_input_binding& b = *cellm_input_at(args, k);
        if (b.node < 0 || b.node >= n_nodes || plan.nodes[static_cast<size_t>(b.node)].op != CELLM_OP_INPUT)
            throw Failure(CELLM_ERR_INVALID_ARGUMENT, prefix + "input binding " + std::to_string(k) + " names node " +
                                                          std::to_string(b.node) + ", which is not an INPUT node");
        const Node& n = plan.nodes[static_cast<size_t>(b.node)];
        if (bound[static_cast<size_t>(b.node)])
            throw Failure(CELLM_ERR_INVALID_ARGUMENT, prefix + describe(plan.nodes, b.node) + " is bound twice");
        if (b.size != n.bytes || b.data == nullptr)
            throw Failure(CELLM_ERR_INVALID_ARGUMENT, prefix + describe(plan.nodes, b.node) + " needs " +
                                                          std::to_string(n.bytes) + " bytes (" + std::to_string(n.nelements()) +
                                                          (n.type == CELLM_TYPE_F32 ? " F32" : " I32") +
                                                          " values), binding has " + std::to_string(b.size));
        bound[static_cast<size_t>(b.node)] = true;
    }
    for (int32_t i = 0; i < n_nodes; ++i)
        if (plan.nodes[static_cast<size_t>(i)].op == CELLM_OP_INPUT && !bound[static_cast<size_t>(i)])
            throw Failure(CELLM_ERR_INVALID_ARGUMENT, prefix + describe(plan.nodes, i) + " has no input binding");
    for (size_t k = 0; k < n_outputs; ++k) {
        const cellm_output_binding& b = *cellm_output_at(args, k);
        if (std::find(plan.outputs.begin(), plan.outputs.end(), b.node) == plan.outputs.end())
            throw Failure(CELLM_ERR_INVALID_ARGUMENT, prefix + "output binding " + std::to_string(k) + " names node " +
                                                          std::to_string(b.node) + ", which is not a graph output");
        const Node& n = plan.nodes[static_cast<size_t>(b.node)];
        if (b.size != n.bytes || b.data == nullptr)
            throw Failure(CELLM_ERR_INVALID_ARGUMENT, prefix + "output " + describe(plan.nodes, b.node) + " has " +
                                                          std::to_string(n.bytes) + " bytes, binding has " + std::to_string(b.size));
    }
}

}  // namespace cellm::graph
