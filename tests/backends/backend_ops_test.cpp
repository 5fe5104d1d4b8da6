// Every backend plugin in the plugin folder through its C ABI: every op against straightforward reference code,
// plan reuse, threads, and bad input that must come back as an error status. Backends are found by their
// descriptors, so a new one is tested here without changes.
#include "blocks.h"
#include "plugin/host_api.h"

#include <cellm/backend.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <ostream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace {

// ---- The backends in the plugin folder ----

struct BackendPlugin {
    std::string name;  // the descriptor's
    const cellm_backend_iface* iface = nullptr;
};

void PrintTo(const BackendPlugin& plugin, std::ostream* os) { *os << plugin.name; }

struct PluginFolder {
    std::vector<BackendPlugin> backends;  // sorted by name
    std::vector<std::string> failures;    // "file: why" for each cellm-*.so that did not load as a plugin
};

// Every cellm-*.so of CELLM_PLUGIN_DIR, loaded once and never unloaded (the tables point into the libraries).
const PluginFolder& plugin_folder() {
    static const PluginFolder folder = [] {
        PluginFolder f;
        std::error_code error;
        for (const auto& entry : std::filesystem::directory_iterator(CELLM_PLUGIN_DIR, error)) {
            const std::string file = entry.path().filename().string();
            if (!file.starts_with("cellm-") || entry.path().extension() != ".so") continue;
            void* lib = dlopen(entry.path().c_str(), RTLD_NOW | RTLD_LOCAL);
            if (lib == nullptr) {
                f.failures.push_back(file + ": " + dlerror());
                continue;
            }
            auto entry_fn = reinterpret_cast<cellm_plugin_entry_fn>(dlsym(lib, CELLM_PLUGIN_ENTRY_SYMBOL));
            const cellm_plugin_desc* desc =
                entry_fn != nullptr ? entry_fn(cellm::host_api(), CELLM_ABI_MAJOR, CELLM_ABI_MINOR) : nullptr;
            if (desc == nullptr) f.failures.push_back(file + ": no plugin descriptor for this ABI");
            else if (desc->kind == CELLM_PLUGIN_BACKEND)
                f.backends.push_back({desc->name, static_cast<const cellm_backend_iface*>(desc->iface)});
        }
        if (error) f.failures.push_back(std::string(CELLM_PLUGIN_DIR) + ": " + error.message());
        std::sort(f.backends.begin(), f.backends.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
        return f;
    }();
    return folder;
}

const BackendPlugin* find_backend(std::string_view name) {
    for (const BackendPlugin& b : plugin_folder().backends)
        if (b.name == name) return &b;
    return nullptr;
}

TEST(BackendPlugins, EveryPluginLoadsAndEveryBuiltBackendIsTested) {
    for (const std::string& failure : plugin_folder().failures) ADD_FAILURE() << failure;
    std::stringstream built(CELLM_BUILT_BACKENDS);
    for (std::string name; std::getline(built, name, ',');)
        EXPECT_NE(find_backend(name), nullptr) << "backend '" << name << "' was built but is not in " CELLM_PLUGIN_DIR;
}

// ---- What the known backends say about themselves ----

// Expectations that differ between backends; a backend missing here only has to answer something.
struct KnownBackend {
    std::string_view name;
    std::string_view device_name;
    const char* describe;  // regular expression its one describe line matches
    uint32_t flags;
    int fixed_threads;     // the thread count it reports whatever it is asked; 0: the count it is asked for
};

constexpr KnownBackend known_backends[] = {
    {"scalar", "cpu (scalar reference)", "cpu: portable scalar reference", CELLM_BACKEND_HOST_MEMORY, 1},
    {"openblas", "cpu (openblas)", R"(cpu: \d+ physical cores, kernels \S+, OpenBLAS .+)", CELLM_BACKEND_HOST_MEMORY, 0},
};

const KnownBackend* known_backend(std::string_view name) {
    for (const KnownBackend& k : known_backends)
        if (k.name == name) return &k;
    return nullptr;
}

// Threads get_info should report for an instance created with threads = `asked`: CPU backends compute with
// what they are asked for unless they are fixed, other backends report 0 (backend.h).
int expected_threads(std::string_view name, uint32_t flags, int asked) {
    const KnownBackend* known = known_backend(name);
    if (known != nullptr && known->fixed_threads > 0) return known->fixed_threads;
    return (flags & CELLM_BACKEND_HOST_MEMORY) != 0 ? asked : 0;
}

// ---- One backend instance and a graph for it ----

// Message of a status (empty for success), freeing it.
std::string message(cellm_status* s) {
    if (s == nullptr) return "";
    std::string m = cellm::host_api()->status_message(s);
    cellm::host_api()->status_free(s);
    return m.empty() ? "(empty message)" : m;
}

std::vector<float> random_floats(size_t n, unsigned seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
}

using Shape = std::initializer_list<int64_t>;
using Bindings = std::vector<std::pair<int32_t, std::vector<int32_t>>>;
using FloatBindings = std::vector<std::pair<int32_t, std::vector<float>>>;  // the F32 input kinds (ABI 1.3)

// A weight matrix of k x m elements stored as `type`, and its stored values expanded to floats.
struct Weights {
    cellm_dtype type;
    int64_t k, m;                 // row length, rows
    std::vector<uint8_t> stored;  // in the type's layout
    std::vector<float> values;    // what `stored` means
};

Weights make_weights(cellm_dtype type, int64_t k, int64_t m, unsigned seed) {
    Weights w{type, k, m, std::vector<uint8_t>(cellm::blocks::row_bytes(type, k) * static_cast<uint64_t>(m)),
              std::vector<float>(static_cast<size_t>(k * m))};
    cellm::blocks::quantize_row(type, random_floats(w.values.size(), seed).data(), w.stored.data(), k * m);
    cellm::blocks::dequantize_row(type, w.stored.data(), w.values.data(), k * m);
    return w;
}

// A backend instance, the graph being built for it, the buffers of its leaves, its plan and the last results.
struct Instance {
    Instance() = default;
    Instance(const Instance&) = delete;
    Instance& operator=(const Instance&) = delete;
    ~Instance() {
        if (backend == nullptr) return;
        if (plan != nullptr) be->plan_free(backend, plan);
        for (cellm_buffer* b : buffers) be->buffer_free(backend, b);
        be->destroy(backend);
    }

    // Creates an instance of `iface`, with a "threads" option when threads > 0; "" or the error. The vulkan
    // backend gets its exact precision, which the reference's bars here are for (on GPUs it defaults to fast
    // precision, which VulkanFast tests).
    std::string open(const cellm_backend_iface* iface, int threads = 0) {
        be = iface;
        const std::string value = std::to_string(threads);
        std::vector<cellm_option> options;
        if (threads > 0) options.push_back({"threads", value.c_str()});
        const BackendPlugin* vulkan = find_backend("vulkan");
        if (vulkan != nullptr && vulkan->iface == iface) options.push_back({"precision", "exact"});
        return message(be->create(options.data(), options.size(), &backend));
    }

    // Creates an instance of `iface` with the given options; "" or the error.
    std::string open_with(const cellm_backend_iface* iface, const std::vector<cellm_option>& options) {
        be = iface;
        return message(be->create(options.data(), options.size(), &backend));
    }

    cellm_backend_info info() const {
        cellm_backend_info i{};
        i.struct_size = sizeof i;
        EXPECT_EQ(message(be->get_info(backend, &i)), "");
        return i;
    }

    // Starts a new graph; the buffers stay until the instance goes.
    void clear_graph() {
        if (plan != nullptr) be->plan_free(backend, plan);
        plan = nullptr;
        nodes.clear();
    }

    int32_t add(cellm_op op, cellm_dtype type, Shape ne, std::initializer_list<int32_t> src = {},
                std::initializer_list<int32_t> ip = {}, std::initializer_list<float> fp = {}) {
        cellm_node n{};
        n.op = op;
        n.type = type;
        size_t d = 0;
        for (int64_t v : ne) n.ne[d++] = v;
        for (; d < 4; ++d) n.ne[d] = 1;
        std::fill(std::begin(n.src), std::end(n.src), -1);
        std::copy(src.begin(), src.end(), n.src);
        std::copy(ip.begin(), ip.end(), n.iparams);
        std::copy(fp.begin(), fp.end(), n.fparams);
        nodes.push_back(n);
        return static_cast<int32_t>(nodes.size() - 1);
    }
    int32_t input(cellm_input_kind kind, Shape ne) { return add(CELLM_OP_INPUT, CELLM_TYPE_I32, ne, {}, {kind}); }
    int32_t input_f32(cellm_input_kind kind, Shape ne) { return add(CELLM_OP_INPUT, CELLM_TYPE_F32, ne, {}, {kind}); }

    // A leaf whose data (already in `type`'s layout) is uploaded into a fresh buffer.
    int32_t leaf(cellm_op op, cellm_dtype type, int64_t ne0, int64_t ne1, const void* data) {
        const auto row_bytes = static_cast<uint64_t>(cellm_dtype_type_size(type) * (ne0 / cellm_dtype_block_size(type)));
        const uint64_t bytes = row_bytes * static_cast<uint64_t>(ne1);
        cellm_buffer* buf = nullptr;
        EXPECT_EQ(message(be->buffer_alloc(backend, bytes, CELLM_BUFFER_WEIGHTS, &buf)), "");
        buffers.push_back(buf);
        if (data != nullptr) {
            EXPECT_EQ(message(be->buffer_write(backend, buf, 0, data, bytes)), "");
        }
        const int32_t i = add(op, type, {ne0, ne1});
        cellm_tensor_desc& t = nodes[static_cast<size_t>(i)].tensor;
        t.struct_size = sizeof t;
        t.type = type;
        t.n_dims = 2;
        t.ne[0] = ne0;
        t.ne[1] = ne1;
        t.ne[2] = t.ne[3] = 1;
        t.nb[0] = cellm_dtype_type_size(type);
        t.nb[1] = static_cast<int64_t>(row_bytes);
        t.buffer = buf;
        return i;
    }
    int32_t f32_weight(const std::vector<float>& v, int64_t ne0, int64_t ne1) {
        return leaf(CELLM_OP_WEIGHT, CELLM_TYPE_F32, ne0, ne1, v.data());
    }
    int32_t weight(const Weights& w) { return leaf(CELLM_OP_WEIGHT, w.type, w.k, w.m, w.stored.data()); }

    // Prepares the graph built so far (replacing an earlier plan); "" or the error.
    std::string prepare(std::vector<int32_t> outputs) {
        if (plan != nullptr) be->plan_free(backend, plan);
        plan = nullptr;
        out_nodes = std::move(outputs);
        cellm_graph g{};
        g.struct_size = sizeof g;
        g.node_size = sizeof(cellm_node);
        g.n_nodes = static_cast<int32_t>(nodes.size());
        g.nodes = nodes.data();
        g.n_outputs = static_cast<int32_t>(out_nodes.size());
        g.outputs = out_nodes.data();
        return message(be->graph_prepare(backend, &g, &plan));
    }

    // Execute arguments over caller-owned binding arrays (kept in `args_` so a pointer to them can be passed).
    const cellm_execute_args& args_for(const cellm_input_binding* in, size_t n_in, const cellm_output_binding* out,
                                       size_t n_out) {
        args_ = {sizeof(cellm_execute_args), in, n_in, sizeof(cellm_input_binding), out, n_out, sizeof(cellm_output_binding)};
        return args_;
    }
    cellm_execute_args args_{};

    uint64_t bytes_of(int32_t node) const {
        const cellm_node& n = nodes[static_cast<size_t>(node)];
        return static_cast<uint64_t>(cellm_node_nelements(&n)) * 4;
    }

    // Executes with I32 inputs and F32 ones; fills `results` (one vector per prepared output).
    std::string execute(const Bindings& in, const FloatBindings& floats = {}) {
        std::vector<cellm_input_binding> ib;
        for (const auto& [node, data] : in) ib.push_back({node, data.data(), data.size() * 4});
        for (const auto& [node, data] : floats) ib.push_back({node, data.data(), data.size() * 4});
        results.assign(out_nodes.size(), {});
        std::vector<cellm_output_binding> ob;
        for (size_t k = 0; k < out_nodes.size(); ++k) {
            results[k].resize(bytes_of(out_nodes[k]) / 4);
            ob.push_back({out_nodes[k], results[k].data(), bytes_of(out_nodes[k])});
        }
        return message(be->graph_execute(backend, plan, &args_for(ib.data(), ib.size(), ob.data(), ob.size())));
    }

    const cellm_backend_iface* be = nullptr;
    cellm_backend* backend = nullptr;
    cellm_plan* plan = nullptr;
    std::vector<cellm_buffer*> buffers;
    std::vector<cellm_node> nodes;
    std::vector<int32_t> out_nodes;
    std::vector<std::vector<float>> results;
};

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, float tol, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], tol * (1.0f + std::fabs(want[i]))) << what << " element " << i;
}

void expect_identical(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
            << what << " element " << i << ": " << got[i] << " vs " << want[i];
}

// ---- The I8 KV encoding (graph.h) ----

// Rows of an I8 pool and its scale pool, encoded as graph.h words it: per group of `width` values, scale
// max|x| / 127 and codes x / scale rounded to nearest even; a group of zeros is scale 0, codes 0.
struct Int8Rows {
    std::vector<int8_t> codes;
    std::vector<float> scales;

    Int8Rows(const std::vector<float>& x, int64_t width) : codes(x.size()), scales(x.size() / size_t(width)) {
        for (size_t g = 0; g < scales.size(); ++g) {
            float amax = 0;
            for (int64_t i = 0; i < width; ++i) amax = std::max(amax, std::fabs(x[g * size_t(width) + size_t(i)]));
            scales[g] = amax / 127.0f;
            for (int64_t i = 0; i < width; ++i) {
                const size_t k = g * size_t(width) + size_t(i);
                codes[k] = amax == 0 ? int8_t{0} : static_cast<int8_t>(std::nearbyint(x[k] / scales[g]));
            }
        }
    }
    float value(size_t i, int64_t width) const { return scales[i / size_t(width)] * float(codes[i]); }
};

// ATTENTION over decoded pools in double, for one sequence whose key position j lives in slot_of(j): element i of
// the pools (slot * kv_dim + offset) reads as key(i) and value(i).
template <class SlotOf, class Key, class Value>
std::vector<float> attention_reference(const std::vector<float>& q, const std::vector<int32_t>& pos, int n_head, int n_kv,
                                       int hd, float scale, SlotOf slot_of, Key key, Value value) {
    const int nt = static_cast<int>(pos.size()), kv_dim = n_kv * hd;
    std::vector<float> want(size_t(nt) * n_head * hd, 0.0f);
    for (int t = 0; t < nt; ++t)
        for (int h = 0; h < n_head; ++h) {
            const int kvh = h / (n_head / n_kv);
            std::vector<double> w;
            for (int j = 0; j <= pos[size_t(t)]; ++j) {
                double s = 0;
                for (int d = 0; d < hd; ++d)
                    s += double(q[size_t((t * n_head + h) * hd + d)]) * key(size_t(slot_of(j) * kv_dim + kvh * hd + d));
                w.push_back(s * scale);
            }
            double mx = *std::max_element(w.begin(), w.end()), sum = 0;
            for (double& x : w) sum += x = std::exp(x - mx);
            for (int j = 0; j <= pos[size_t(t)]; ++j)
                for (int d = 0; d < hd; ++d)
                    want[size_t((t * n_head + h) * hd + d)] +=
                        float(w[size_t(j)] / sum * value(size_t(slot_of(j) * kv_dim + kvh * hd + d)));
        }
    return want;
}

// ---- MATMUL's definition ----

constexpr cellm_dtype every_weight_type[] = {CELLM_TYPE_F32,  CELLM_TYPE_F16,  CELLM_TYPE_BF16, CELLM_TYPE_Q8_0,
                                             CELLM_TYPE_Q4_0, CELLM_TYPE_Q4_1, CELLM_TYPE_Q5_0, CELLM_TYPE_Q5_1,
                                             CELLM_TYPE_Q4_K, CELLM_TYPE_Q5_K, CELLM_TYPE_Q6_K};

// MATMUL (w: k x m, x: k x n columns) written out: the activations rounded as the weight type's dot product sees
// them (ggml's Q8 blocks: codes x*127/amax, fp16 scale); Q4_1/Q5_1 add each block's min times the Q8_1 block sum
// stored as fp16 rather than the exact sum of the rounded values. Sums in double.
std::vector<float> matmul_reference(const Weights& w, const std::vector<float>& x, int64_t n) {
    const cellm_dtype type = w.type;
    const int64_t k = w.k, m = w.m;
    const bool affine = type == CELLM_TYPE_Q4_1 || type == CELLM_TYPE_Q5_1;
    const bool q8_blocks = affine || type == CELLM_TYPE_Q4_0 || type == CELLM_TYPE_Q5_0 || type == CELLM_TYPE_Q8_0;
    std::vector<float> want(m * n);
    for (int64_t c = 0; c < n; ++c) {
        std::vector<float> xr(x.begin() + c * k, x.begin() + (c + 1) * k), block_sums(k / 32, 0.0f);
        if (q8_blocks) {
            for (int64_t b = 0; b < k / 32; ++b) {
                float amax = 0;
                for (int64_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xr[b * 32 + j]));
                const float d = amax / 127.0f, d16 = cellm::blocks::fp16_to_fp32(cellm::blocks::fp32_to_fp16(d));
                int codes = 0;
                for (int64_t j = 0; j < 32; ++j) {
                    const float q = std::nearbyint(xr[b * 32 + j] * (127.0f / amax));
                    codes += int(q);
                    xr[b * 32 + j] = q * d16;
                }
                block_sums[b] = cellm::blocks::fp16_to_fp32(cellm::blocks::fp32_to_fp16(d * float(codes))) - d16 * float(codes);
            }
        } else {
            cellm::blocks::round_activations(type, xr.data(), xr.data(), k);
        }
        for (int64_t r = 0; r < m; ++r) {
            double s = 0;
            for (int64_t i = 0; i < k; ++i) s += double(w.values[r * k + i]) * xr[i];
            if (affine) {
                const uint8_t* row = w.stored.data() + r * cellm::blocks::row_bytes(type, k);
                const uint64_t block_bytes = cellm::blocks::row_bytes(type, 32);
                for (int64_t b = 0; b < k / 32; ++b) {
                    uint16_t min_bits;
                    std::memcpy(&min_bits, row + b * block_bytes + 2, 2);
                    s += double(cellm::blocks::fp16_to_fp32(min_bits)) * block_sums[b];
                }
            }
            want[c * m + r] = float(s);
        }
    }
    return want;
}

// One MATMUL of fresh weights and activations, both determined by `seed`.
struct MatmulCase {
    cellm_dtype type;
    int64_t k, m, n;
    unsigned seed;

    Weights weights() const { return make_weights(type, k, m, seed); }
    std::vector<float> x() const { return random_floats(static_cast<size_t>(k * n), seed + 1); }
    std::string label() const {
        return "type " + std::to_string(type) + ", k " + std::to_string(k) + ", m " + std::to_string(m) + ", n " + std::to_string(n);
    }
    int32_t add_to(Instance& g) const {
        const int32_t w = g.weight(weights());
        const int32_t xn = g.f32_weight(x(), k, n);
        return g.add(CELLM_OP_MATMUL, CELLM_TYPE_F32, {m, n}, {w, xn});
    }
};

// ---- A decoder step over a paged KV cache ----

// Token embeddings (GET_ROWS), Q/K/V projections, RoPE, KV_STORE into an F32 K pool and an F16 V pool (or two I8
// pools: K with a scale per head, V per half head), causal ATTENTION with GQA, an output projection and F16 logits:
// 96 tokens of two sequences, a prefill-sized batch that a threaded backend spreads every op of. Its inputs are the
// runtime data a serving step varies.
struct Step {
    static constexpr int64_t d_model = 256, n_head = 8, n_kv_head = 2, head_dim = 32, kv_dim = n_kv_head * head_dim,
                             vocab = 40, n_tokens = 96;
    static constexpr int32_t block_size = 16, n_blocks = 10, max_blocks = 4, n_slots = n_blocks * block_size;

    struct Inputs {
        std::vector<int32_t> tokens, positions, seqs, slots, table;
    };

    int32_t tokens, positions, seqs, slots, table;  // INPUT nodes
    int32_t embedded;                               // GET_ROWS 'token_embd'
    int32_t attention, projected, logits;           // ATTENTION 'blk.0.attn' and the outputs

    std::vector<int32_t> outputs() const { return {attention, projected, logits}; }
    Bindings bindings(const Inputs& in) const {
        return {{tokens, in.tokens}, {positions, in.positions}, {seqs, in.seqs}, {slots, in.slots}, {table, in.table}};
    }

    // Sequence 0 at positions 0..59, sequence 1 at 5..40 (its 0..4 are in the cache already). Each round has
    // its own tokens and shifts the block table, so later rounds read K/V rows that earlier rounds stored.
    static Inputs inputs(unsigned round) {
        Inputs in;
        for (int32_t base : {3, 6, 9, 0, 1, 4, 7, 2}) in.table.push_back((base + static_cast<int32_t>(round)) % n_blocks);
        std::mt19937 rng(round);
        std::uniform_int_distribution<int32_t> token(0, vocab - 1);
        auto add_token = [&](int32_t seq, int32_t pos) {
            in.tokens.push_back(token(rng));
            in.seqs.push_back(seq);
            in.positions.push_back(pos);
            in.slots.push_back(in.table[static_cast<size_t>(seq * max_blocks + pos / block_size)] * block_size + pos % block_size);
        };
        for (int32_t pos = 0; pos < 60; ++pos) add_token(0, pos);
        for (int32_t pos = 5; pos < 41; ++pos) add_token(1, pos);
        return in;
    }

    static Step build(Instance& g, bool int8_kv = false) {
        Step s{};
        s.tokens = g.input(CELLM_INPUT_TOKENS, {n_tokens});
        s.positions = g.input(CELLM_INPUT_POSITIONS, {n_tokens});
        s.seqs = g.input(CELLM_INPUT_TOKEN_SEQ, {n_tokens});
        s.slots = g.input(CELLM_INPUT_SLOTS, {n_tokens});
        s.table = g.input(CELLM_INPUT_BLOCK_TABLE, {max_blocks, 2});
        auto project = [&](cellm_dtype type, int64_t rows, unsigned seed, int32_t from) {
            const int32_t w = g.weight(make_weights(type, d_model, rows, seed));
            return g.add(CELLM_OP_MATMUL, CELLM_TYPE_F32, {rows, n_tokens}, {w, from});
        };
        auto rope = [&](int32_t from, int64_t heads) {
            const int32_t shaped = g.add(CELLM_OP_RESHAPE, CELLM_TYPE_F32, {head_dim, heads, n_tokens}, {from});
            return g.add(CELLM_OP_ROPE, CELLM_TYPE_F32, {head_dim, heads, n_tokens}, {shaped, s.positions},
                         {static_cast<int32_t>(head_dim), CELLM_ROPE_HALVES}, {10000.0f, 1.0f});
        };
        const int32_t embed = g.weight(make_weights(CELLM_TYPE_Q6_K, d_model, vocab, 30));
        s.embedded = g.add(CELLM_OP_GET_ROWS, CELLM_TYPE_F32, {d_model, n_tokens}, {embed, s.tokens});
        g.nodes[static_cast<size_t>(s.embedded)].name = "token_embd";
        const int32_t q = rope(project(CELLM_TYPE_Q4_0, d_model, 31, s.embedded), n_head);
        const int32_t k = g.add(CELLM_OP_RESHAPE, CELLM_TYPE_F32, {kv_dim, n_tokens},
                                {rope(project(CELLM_TYPE_Q8_0, kv_dim, 32, s.embedded), n_kv_head)});
        const int32_t v = project(CELLM_TYPE_Q5_1, kv_dim, 33, s.embedded);

        const std::vector<float> k_pool = random_floats(static_cast<size_t>(kv_dim * n_slots), 34, 2.0f);
        const std::vector<float> v_values = random_floats(static_cast<size_t>(kv_dim * n_slots), 35);
        int32_t ks = -1, vs = -1, k_scales = -1, v_scales = -1;
        if (int8_kv) {
            const Int8Rows k8(k_pool, head_dim), v8(v_values, head_dim / 2);
            const int32_t kc = g.leaf(CELLM_OP_KV_CACHE, CELLM_TYPE_I8, kv_dim, n_slots, k8.codes.data());
            const int32_t vc = g.leaf(CELLM_OP_KV_CACHE, CELLM_TYPE_I8, kv_dim, n_slots, v8.codes.data());
            k_scales = g.leaf(CELLM_OP_KV_CACHE, CELLM_TYPE_F32, n_kv_head, n_slots, k8.scales.data());
            v_scales = g.leaf(CELLM_OP_KV_CACHE, CELLM_TYPE_F32, 2 * n_kv_head, n_slots, v8.scales.data());
            ks = g.add(CELLM_OP_KV_STORE, CELLM_TYPE_I8, {kv_dim, n_slots}, {kc, k, s.slots, k_scales});
            vs = g.add(CELLM_OP_KV_STORE, CELLM_TYPE_I8, {kv_dim, n_slots}, {vc, v, s.slots, v_scales});
        } else {
            std::vector<uint16_t> v_pool(v_values.size());
            std::transform(v_values.begin(), v_values.end(), v_pool.begin(), cellm::blocks::fp32_to_fp16);
            const int32_t kc = g.leaf(CELLM_OP_KV_CACHE, CELLM_TYPE_F32, kv_dim, n_slots, k_pool.data());
            const int32_t vc = g.leaf(CELLM_OP_KV_CACHE, CELLM_TYPE_F16, kv_dim, n_slots, v_pool.data());
            ks = g.add(CELLM_OP_KV_STORE, CELLM_TYPE_F32, {kv_dim, n_slots}, {kc, k, s.slots});
            vs = g.add(CELLM_OP_KV_STORE, CELLM_TYPE_F16, {kv_dim, n_slots}, {vc, v, s.slots});
        }
        s.attention = g.add(CELLM_OP_ATTENTION, CELLM_TYPE_F32, {d_model, n_tokens},
                            {q, ks, vs, s.table, s.seqs, s.positions, k_scales, v_scales},
                            {n_head, n_kv_head, head_dim, block_size, 0}, {1.0f / std::sqrt(float(head_dim)), 0.0f});
        g.nodes[static_cast<size_t>(s.attention)].name = "blk.0.attn";
        s.projected = project(CELLM_TYPE_Q4_1, d_model, 36, s.attention);
        s.logits = project(CELLM_TYPE_F16, vocab, 37, s.projected);
        return s;
    }
};

// ---- Device selection (backends that have devices) ----

// The Vulkan backend picks a device by index or by part of its name, and a bad choice, or a machine whose loader
// finds no driver at all, is one error line from create, never a crash.
TEST(VulkanDevices, SelectionAndMissingDevices) {
    const BackendPlugin* vulkan = find_backend("vulkan");
    if (vulkan == nullptr) GTEST_SKIP() << "the vulkan backend is not built";
    const cellm_backend_iface* be = vulkan->iface;
    auto create = [&](const char* device) {
        const cellm_option option{"device", device};
        cellm_backend* backend = nullptr;
        cellm_status* s = be->create(&option, 1, &backend);
        if (backend != nullptr) be->destroy(backend);
        return message(s);
    };
    std::vector<std::string> lines;
    be->describe([](void* user, const char* l) { static_cast<std::vector<std::string>*>(user)->push_back(l); }, &lines);
    ASSERT_FALSE(lines.empty());
    if (lines[0].rfind("device 0: ", 0) != 0) GTEST_SKIP() << "no Vulkan device here: " << lines[0];
    const std::string name = lines[0].substr(10, lines[0].find(" (") - 10);
    EXPECT_EQ(create("0"), "");
    EXPECT_EQ(create(name.substr(0, 4).c_str()), "") << name;
    EXPECT_EQ(create("99"), "vulkan: device 99 does not exist (" + std::to_string(lines.size()) + " found)");
    const std::string unknown = create("no-such-gpu");
    EXPECT_EQ(unknown.rfind("vulkan: no device named 'no-such-gpu' (found: ", 0), 0u) << unknown;

    // No driver: the loader is pointed at a manifest that does not exist.
    for (const char* variable : {"VK_ICD_FILENAMES", "VK_DRIVER_FILES"}) setenv(variable, "/nonexistent/icd.json", 1);
    const std::string none = create("");
    std::vector<std::string> none_lines;
    be->describe([](void* user, const char* l) { static_cast<std::vector<std::string>*>(user)->push_back(l); }, &none_lines);
    for (const char* variable : {"VK_ICD_FILENAMES", "VK_DRIVER_FILES"}) unsetenv(variable);
    EXPECT_TRUE(none == "vulkan: no Vulkan device found" || none.rfind("vulkan: no Vulkan 1.2 instance (", 0) == 0) << none;
    EXPECT_EQ(none.find('\n'), std::string::npos);
    ASSERT_EQ(none_lines.size(), 1u);
    EXPECT_EQ(none_lines[0].rfind("vulkan: no ", 0), 0u) << none_lines[0];
}

// ---- The tests, once per backend ----

// The backend under test, created with two threads so that a backend with a thread pool splits its work
// whatever the machine's core count.
class BackendOps : public ::testing::TestWithParam<BackendPlugin>, protected Instance {
protected:
    void SetUp() override { ASSERT_EQ(open(GetParam().iface, 2), ""); }

    // The scalar plugin, the yardstick other backends are compared with side by side.
    static const cellm_backend_iface* scalar_iface() {
        const BackendPlugin* scalar = find_backend("scalar");
        return scalar != nullptr ? scalar->iface : nullptr;
    }
    bool host_memory() const { return (info().flags & CELLM_BACKEND_HOST_MEMORY) != 0; }
    // Whether products of the integer-defined types (Q8 and Q8_K dots) equal scalar's bit for bit: on the CPU
    // backends, and on the vulkan backend's exact precision (docs/vulkan.md) on devices with shaderFloat64 such
    // as lavapipe, where its tests run.
    bool integer_products_exact() const { return host_memory() || GetParam().name == "vulkan"; }
    // Whether float ops the reference defines in double and in index order (LAYER_NORM) equal scalar's bit for bit:
    // on the CPU backends, and on vulkan's exact precision (which these tests open) on a device with shaderFloat64
    // such as lavapipe.
    bool follows_scalar_exactly() const { return host_memory() || GetParam().name == "vulkan"; }

    // Builds the products of `cases` on this backend and on `scalar` alike and runs both; their outputs follow
    // the cases' order in `results` and `scalar.results`.
    void run_beside_scalar(Instance& scalar, const std::vector<MatmulCase>& cases) {
        clear_graph();
        scalar.clear_graph();
        std::vector<int32_t> outputs;
        for (const MatmulCase& c : cases) {
            outputs.push_back(c.add_to(*this));
            c.add_to(scalar);
        }
        ASSERT_EQ(prepare(outputs), "");
        ASSERT_EQ(execute({}), "");
        ASSERT_EQ(scalar.prepare(outputs), "");
        ASSERT_EQ(scalar.execute({}), "");
    }

    // Whether this backend runs the vision encoder's ops (ABI 1.3); VisionOpsRunOrAreDeclinedByName checks the
    // ones that do not decline them cleanly.
    bool runs_vision_ops() const {
        for (cellm_op op : {CELLM_OP_LAYER_NORM, CELLM_OP_PATCHES, CELLM_OP_SELF_ATTENTION, CELLM_OP_SET_ROWS})
            if (be->supports_op(backend, op, CELLM_TYPE_F32) == 0) return false;
        return true;
    }

    // Prepares the graph `build` makes (returning its outputs) on this backend and on `scalar` alike, node for
    // node; "" or the first error.
    std::string prepare_beside_scalar(Instance& scalar, const std::function<std::vector<int32_t>(Instance&)>& build) {
        clear_graph();
        scalar.clear_graph();
        const std::vector<int32_t> outputs = build(*this);
        build(scalar);
        const std::string m = prepare(outputs);
        return m.empty() ? scalar.prepare(outputs) : m;
    }
    // Runs both with the same inputs: ours land in `results`, scalar's in `scalar.results`. "" or the first error.
    std::string execute_beside_scalar(Instance& scalar, const Bindings& in = {}, const FloatBindings& floats = {}) {
        const std::string m = execute(in, floats);
        return m.empty() ? scalar.execute(in, floats) : m;
    }
};

std::string test_name(const ::testing::TestParamInfo<BackendPlugin>& info) {
    std::string name = info.param.name;
    for (char& c : name)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    return name;
}

INSTANTIATE_TEST_SUITE_P(EveryBackend, BackendOps, ::testing::ValuesIn(plugin_folder().backends), test_name);

TEST_P(BackendOps, OptionsInfoAndCapabilities) {
    const KnownBackend* known = known_backend(GetParam().name);
    cellm_backend* other = nullptr;
    const cellm_option zero{"threads", "0"};
    EXPECT_NE(message(be->create(&zero, 1, &other)).find("threads"), std::string::npos);
    const cellm_option typo{"thread", "2"};
    EXPECT_NE(message(be->create(&typo, 1, &other)).find("'thread'"), std::string::npos);
    // Every backend takes the precision a manifest names (manifests move between backends), and only its values.
    const cellm_option precision{"precision", "fastest"};
    EXPECT_NE(message(be->create(&precision, 1, &other)).find("'precision' must be \"exact\" or \"fast\""),
              std::string::npos);
    for (const char* value : {"exact", "fast"}) {
        const cellm_option valid{"precision", value};
        ASSERT_EQ(message(be->create(&valid, 1, &other)), "") << value;
        be->destroy(other);
    }

    Instance plain;  // no options: the backend's default thread count
    ASSERT_EQ(plain.open(be), "");
    const cellm_backend_info info = plain.info();
    ASSERT_NE(info.device_name, nullptr);
    EXPECT_NE(std::string(info.device_name), "");
    std::vector<std::string> lines;
    if (be->describe != nullptr)
        be->describe([](void* user, const char* l) { static_cast<std::vector<std::string>*>(user)->push_back(l); }, &lines);
    for (const std::string& line : lines) EXPECT_NE(line, "");
    if (known != nullptr) {
        EXPECT_EQ(info.device_name, known->device_name);
        EXPECT_EQ(info.flags, known->flags);
        ASSERT_EQ(lines.size(), 1u);
        EXPECT_TRUE(std::regex_match(lines[0], std::regex(known->describe))) << lines[0];
    }
    if (known != nullptr && known->fixed_threads > 0) {
        EXPECT_EQ(info.threads, known->fixed_threads);
    } else if ((info.flags & CELLM_BACKEND_HOST_MEMORY) != 0) {
        EXPECT_GE(info.threads, 1);  // a CPU backend's own choice, e.g. its physical cores
    }

    EXPECT_TRUE(be->supports_type(backend, CELLM_TYPE_Q4_1));
    EXPECT_FALSE(be->supports_type(backend, CELLM_TYPE_Q2_K));
    EXPECT_TRUE(be->supports_op(backend, CELLM_OP_KV_STORE, CELLM_TYPE_F16));
    EXPECT_TRUE(be->supports_op(backend, CELLM_OP_ATTENTION, CELLM_TYPE_F32));
}

TEST_P(BackendOps, MatmulAndGetRowsForEveryWeightType) {
    const int64_t k = 256, m = 3, n = 2;
    const std::vector<float> x = random_floats(k * n, 1);
    for (cellm_dtype type : every_weight_type) {
        SCOPED_TRACE("type " + std::to_string(type));
        clear_graph();
        const Weights w = make_weights(type, k, m, 2);
        const int32_t wn = weight(w);
        const int32_t xn = f32_weight(x, k, n);
        const int32_t mm = add(CELLM_OP_MATMUL, CELLM_TYPE_F32, {m, n}, {wn, xn});
        const int32_t ids = input(CELLM_INPUT_TOKENS, {2});
        const int32_t rows = add(CELLM_OP_GET_ROWS, CELLM_TYPE_F32, {k, 2}, {wn, ids});
        ASSERT_EQ(prepare({mm, rows}), "");
        ASSERT_EQ(execute({{ids, {2, 0}}}), "");

        expect_near_all(results[0], matmul_reference(w, x, n), 1e-5f, "matmul");
        std::vector<float> picked(w.values.begin() + 2 * k, w.values.end());
        picked.insert(picked.end(), w.values.begin(), w.values.begin() + k);
        EXPECT_EQ(results[1], picked);

        EXPECT_NE(execute({{ids, {3, 0}}}).find("row id 3"), std::string::npos);
        EXPECT_NE(execute({{ids, {0, -1}}}).find("row id -1"), std::string::npos);
    }
}

// Column counts around where fast backends change method (one column, a few, eight, a remainder past 32) and
// m = 37 rows, so that row tiles end in remainders too. The block formats with a Q8 or Q8_K dot are integer sums
// that CPU backends (matmul.hpp of openblas) and vulkan's exact precision compute exactly as the scalar reference
// does, at any column count.
TEST_P(BackendOps, MatmulWithManyColumns) {
    const bool bit_equal = integer_products_exact();
    Instance scalar;
    ASSERT_NE(scalar_iface(), nullptr);
    ASSERT_EQ(scalar.open(scalar_iface()), "");
    unsigned seed = 100;
    for (int64_t k : {256, 512}) {
        std::vector<MatmulCase> cases;
        for (cellm_dtype type : every_weight_type)
            for (int64_t n : {1, 3, 8, 33}) cases.push_back({type, k, 37, n, seed += 2});
        ASSERT_NO_FATAL_FAILURE(run_beside_scalar(scalar, cases));
        for (size_t i = 0; i < cases.size(); ++i) {
            SCOPED_TRACE(cases[i].label());
            expect_near_all(results[i], matmul_reference(cases[i].weights(), cases[i].x(), cases[i].n), 1e-5f, "matmul");
            if (bit_equal && (cellm::blocks::has_q8_dot(cases[i].type) || cellm::blocks::has_q8k_dot(cases[i].type)))
                expect_identical(results[i], scalar.results[i], "vs scalar");
        }
    }
}

// A wide F32 batch (a vision encoder's patches): past 1024 columns openblas runs column blocks of the weight in
// place (matmul.hpp's wide_columns); 2100 columns make two whole blocks and a remainder.
TEST_P(BackendOps, WideFloatBatchFollowsTheDoubleMath) {
    Instance scalar;
    ASSERT_EQ(scalar.open(scalar_iface()), "");
    std::vector<MatmulCase> cases = {{CELLM_TYPE_F32, 96, 37, 2100, 901}};
    ASSERT_NO_FATAL_FAILURE(run_beside_scalar(scalar, cases));
    expect_near_all(results[0], matmul_reference(cases[0].weights(), cases[0].x(), cases[0].n), 1e-5f, "wide matmul");
}

// Longer rows of the integer-defined types, against scalar only (the reference's fp16 sums drift past the 1e-5
// bar over thousands of terms): 2304 and 4352 make rows of more than 8 K-quant blocks, and 4352 a column too
// long for a device backend to quantize inside its decode product.
TEST_P(BackendOps, LongRowsMatchScalarBitForBit) {
    if (!integer_products_exact()) GTEST_SKIP() << "this backend is held to the reference definitions only";
    Instance scalar;
    ASSERT_NE(scalar_iface(), nullptr);
    ASSERT_EQ(scalar.open(scalar_iface()), "");
    std::vector<MatmulCase> cases;
    unsigned seed = 700;
    for (int64_t k : {2304, 4352})
        for (cellm_dtype type : every_weight_type)
            if (cellm::blocks::has_q8_dot(type) || cellm::blocks::has_q8k_dot(type))
                for (int64_t n : {1, 3, 33}) cases.push_back({type, k, 37, n, seed += 2});
    ASSERT_NO_FATAL_FAILURE(run_beside_scalar(scalar, cases));
    for (size_t i = 0; i < cases.size(); ++i) {
        SCOPED_TRACE(cases[i].label());
        expect_identical(results[i], scalar.results[i], "vs scalar");
    }
}

// A product whose only reader is the ADD right after it (a residual connection), with the sum as the output: a
// device backend may fold the ADD into the product, and either way the sum must be the reference's. One column
// (decode) and many (prefill), Q8-dot, K-quant and float weights.
TEST_P(BackendOps, MatmulFollowedByResidualAdd) {
    unsigned seed = 300;
    for (cellm_dtype type : {CELLM_TYPE_Q4_1, CELLM_TYPE_Q6_K, CELLM_TYPE_F32})
        for (int64_t n : {1, 40}) {
            SCOPED_TRACE("type " + std::to_string(type) + ", n " + std::to_string(n));
            clear_graph();
            const MatmulCase c{type, 256, 70, n, seed += 3};
            const std::vector<float> r = random_floats(static_cast<size_t>(70 * n), seed + 100);
            const int32_t residual = f32_weight(r, 70, n);
            const int32_t product = c.add_to(*this);
            const int32_t sum = add(CELLM_OP_ADD, CELLM_TYPE_F32, {70, n}, {residual, product});
            ASSERT_EQ(prepare({sum}), "");
            ASSERT_EQ(execute({}), "");
            std::vector<float> want = matmul_reference(c.weights(), c.x(), n);
            for (size_t i = 0; i < want.size(); ++i) want[i] += r[i];
            expect_near_all(results[0], want, 1e-5f, "matmul + residual");
        }
}

// A decoder's FFN as the ops come in a step: RMS_NORM feeding two products (gate and up), their SwiGLU (GLU)
// feeding a third (down). A backend may quantize a product's input inside the op that makes it; then the results
// must be what the products get when they quantize it themselves, which the same graph with a SCALE by 1 before
// each product (an exact copy) makes them do, in each precision the backend has. One column (decode), 5 and 8
// (sessions: rows split unevenly and evenly over the threads) and 40 (prefill); Q8-dot, K-quant and float weights.
// Integer-exact backends also match scalar bit for bit in exact precision.
TEST_P(BackendOps, NormAndSwigluFeedingProductsMatchSeparateOps) {
    if (GetParam().name == "scalar") GTEST_SKIP() << "the reference runs each op apart";
    constexpr int64_t d = 256, ff = 512;
    const std::vector<float> norm_weight = random_floats(d, 901, 2.0f);
    for (cellm_dtype type : {CELLM_TYPE_Q4_1, CELLM_TYPE_Q8_0, CELLM_TYPE_Q4_K, CELLM_TYPE_Q6_K, CELLM_TYPE_F32})
        for (int64_t n : {1, 5, 8, 40}) {
            SCOPED_TRACE("type " + std::to_string(type) + ", n " + std::to_string(n));
            const Weights gate = make_weights(type, d, ff, 910), up = make_weights(type, d, ff, 911),
                          down = make_weights(type, ff, d, 912);
            const std::vector<float> x = random_floats(static_cast<size_t>(d * n), 913 + unsigned(n), 3.0f);
            const auto build = [&](Instance& g, bool copies) {
                auto input_of_products = [&](int32_t made, int64_t width) {
                    return copies ? g.add(CELLM_OP_SCALE, CELLM_TYPE_F32, {width, n}, {made}, {}, {1.0f}) : made;
                };
                const int32_t xn = g.f32_weight(x, d, n), wn = g.f32_weight(norm_weight, d, 1);
                const int32_t normed =
                    input_of_products(g.add(CELLM_OP_RMS_NORM, CELLM_TYPE_F32, {d, n}, {xn, wn}, {}, {1e-5f}), d);
                const int32_t g_w = g.weight(gate), u_w = g.weight(up);
                const int32_t gated = g.add(CELLM_OP_MATMUL, CELLM_TYPE_F32, {ff, n}, {g_w, normed});
                const int32_t upped = g.add(CELLM_OP_MATMUL, CELLM_TYPE_F32, {ff, n}, {u_w, normed});
                const int32_t swiglu =
                    input_of_products(g.add(CELLM_OP_GLU, CELLM_TYPE_F32, {ff, n}, {gated, upped}, {0}), ff);
                const int32_t d_w = g.weight(down);
                return std::vector<int32_t>{g.add(CELLM_OP_MATMUL, CELLM_TYPE_F32, {d, n}, {d_w, swiglu})};
            };
            std::vector<std::pair<std::string, std::vector<cellm_option>>> precisions = {{"default", {{"threads", "2"}}}};
            for (const char* p : {"exact", "fast"}) {
                // A device's fast precision may fuse these ops with its own roundings (VulkanFast bounds it).
                if (std::string_view(p) == "fast" && !host_memory()) continue;
                Instance probe;
                if (probe.open_with(be, {{"precision", p}}).empty())
                    precisions.push_back({p, {{"threads", "2"}, {"precision", p}}});
            }
            for (const auto& [name, options] : precisions) {
                SCOPED_TRACE("precision " + name);
                Instance fused, apart;
                ASSERT_EQ(fused.open_with(be, options), "");
                ASSERT_EQ(apart.open_with(be, options), "");
                const std::vector<int32_t> out = build(fused, false);
                ASSERT_EQ(fused.prepare(out), "");
                ASSERT_EQ(apart.prepare(build(apart, true)), "");
                ASSERT_EQ(fused.execute({}), "");
                ASSERT_EQ(apart.execute({}), "");
                expect_identical(fused.results[0], apart.results[0], "fused vs apart");
                if (name == "fast" || !integer_products_exact() || type == CELLM_TYPE_F32) continue;
                Instance scalar;
                ASSERT_EQ(scalar.open(scalar_iface()), "");
                ASSERT_EQ(build(scalar, false), out);
                ASSERT_EQ(scalar.prepare(out), "");
                ASSERT_EQ(scalar.execute({}), "");
                expect_identical(fused.results[0], scalar.results[0], "vs scalar");
            }
        }
}

TEST_P(BackendOps, ElementwiseOpsAndPlanReuse) {
    const int64_t n0 = 8, n1 = 3;
    const std::vector<float> a = random_floats(n0 * n1, 3, 2.0f), b = random_floats(n0, 4), c = random_floats(n1, 5);
    const int32_t an = f32_weight(a, n0, n1), bn = f32_weight(b, n0, 1), cn = f32_weight(c, 1, n1);
    const int32_t ids = input(CELLM_INPUT_TOKENS, {n1});
    const int32_t x = add(CELLM_OP_GET_ROWS, CELLM_TYPE_F32, {n0, n1}, {an, ids});  // a permuted by the input
    const int32_t add_row = add(CELLM_OP_ADD, CELLM_TYPE_F32, {n0, n1}, {x, bn});
    const int32_t mul_col = add(CELLM_OP_MUL, CELLM_TYPE_F32, {n0, n1}, {add_row, cn});
    const int32_t scaled = add(CELLM_OP_SCALE, CELLM_TYPE_F32, {n0, n1}, {mul_col}, {}, {0.5f});
    const int32_t norm = add(CELLM_OP_RMS_NORM, CELLM_TYPE_F32, {n0, n1}, {scaled, bn}, {}, {1e-5f});
    const int32_t silu = add(CELLM_OP_SILU, CELLM_TYPE_F32, {n0, n1}, {norm});
    const int32_t gelu = add(CELLM_OP_GELU, CELLM_TYPE_F32, {n0, n1}, {norm});
    const int32_t th = add(CELLM_OP_TANH, CELLM_TYPE_F32, {n0, n1}, {gelu});
    const int32_t swiglu = add(CELLM_OP_GLU, CELLM_TYPE_F32, {n0, n1}, {x, th}, {0});
    const int32_t geglu = add(CELLM_OP_GLU, CELLM_TYPE_F32, {n0, n1}, {silu, x}, {1});
    const int32_t flat = add(CELLM_OP_RESHAPE, CELLM_TYPE_F32, {n0 * n1}, {geglu});
    ASSERT_EQ(prepare({swiglu, flat, norm}), "");

    auto sl = [](float v) { return v / (1.0f + std::exp(-v)); };
    auto gl = [](float v) { return 0.5f * v * (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v))); };
    for (const std::vector<int32_t>& perm : {std::vector<int32_t>{0, 1, 2}, std::vector<int32_t>{2, 0, 1}}) {
        ASSERT_EQ(execute({{ids, perm}}), "");
        std::vector<float> want_norm(n0 * n1), want_swiglu(n0 * n1), want_geglu(n0 * n1);
        for (int64_t r = 0; r < n1; ++r) {
            std::vector<float> s(n0);
            double ss = 0;
            for (int64_t i = 0; i < n0; ++i) {
                s[i] = (a[perm[r] * n0 + i] + b[i]) * c[r] * 0.5f;
                ss += double(s[i]) * s[i];
            }
            const float inv = 1.0f / std::sqrt(float(ss / n0) + 1e-5f);
            for (int64_t i = 0; i < n0; ++i) {
                const float xv = a[perm[r] * n0 + i], nv = s[i] * inv * b[i];
                want_norm[r * n0 + i] = nv;
                want_swiglu[r * n0 + i] = sl(xv) * std::tanh(gl(nv));
                want_geglu[r * n0 + i] = gl(sl(nv)) * xv;
            }
        }
        expect_near_all(results[2], want_norm, 1e-5f, "rms_norm");
        expect_near_all(results[0], want_swiglu, 1e-5f, "swiglu");
        expect_near_all(results[1], want_geglu, 1e-5f, "geglu");
    }
}

TEST_P(BackendOps, RopeBothModes) {
    const int64_t hd = 8, nh = 2, nt = 3, n_rot = 6;
    const std::vector<float> q = random_floats(hd * nh * nt, 6), factors{1.0f, 2.0f, 4.0f};
    const int32_t qn = f32_weight(q, hd * nh, nt);
    const int32_t qr = add(CELLM_OP_RESHAPE, CELLM_TYPE_F32, {hd, nh, nt}, {qn});
    const int32_t pos = input(CELLM_INPUT_POSITIONS, {nt});
    const int32_t fn = f32_weight(factors, 3, 1);
    const int32_t adj = add(CELLM_OP_ROPE, CELLM_TYPE_F32, {hd, nh, nt}, {qr, pos}, {n_rot, CELLM_ROPE_ADJACENT},
                            {10000.0f, 0.5f});
    const int32_t hal = add(CELLM_OP_ROPE, CELLM_TYPE_F32, {hd, nh, nt}, {qr, pos, fn}, {n_rot, CELLM_ROPE_HALVES},
                            {500.0f, 1.0f});
    ASSERT_EQ(prepare({adj, hal}), "");
    const std::vector<int32_t> positions{0, 5, 17};
    ASSERT_EQ(execute({{pos, positions}}), "");
    for (int mode = 0; mode < 2; ++mode) {
        std::vector<float> want = q;
        for (int64_t t = 0; t < nt; ++t)
            for (int64_t h = 0; h < nh; ++h)
                for (int64_t i = 0; i < n_rot / 2; ++i) {
                    const double theta = mode == 0 ? positions[t] * 0.5 * std::pow(10000.0, -2.0 * double(i) / double(n_rot))
                                                   : positions[t] * std::pow(500.0, -2.0 * double(i) / double(n_rot)) / factors[i];
                    const int64_t base = (t * nh + h) * hd;
                    const int64_t ia = base + (mode == 0 ? 2 * i : i), ib = base + (mode == 0 ? 2 * i + 1 : i + n_rot / 2);
                    want[ia] = float(q[ia] * std::cos(theta) - q[ib] * std::sin(theta));
                    want[ib] = float(q[ia] * std::sin(theta) + q[ib] * std::cos(theta));
                }
        expect_near_all(results[mode], want, 1e-5f, mode == 0 ? "adjacent" : "halves");
    }
}

// Two sequences through shuffled page tables, GQA (4 query heads over 2 KV heads), a window and a soft-cap,
// with an F16 K pool and an F32 V pool filled partly by an earlier step and partly by this one.
TEST_P(BackendOps, PagedAttention) {
    const int32_t n_head = 4, n_kv = 2, hd = 4, bs = 2, window = 3, n_slots = 16, max_blocks = 3;
    const int32_t kv_dim = n_kv * hd;
    const float scale = 0.5f, cap = 2.0f;
    // Sequence 0: positions 0..4 (blocks 5, 1, 6); sequence 1: positions 0..2 (blocks 3, 0).
    const std::vector<int32_t> table{5, 1, 6, 3, 0, -1};
    auto slot_of = [&](int r, int j) { return table[r * max_blocks + j / bs] * bs + j % bs; };
    const std::vector<float> k_all = random_floats(size_t(n_slots) * kv_dim, 7, 2.0f), v_all = random_floats(size_t(n_slots) * kv_dim, 8);
    std::vector<uint16_t> k_half(k_all.size());
    for (size_t i = 0; i < k_all.size(); ++i) k_half[i] = cellm::blocks::fp32_to_fp16(k_all[i]);
    const int32_t kc = leaf(CELLM_OP_KV_CACHE, CELLM_TYPE_F16, kv_dim, n_slots, k_half.data());
    const int32_t vc = leaf(CELLM_OP_KV_CACHE, CELLM_TYPE_F32, kv_dim, n_slots, v_all.data());

    // This step: sequence 0 at position 4, sequence 1 at positions 1 and 2.
    const int nt = 3;
    const std::vector<int32_t> seq{0, 1, 1}, pos{4, 1, 2};
    std::vector<int32_t> slots(nt);
    for (int t = 0; t < nt; ++t) slots[t] = slot_of(seq[t], pos[t]);
    const std::vector<float> k_new = random_floats(size_t(nt) * kv_dim, 9), v_new = random_floats(size_t(nt) * kv_dim, 10);
    const std::vector<float> q = random_floats(size_t(nt) * n_head * hd, 11, 2.0f);
    const int32_t kn = f32_weight(k_new, kv_dim, nt), vn = f32_weight(v_new, kv_dim, nt), qn = f32_weight(q, hd * n_head, nt);
    const int32_t qr = add(CELLM_OP_RESHAPE, CELLM_TYPE_F32, {hd, n_head, nt}, {qn});
    const int32_t tb = input(CELLM_INPUT_BLOCK_TABLE, {max_blocks, 2});
    const int32_t sq = input(CELLM_INPUT_TOKEN_SEQ, {nt});
    const int32_t ps = input(CELLM_INPUT_POSITIONS, {nt});
    const int32_t sl = input(CELLM_INPUT_SLOTS, {nt});
    const int32_t ks = add(CELLM_OP_KV_STORE, CELLM_TYPE_F16, {kv_dim, n_slots}, {kc, kn, sl});
    const int32_t vs = add(CELLM_OP_KV_STORE, CELLM_TYPE_F32, {kv_dim, n_slots}, {vc, vn, sl});
    const int32_t at = add(CELLM_OP_ATTENTION, CELLM_TYPE_F32, {hd * n_head, nt}, {qr, ks, vs, tb, sq, ps},
                           {n_head, n_kv, hd, bs, window}, {scale, cap});
    ASSERT_EQ(prepare({at}), "");
    ASSERT_EQ(execute({{tb, table}, {sq, seq}, {ps, pos}, {sl, slots}}), "");

    std::vector<float> k_ref(k_all.size()), v_ref = v_all;
    for (size_t i = 0; i < k_all.size(); ++i) k_ref[i] = cellm::blocks::fp16_to_fp32(k_half[i]);
    for (int t = 0; t < nt; ++t)
        for (int d = 0; d < kv_dim; ++d) {
            k_ref[size_t(slots[t]) * kv_dim + d] = cellm::blocks::fp16_to_fp32(cellm::blocks::fp32_to_fp16(k_new[t * kv_dim + d]));
            v_ref[size_t(slots[t]) * kv_dim + d] = v_new[t * kv_dim + d];
        }
    std::vector<float> want(size_t(nt) * n_head * hd, 0.0f);
    for (int t = 0; t < nt; ++t)
        for (int h = 0; h < n_head; ++h) {
            const int kvh = h / (n_head / n_kv);
            std::vector<double> w;
            std::vector<int> js;
            for (int j = std::max(0, pos[t] - window + 1); j <= pos[t]; ++j) {
                double s = 0;
                // q meets an F16 key pool rounded to f16, as a MATMUL operand of an F16 weight would be.
                for (int d = 0; d < hd; ++d)
                    s += double(cellm::blocks::fp16_to_fp32(cellm::blocks::fp32_to_fp16(q[(t * n_head + h) * hd + d]))) *
                         k_ref[size_t(slot_of(seq[t], j)) * kv_dim + kvh * hd + d];
                s = cap * std::tanh(s * scale / cap);
                w.push_back(s);
                js.push_back(j);
            }
            double mx = *std::max_element(w.begin(), w.end()), sum = 0;
            for (double& x : w) sum += x = std::exp(x - mx);
            for (size_t i = 0; i < js.size(); ++i)
                for (int d = 0; d < hd; ++d)
                    want[(t * n_head + h) * hd + d] += float(w[i] / sum * v_ref[size_t(slot_of(seq[t], js[i])) * kv_dim + kvh * hd + d]);
        }
    expect_near_all(results[0], want, 1e-5f, "attention");

    // A needed block table entry of -1, and a slot beyond the pool, are reported.
    std::vector<int32_t> holes = table;
    holes[3] = -1;
    EXPECT_NE(execute({{tb, holes}, {sq, seq}, {ps, pos}, {sl, slots}}).find("block table entry -1"), std::string::npos);
    std::vector<int32_t> far = slots;
    far[1] = n_slots;
    EXPECT_NE(execute({{tb, table}, {sq, seq}, {ps, pos}, {sl, far}}).find("slot 16"), std::string::npos);
}

// I8 pools (graph.h): KV_STORE writes codes and scales exactly as the encoding says, a group of zeros included,
// and ATTENTION reads scale * code with q and the weights left as they are. K has a scale per head, V one per pair
// of values: a backend takes any group width that divides the row.
TEST_P(BackendOps, Int8PagedAttention) {
    const int32_t n_head = 4, n_kv = 2, hd = 8, bs = 2, n_slots = 8, max_blocks = 2;
    const int32_t kv_dim = n_kv * hd, k_width = hd, v_width = 2;
    const float scale = 0.5f;
    // One sequence in blocks 3 and 1: positions 0..1 are in the cache, this step stores 2..3.
    const std::vector<int32_t> table{3, 1}, seq{0, 0}, pos{2, 3};
    auto slot_of = [&](int j) { return table[size_t(j / bs)] * bs + j % bs; };
    const int nt = 2;
    std::vector<float> k_all = random_floats(size_t(n_slots) * kv_dim, 20, 2.0f), v_all = random_floats(size_t(n_slots) * kv_dim, 21);
    const Int8Rows k_old(k_all, k_width), v_old(v_all, v_width);
    const int32_t kc = leaf(CELLM_OP_KV_CACHE, CELLM_TYPE_I8, kv_dim, n_slots, k_old.codes.data());
    const int32_t vc = leaf(CELLM_OP_KV_CACHE, CELLM_TYPE_I8, kv_dim, n_slots, v_old.codes.data());
    const int32_t kscales = leaf(CELLM_OP_KV_CACHE, CELLM_TYPE_F32, kv_dim / k_width, n_slots, k_old.scales.data());
    const int32_t vscales = leaf(CELLM_OP_KV_CACHE, CELLM_TYPE_F32, kv_dim / v_width, n_slots, v_old.scales.data());

    std::vector<float> k_new = random_floats(size_t(nt) * kv_dim, 22, 3.0f), v_new = random_floats(size_t(nt) * kv_dim, 23);
    std::fill(k_new.begin(), k_new.begin() + hd, 0.0f);  // token 0's first K head is all zeros
    const std::vector<float> q = random_floats(size_t(nt) * n_head * hd, 24, 2.0f);
    const int32_t kn = f32_weight(k_new, kv_dim, nt), vn = f32_weight(v_new, kv_dim, nt), qn = f32_weight(q, hd * n_head, nt);
    const int32_t qr = add(CELLM_OP_RESHAPE, CELLM_TYPE_F32, {hd, n_head, nt}, {qn});
    const int32_t tb = input(CELLM_INPUT_BLOCK_TABLE, {max_blocks, 1});
    const int32_t sq = input(CELLM_INPUT_TOKEN_SEQ, {nt});
    const int32_t ps = input(CELLM_INPUT_POSITIONS, {nt});
    const int32_t sl = input(CELLM_INPUT_SLOTS, {nt});
    const int32_t ks = add(CELLM_OP_KV_STORE, CELLM_TYPE_I8, {kv_dim, n_slots}, {kc, kn, sl, kscales});
    const int32_t vs = add(CELLM_OP_KV_STORE, CELLM_TYPE_I8, {kv_dim, n_slots}, {vc, vn, sl, vscales});
    const int32_t at = add(CELLM_OP_ATTENTION, CELLM_TYPE_F32, {hd * n_head, nt}, {qr, ks, vs, tb, sq, ps, kscales, vscales},
                           {n_head, n_kv, hd, bs, 0}, {scale, 0.0f});
    ASSERT_EQ(prepare({at}), "");
    const std::vector<int32_t> slots{slot_of(pos[0]), slot_of(pos[1])};
    ASSERT_EQ(execute({{tb, table}, {sq, seq}, {ps, pos}, {sl, slots}}), "");

    for (int t = 0; t < nt; ++t)
        for (int d = 0; d < kv_dim; ++d) {
            k_all[size_t(slots[t] * kv_dim + d)] = k_new[size_t(t * kv_dim + d)];
            v_all[size_t(slots[t] * kv_dim + d)] = v_new[size_t(t * kv_dim + d)];
        }
    const Int8Rows k_want(k_all, k_width), v_want(v_all, v_width);
    EXPECT_EQ(k_want.scales[size_t(slots[0] * kv_dim / k_width)], 0.0f);
    auto stored = [&](int32_t node, auto& into) {
        const cellm_tensor_desc& t = nodes[size_t(node)].tensor;
        EXPECT_EQ(message(be->buffer_read(backend, t.buffer, t.offset, into.data(), into.size() * sizeof(into[0]))), "");
    };
    for (auto [pool, scales, want] : {std::tuple{kc, kscales, &k_want}, std::tuple{vc, vscales, &v_want}}) {
        std::vector<int8_t> codes(want->codes.size());
        std::vector<float> got_scales(want->scales.size());
        stored(pool, codes);
        stored(scales, got_scales);
        EXPECT_EQ(codes, want->codes);
        expect_identical(got_scales, want->scales, "scales");
    }

    const std::vector<float> want = attention_reference(
        q, pos, n_head, n_kv, hd, scale, slot_of, [&](size_t i) { return k_want.value(i, k_width); },
        [&](size_t i) { return v_want.value(i, v_width); });
    expect_near_all(results[0], want, 1e-5f, "attention");
}

// Malformed I8 graphs come back as a status that names the node, never a crash: a store without its scale pool,
// scales whose groups do not divide the row, scales that are not a KV_CACHE leaf, scales given to an F32 pool, and
// attention over an I8 pool without them.
TEST_P(BackendOps, Int8GraphErrorsNameTheNode) {
    const int32_t kv_dim = 16, n_slots = 4, hd = 8;
    const int32_t pool = leaf(CELLM_OP_KV_CACHE, CELLM_TYPE_I8, kv_dim, n_slots, nullptr);
    const int32_t f32_pool = leaf(CELLM_OP_KV_CACHE, CELLM_TYPE_F32, kv_dim, n_slots, nullptr);
    const int32_t scales = leaf(CELLM_OP_KV_CACHE, CELLM_TYPE_F32, 2, n_slots, nullptr);
    const int32_t uneven = leaf(CELLM_OP_KV_CACHE, CELLM_TYPE_F32, 3, n_slots, nullptr);
    const int32_t rows = f32_weight(random_floats(kv_dim, 1), kv_dim, 1);
    const int32_t slots = input(CELLM_INPUT_SLOTS, {1});
    auto store = [&](int32_t p, int32_t s) {
        const int32_t st = add(CELLM_OP_KV_STORE, nodes[size_t(p)].type, {kv_dim, n_slots}, {p, rows, slots, s});
        const std::string m = prepare({st});
        nodes.pop_back();
        return m;
    };
    const std::string node = "node " + std::to_string(nodes.size()) + " (KV_STORE)";
    for (const auto& [p, s, problem] : {std::tuple{pool, -1, "needs its scale pool as src[3]"},
                                        std::tuple{pool, uneven, "n_groups must divide 16"},
                                        std::tuple{pool, rows, "must be a KV_CACHE leaf"},
                                        std::tuple{f32_pool, scales, "only for an I8, R4 or R3 pool"}}) {
        const std::string m = store(p, s);
        EXPECT_NE(m.find(node), std::string::npos) << m;
        EXPECT_NE(m.find(problem), std::string::npos) << m;
    }
    EXPECT_EQ(store(pool, scales), "");

    const int32_t q = add(CELLM_OP_RESHAPE, CELLM_TYPE_F32, {hd, 2, 1}, {f32_weight(random_floats(2 * hd, 2), 2 * hd, 1)});
    const int32_t ks = add(CELLM_OP_KV_STORE, CELLM_TYPE_I8, {kv_dim, n_slots}, {pool, rows, slots, scales});
    const int32_t tb = input(CELLM_INPUT_BLOCK_TABLE, {2, 1});
    const int32_t sq = input(CELLM_INPUT_TOKEN_SEQ, {1});
    const int32_t ps = input(CELLM_INPUT_POSITIONS, {1});
    const int32_t at = add(CELLM_OP_ATTENTION, CELLM_TYPE_F32, {2 * hd, 1}, {q, ks, ks, tb, sq, ps, -1, scales},
                           {2, 2, hd, 2, 0}, {1.0f, 0.0f});
    const std::string m = prepare({at});
    EXPECT_NE(m.find("node " + std::to_string(at) + " (ATTENTION)"), std::string::npos) << m;
    EXPECT_NE(m.find("needs its scale pool as src[6]"), std::string::npos) << m;
    nodes[size_t(at)].src[6] = scales;
    EXPECT_EQ(prepare({at}), "");
}

// ---- The coded KV encodings and HADAMARD (graph.h, "Coded pools") ----

// graph.h's coding of rows written out again: per group of `width` values, squared-magnitude classes against the
// thresholds, then the least-squares scale rounded to f16; codes packed as tensor.h says.
struct CodedRows {
    cellm_dtype type;
    std::vector<uint8_t> codes;
    std::vector<uint16_t> scales;
    std::vector<float> levels;

    CodedRows(cellm_dtype t, const std::vector<float>& x, int64_t width) : type(t) {
        const std::vector<float> l4 = CELLM_KV_LEVELS_R4, t4 = CELLM_KV_THRESHOLDS_R4;
        const std::vector<float> l3 = CELLM_KV_LEVELS_R3, t3 = CELLM_KV_THRESHOLDS_R3;
        levels = t == CELLM_TYPE_R4 ? l4 : l3;
        const std::vector<float>& thresholds = t == CELLM_TYPE_R4 ? t4 : t3;
        const int bits = t == CELLM_TYPE_R4 ? 4 : 3, half = static_cast<int>(levels.size()) / 2;
        codes.assign(x.size() * size_t(bits) / 8, 0);
        for (size_t g = 0; g < x.size() / size_t(width); ++g) {
            const float* y = x.data() + g * size_t(width);
            float ss = 0;
            for (int64_t i = 0; i < width; ++i) ss = std::fma(y[i], y[i], ss);
            float p = 0, q = 0;
            for (int64_t i = 0; i < width; ++i) {
                int k = 0;
                for (float th : thresholds) k += (y[i] * y[i]) * float(width) > (th * th) * ss ? 1 : 0;
                const int code = y[i] < 0 ? half - 1 - k : half + k;
                const size_t bit = (g * size_t(width) + size_t(i)) * size_t(bits);
                for (int b = 0; b < bits; ++b)
                    if ((code >> b) & 1) codes[(bit + size_t(b)) / 8] |= uint8_t(1u << ((bit + size_t(b)) % 8));
                p = std::fma(y[i], levels[size_t(code)], p);
                q = std::fma(levels[size_t(code)], levels[size_t(code)], q);
            }
            scales.push_back(cellm::blocks::fp32_to_fp16(p / q));
        }
    }
    int code(size_t i) const {
        const int bits = type == CELLM_TYPE_R4 ? 4 : 3;
        int c = 0;
        for (int b = 0; b < bits; ++b) {
            const size_t bit = i * size_t(bits) + size_t(b);
            c |= ((codes[bit / 8] >> (bit % 8)) & 1) << b;
        }
        return c;
    }
    float value(size_t i, int64_t width) const {
        return cellm::blocks::fp16_to_fp32(scales[i / size_t(width)]) * levels[size_t(code(i))];
    }
};

bool takes_coded_pools(const cellm_backend_iface* be, cellm_backend* backend) {
    return be->supports_op(backend, CELLM_OP_KV_STORE, CELLM_TYPE_R4) != 0;
}

// A store into R4 and R3 pools writes graph.h's codes and scales, bit for bit (the first token's first head all
// zeros: scale 0), the decoded rows stay within the quantizer's error, and attention over them is the float math
// of the decoded values.
TEST_P(BackendOps, CodedPoolsStoreTheirCodesAndAttend) {
    if (!takes_coded_pools(be, backend)) GTEST_SKIP() << GetParam().name << " declines coded KV pools";
    for (cellm_dtype type : {CELLM_TYPE_R4, CELLM_TYPE_R3}) {
        SCOPED_TRACE(type == CELLM_TYPE_R4 ? "r4" : "r3");
        clear_graph();
        // Heads of 32: the vulkan backend's R3 groups fill whole 32-bit words (3 of them).
        const int32_t n_head = 4, n_kv = 2, hd = 32, bs = 2, n_slots = 8, max_blocks = 2;
        const int32_t kv_dim = n_kv * hd;
        const float scale = 0.5f;
        const std::vector<int32_t> table{3, 1}, seq{0, 0}, pos{2, 3};
        auto slot_of = [&](int j) { return table[size_t(j / bs)] * bs + j % bs; };
        const int nt = 2;
        std::vector<float> k_all = random_floats(size_t(n_slots) * kv_dim, 30, 2.0f), v_all = random_floats(size_t(n_slots) * kv_dim, 31);
        const CodedRows k_old(type, k_all, hd), v_old(type, v_all, hd);
        const int32_t kc = leaf(CELLM_OP_KV_CACHE, type, kv_dim, n_slots, k_old.codes.data());
        const int32_t vc = leaf(CELLM_OP_KV_CACHE, type, kv_dim, n_slots, v_old.codes.data());
        const int32_t kscales = leaf(CELLM_OP_KV_CACHE, CELLM_TYPE_F16, n_kv, n_slots, k_old.scales.data());
        const int32_t vscales = leaf(CELLM_OP_KV_CACHE, CELLM_TYPE_F16, n_kv, n_slots, v_old.scales.data());
        std::vector<float> k_new = random_floats(size_t(nt) * kv_dim, 32, 3.0f), v_new = random_floats(size_t(nt) * kv_dim, 33);
        std::fill(k_new.begin(), k_new.begin() + hd, 0.0f);
        const std::vector<float> q = random_floats(size_t(nt) * n_head * hd, 34, 2.0f);
        const int32_t kn = f32_weight(k_new, kv_dim, nt), vn = f32_weight(v_new, kv_dim, nt), qn = f32_weight(q, hd * n_head, nt);
        const int32_t qr = add(CELLM_OP_RESHAPE, CELLM_TYPE_F32, {hd, n_head, nt}, {qn});
        const int32_t tb = input(CELLM_INPUT_BLOCK_TABLE, {max_blocks, 1});
        const int32_t sq = input(CELLM_INPUT_TOKEN_SEQ, {nt});
        const int32_t ps = input(CELLM_INPUT_POSITIONS, {nt});
        const int32_t sl = input(CELLM_INPUT_SLOTS, {nt});
        const int32_t ks = add(CELLM_OP_KV_STORE, type, {kv_dim, n_slots}, {kc, kn, sl, kscales});
        const int32_t vs = add(CELLM_OP_KV_STORE, type, {kv_dim, n_slots}, {vc, vn, sl, vscales});
        const int32_t at = add(CELLM_OP_ATTENTION, CELLM_TYPE_F32, {hd * n_head, nt}, {qr, ks, vs, tb, sq, ps, kscales, vscales},
                               {n_head, n_kv, hd, bs, 0}, {scale, 0.0f});
        ASSERT_EQ(prepare({at}), "");
        const std::vector<int32_t> slots{slot_of(pos[0]), slot_of(pos[1])};
        ASSERT_EQ(execute({{tb, table}, {sq, seq}, {ps, pos}, {sl, slots}}), "");

        for (int t = 0; t < nt; ++t)
            for (int d = 0; d < kv_dim; ++d) {
                k_all[size_t(slots[t] * kv_dim + d)] = k_new[size_t(t * kv_dim + d)];
                v_all[size_t(slots[t] * kv_dim + d)] = v_new[size_t(t * kv_dim + d)];
            }
        const CodedRows k_want(type, k_all, hd), v_want(type, v_all, hd);
        EXPECT_EQ(k_want.scales[size_t(slots[0] * n_kv)], 0u);
        auto stored = [&](int32_t node, auto& into) {
            const cellm_tensor_desc& t = nodes[size_t(node)].tensor;
            EXPECT_EQ(message(be->buffer_read(backend, t.buffer, t.offset, into.data(), into.size() * sizeof(into[0]))), "");
        };
        for (auto [pool, scales, want] : {std::tuple{kc, kscales, &k_want}, std::tuple{vc, vscales, &v_want}}) {
            std::vector<uint8_t> codes(want->codes.size());
            std::vector<uint16_t> got_scales(want->scales.size());
            stored(pool, codes);
            stored(scales, got_scales);
            EXPECT_EQ(codes, want->codes);
            EXPECT_EQ(got_scales, want->scales);
        }
        // The round trip: relative squared error of Gaussian-like rows near the quantizer's (0.0095, 0.035).
        double err = 0, energy = 0;
        for (size_t i = 0; i < v_all.size(); ++i) {
            err += std::pow(double(v_want.value(i, hd)) - v_all[i], 2);
            energy += double(v_all[i]) * v_all[i];
        }
        EXPECT_LT(err / energy, type == CELLM_TYPE_R4 ? 0.03 : 0.08);

        const std::vector<float> want = attention_reference(
            q, pos, n_head, n_kv, hd, scale, slot_of, [&](size_t i) { return k_want.value(i, hd); },
            [&](size_t i) { return v_want.value(i, hd); });
        expect_near_all(results[0], want, 1e-5f, "attention");
    }
}

// HADAMARD is graph.h's butterflies in float, bit for bit, in both directions; the inverse undoes the forward
// rotation to rounding, and the rotation keeps a run's length. Bad run lengths and signs name the node.
TEST_P(BackendOps, HadamardRotatesRunsAsTheButterfliesDo) {
    if (be->supports_op(backend, CELLM_OP_HADAMARD, CELLM_TYPE_F32) == 0) GTEST_SKIP() << GetParam().name << " declines HADAMARD";
    const int64_t d = 64, runs = 5;
    const std::vector<float> x = random_floats(size_t(d * runs), 40, 3.0f);
    std::vector<float> signs(static_cast<size_t>(d));
    for (size_t i = 0; i < signs.size(); ++i) signs[i] = (i * 7 + 3) % 5 < 2 ? -1.0f : 1.0f;
    const float c = float(1.0 / std::sqrt(double(d)));
    auto butterflies = [&](std::vector<float> v, bool inverse) {
        for (int64_t r = 0; r < runs; ++r) {
            float* y = v.data() + r * d;
            if (!inverse) for (int64_t i = 0; i < d; ++i) y[i] *= signs[size_t(i)];
            for (int64_t h = 1; h < d; h *= 2)
                for (int64_t j = 0; j < d; ++j)
                    if (j % (2 * h) < h) {
                        const float a = y[j], b = y[j + h];
                        y[j] = a + b;
                        y[j + h] = a - b;
                    }
            for (int64_t i = 0; i < d; ++i) y[i] *= c;
            if (inverse) for (int64_t i = 0; i < d; ++i) y[i] *= signs[size_t(i)];
        }
        return v;
    };
    const int32_t xn = f32_weight(x, d, runs), sn = f32_weight(signs, d, 1);
    const int32_t fwd = add(CELLM_OP_HADAMARD, CELLM_TYPE_F32, {d, runs}, {xn, sn}, {int32_t(d), 0}, {c});
    const int32_t back = add(CELLM_OP_HADAMARD, CELLM_TYPE_F32, {d, runs}, {fwd, sn}, {int32_t(d), 1}, {c});
    ASSERT_EQ(prepare({fwd, back}), "");
    ASSERT_EQ(execute({}), "");
    expect_identical(results[0], butterflies(x, false), "forward");
    expect_identical(results[1], butterflies(results[0], true), "inverse");
    expect_near_all(results[1], x, 1e-5f, "inverse of forward");
    for (int64_t r = 0; r < runs; ++r) {
        double in = 0, out = 0;
        for (int64_t i = 0; i < d; ++i) {
            in += double(x[size_t(r * d + i)]) * x[size_t(r * d + i)];
            out += double(results[0][size_t(r * d + i)]) * results[0][size_t(r * d + i)];
        }
        EXPECT_NEAR(out, in, 1e-4 * in);
    }

    for (const auto& [run, problem] : {std::pair{int32_t{48}, "not a power of two"}, std::pair{int32_t{128}, "is not made of runs"},
                                       std::pair{int32_t{32}, "signs shape"}}) {
        clear_graph();
        const int32_t xi = f32_weight(x, d, runs), si = f32_weight(signs, d, 1);
        const int32_t bad = add(CELLM_OP_HADAMARD, CELLM_TYPE_F32, {d, runs}, {xi, si}, {run, 0}, {c});
        const std::string m = prepare({bad});
        EXPECT_NE(m.find("node " + std::to_string(bad) + " (HADAMARD)"), std::string::npos) << m;
        EXPECT_NE(m.find(problem), std::string::npos) << m;
    }
}

// Instances asked for one and for two threads: each reports what its backend does with the request, and both
// compute the same bits. Output must not depend on the machine's core count (the default thread count), so how
// a backend splits the work among threads must not change any sum.
TEST_P(BackendOps, ThreadsOptionKeepsResults) {
    Instance one, two;
    ASSERT_EQ(one.open(be, 1), "");
    ASSERT_EQ(two.open(be, 2), "");
    const uint32_t flags = info().flags;
    EXPECT_EQ(one.info().threads, expected_threads(GetParam().name, flags, 1));
    EXPECT_EQ(two.info().threads, expected_threads(GetParam().name, flags, 2));

    // The step, and MATMUL of every weight type with 300 rows: enough that a pool of two cuts them into other
    // row ranges than a pool of one.
    std::vector<int32_t> outputs;
    Step step{};
    for (Instance* g : {&one, &two}) {
        step = Step::build(*g);
        outputs = step.outputs();
        unsigned seed = 200;
        for (cellm_dtype type : every_weight_type)
            for (int64_t n : {3, 33}) outputs.push_back(MatmulCase{type, 256, 300, n, seed += 2}.add_to(*g));
        ASSERT_EQ(g->prepare(outputs), "");
    }
    for (unsigned round = 0; round < 2; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        ASSERT_EQ(one.execute(step.bindings(Step::inputs(round))), "");
        ASSERT_EQ(two.execute(step.bindings(Step::inputs(round))), "");
        for (size_t i = 0; i < outputs.size(); ++i)
            expect_identical(two.results[i], one.results[i], "output " + std::to_string(i));
    }
}

// Bad runtime data in a 96-token step: one token id out of range at two places (GET_ROWS, which a threaded
// backend may split by rows) and a block table entry read by nine tokens (ATTENTION, split by token and head).
// However the work is spread, each comes back as one status that names the node and the bad value once, and the
// instance keeps working.
TEST_P(BackendOps, ErrorsInParallelWorkAreOneStatus) {
    const Step step = Step::build(*this);
    ASSERT_EQ(prepare(step.outputs()), "");
    const Step::Inputs good = Step::inputs(0);
    ASSERT_EQ(execute(step.bindings(good)), "");
    const std::vector<std::vector<float>> before = results;

    auto expect_one_error = [&](const Step::Inputs& in, const std::string& node, const std::string& problem) {
        const std::string m = execute(step.bindings(in));
        EXPECT_NE(m.find(node), std::string::npos) << m;
        EXPECT_NE(m.find(problem), std::string::npos) << m;
        EXPECT_EQ(m.find(problem), m.rfind(problem)) << m;
    };
    Step::Inputs bad_tokens = good;
    bad_tokens.tokens[10] = bad_tokens.tokens[90] = Step::vocab;
    expect_one_error(bad_tokens, "node " + std::to_string(step.embedded) + " (GET_ROWS 'token_embd')",
                     "row id " + std::to_string(Step::vocab));
    // Block 2 of sequence 1 (positions 32..40) names a block past the pool. The slots stay those of the good
    // step, so the failed step stores the same K/V rows as the good one.
    Step::Inputs bad_table = good;
    bad_table.table[1 * Step::max_blocks + 2] = Step::n_blocks;
    expect_one_error(bad_table, "node " + std::to_string(step.attention) + " (ATTENTION 'blk.0.attn')",
                     "block table entry " + std::to_string(Step::n_blocks));

    ASSERT_EQ(execute(step.bindings(good)), "");
    for (size_t i = 0; i < before.size(); ++i) expect_identical(results[i], before[i], "output " + std::to_string(i));
}

// One plan executed round after round with new inputs, against an instance that runs the same rounds (so its
// KV pools hold the same rows) with a new plan each time.
TEST_P(BackendOps, PlanReuseMatchesFreshPlans) {
    Instance fresh;
    ASSERT_EQ(fresh.open(be, 2), "");
    const Step step = Step::build(*this);
    Step::build(fresh);
    ASSERT_EQ(prepare(step.outputs()), "");
    for (unsigned round = 0; round < 6; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        const Step::Inputs in = Step::inputs(round);
        ASSERT_EQ(execute(step.bindings(in)), "");
        ASSERT_EQ(fresh.prepare(step.outputs()), "");
        ASSERT_EQ(fresh.execute(step.bindings(in)), "");
        for (size_t i = 0; i < results.size(); ++i) expect_identical(results[i], fresh.results[i], "output " + std::to_string(i));
    }
}

// The step on a CPU backend and on the scalar reference side by side. CPU backends compute the block-format
// projections and attention in the reference's own order (integer Q8 dots, 8-lane float dots), so they must
// match it bit for bit, which tests/e2e/parity_test.cpp relies on. The F16 logits are left out: the reference
// sums float weights in double, a fast backend in float (MatmulWithManyColumns bounds that).
TEST_P(BackendOps, StepOnCpuMatchesScalarBitForBit) {
    if (!host_memory()) GTEST_SKIP() << "a device backend is held to the reference definitions only";
    for (bool int8_kv : {false, true}) {
        SCOPED_TRACE(int8_kv ? "I8 pools" : "F32 and F16 pools");
        Instance ours, scalar;
        ASSERT_EQ(ours.open(be, 2), "");
        ASSERT_NE(scalar_iface(), nullptr);
        ASSERT_EQ(scalar.open(scalar_iface()), "");
        const Step step = Step::build(ours, int8_kv);
        Step::build(scalar, int8_kv);
        ASSERT_EQ(ours.prepare(step.outputs()), "");
        ASSERT_EQ(scalar.prepare(step.outputs()), "");
        for (unsigned round = 0; round < 3; ++round) {
            SCOPED_TRACE("round " + std::to_string(round));
            ASSERT_EQ(ours.execute(step.bindings(Step::inputs(round))), "");
            ASSERT_EQ(scalar.execute(step.bindings(Step::inputs(round))), "");
            expect_identical(ours.results[0], scalar.results[0], "attention");
            expect_identical(ours.results[1], scalar.results[1], "projection");
        }
    }
}

// ATTENTION over F16 pools (the default KV cache) on a CPU backend against scalar, bit for bit, in decode-shaped
// steps: 1, 3 and 8 tokens, each its own sequence, in SmolLM2's heads (9 over 3 KV heads, 64 wide), Gemma 3's
// (4 over 1, 256 wide) and 5 over 1, 40 wide (two chunks in openblas's loops), on two threads. One token of one
// KV head is fewer tasks than threads, so openblas splits its query heads.
TEST_P(BackendOps, F16PoolAttentionOnCpuMatchesScalarBitForBit) {
    if (!host_memory()) GTEST_SKIP() << "a device backend is held to the reference definitions only";
    struct Case {
        int32_t group, head_dim, n_kv;
    };
    for (const Case c : {Case{3, 64, 3}, Case{4, 256, 1}, Case{5, 40, 1}})
        for (const int32_t nt : {1, 3, 8}) {
            SCOPED_TRACE("group " + std::to_string(c.group) + ", head_dim " + std::to_string(c.head_dim) + ", KV heads " +
                         std::to_string(c.n_kv) + ", tokens " + std::to_string(nt));
            const int32_t n_kv = c.n_kv, n_head = c.group * n_kv, hd = c.head_dim, kv_dim = n_kv * hd, bs = 16;
            const int32_t max_blocks = 4, n_slots = nt * max_blocks * bs;
            // Sequence t holds its blocks in reverse order and is at position 17 + 6t.
            std::vector<int32_t> table, seq, pos;
            for (int32_t t = 0; t < nt; ++t) {
                for (int32_t b = 0; b < max_blocks; ++b) table.push_back(t * max_blocks + max_blocks - 1 - b);
                seq.push_back(t);
                pos.push_back(17 + 6 * t);
            }
            auto halves = [](const std::vector<float>& v) {
                std::vector<uint16_t> h(v.size());
                std::transform(v.begin(), v.end(), h.begin(), cellm::blocks::fp32_to_fp16);
                return h;
            };
            const std::vector<uint16_t> k_pool = halves(random_floats(size_t(kv_dim) * n_slots, 40, 2.0f));
            const std::vector<uint16_t> v_pool = halves(random_floats(size_t(kv_dim) * n_slots, 41));
            const std::vector<float> q = random_floats(size_t(nt) * n_head * hd, 42, 2.0f);
            Instance ours, scalar;
            ASSERT_EQ(ours.open(be, 2), "");
            ASSERT_NE(scalar_iface(), nullptr);
            ASSERT_EQ(scalar.open(scalar_iface()), "");
            for (Instance* g : {&ours, &scalar}) {
                const int32_t qn = g->f32_weight(q, hd * n_head, nt);
                const int32_t qr = g->add(CELLM_OP_RESHAPE, CELLM_TYPE_F32, {hd, n_head, nt}, {qn});
                const int32_t kc = g->leaf(CELLM_OP_KV_CACHE, CELLM_TYPE_F16, kv_dim, n_slots, k_pool.data());
                const int32_t vc = g->leaf(CELLM_OP_KV_CACHE, CELLM_TYPE_F16, kv_dim, n_slots, v_pool.data());
                const int32_t tb = g->input(CELLM_INPUT_BLOCK_TABLE, {max_blocks, nt});
                const int32_t sq = g->input(CELLM_INPUT_TOKEN_SEQ, {nt});
                const int32_t ps = g->input(CELLM_INPUT_POSITIONS, {nt});
                const int32_t at = g->add(CELLM_OP_ATTENTION, CELLM_TYPE_F32, {hd * n_head, nt}, {qr, kc, vc, tb, sq, ps},
                                          {n_head, n_kv, hd, bs, 0}, {1.0f / std::sqrt(float(hd)), 0.0f});
                ASSERT_EQ(g->prepare({at}), "");
                ASSERT_EQ(g->execute({{tb, table}, {sq, seq}, {ps, pos}}), "");
            }
            expect_identical(ours.results[0], scalar.results[0], "attention");
        }
}

TEST_P(BackendOps, GraphErrorsNameTheNode) {
    const std::vector<float> w = random_floats(64, 12);
    const int32_t wn = f32_weight(w, 32, 2);
    const int32_t ids = input(CELLM_INPUT_TOKENS, {1});
    const int32_t g = add(CELLM_OP_GET_ROWS, CELLM_TYPE_F32, {32, 1}, {wn, ids});
    nodes[static_cast<size_t>(g)].name = "embed";
    nodes[static_cast<size_t>(g)].src[1] = 5;
    std::string m = prepare({g});
    EXPECT_NE(m.find("node 2 (GET_ROWS 'embed')"), std::string::npos) << m;
    EXPECT_NE(m.find("src[1]"), std::string::npos) << m;

    nodes[static_cast<size_t>(g)].src[1] = ids;
    nodes[static_cast<size_t>(wn)].op = CELLM_OP_COUNT;
    EXPECT_NE(prepare({g}).find("node 0"), std::string::npos);
    nodes[static_cast<size_t>(wn)].op = CELLM_OP_WEIGHT;

    ASSERT_EQ(prepare({g}), "");
    std::vector<int32_t> two{0, 1};
    cellm_input_binding bind{ids, two.data(), 8};
    float out[32];
    cellm_output_binding ob{g, out, sizeof out};
    EXPECT_NE(message(be->graph_execute(backend, plan, &args_for(&bind, 1, &ob, 1))).find("needs 4 bytes"), std::string::npos);
    EXPECT_NE(message(be->graph_execute(backend, plan, &args_for(nullptr, 0, &ob, 1))).find("no input binding"), std::string::npos);
    cellm_execute_args old = args_for(&bind, 1, &ob, 1);
    old.struct_size = offsetof(cellm_execute_args, n_outputs);
    EXPECT_NE(message(be->graph_execute(backend, plan, &old)).find("arguments"), std::string::npos);
}

TEST_P(BackendOps, UnsupportedWeightType) {
    std::vector<uint8_t> raw(84, 0);
    cellm_buffer* buf = nullptr;
    ASSERT_EQ(message(be->buffer_alloc(backend, raw.size(), CELLM_BUFFER_WEIGHTS, &buf)), "");
    buffers.push_back(buf);
    const int32_t w = add(CELLM_OP_WEIGHT, CELLM_TYPE_Q2_K, {256, 1});
    cellm_tensor_desc& t = nodes[0].tensor;
    t = {sizeof t, CELLM_TYPE_Q2_K, 2, {256, 1, 1, 1}, {84, 84, 84, 84}, buf, 0};
    const int32_t x = f32_weight(random_floats(256, 1), 256, 1);
    const int32_t mm = add(CELLM_OP_MATMUL, CELLM_TYPE_F32, {1, 1}, {w, x});
    cellm_status* s = nullptr;
    {
        cellm_graph g{sizeof(cellm_graph), sizeof(cellm_node), 3, nodes.data(), 1, &mm};
        s = be->graph_prepare(backend, &g, &plan);
    }
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(cellm::host_api()->status_code(s), CELLM_ERR_UNSUPPORTED);
    EXPECT_NE(message(s).find("node 0 (WEIGHT)"), std::string::npos);
}

TEST_P(BackendOps, BuffersAreBoundsChecked) {
    cellm_buffer* buf = nullptr;
    ASSERT_EQ(message(be->buffer_alloc(backend, 16, CELLM_BUFFER_KV_CACHE, &buf)), "");
    buffers.push_back(buf);
    const char data[16] = "abcdefghijklmno";
    char back[16] = {};
    EXPECT_EQ(message(be->buffer_write(backend, buf, 8, data, 8)), "");
    EXPECT_NE(message(be->buffer_write(backend, buf, 9, data, 8)).find("exceeds"), std::string::npos);
    EXPECT_NE(message(be->buffer_write(backend, buf, UINT64_MAX, data, 2)).find("exceeds"), std::string::npos);
    EXPECT_NE(message(be->buffer_read(backend, buf, 0, back, 17)).find("exceeds"), std::string::npos);
    EXPECT_EQ(message(be->buffer_read(backend, buf, 8, back, 8)), "");
    EXPECT_EQ(std::memcmp(back, data, 8), 0);

    if (!host_memory()) return;  // buffer_wrap_host is for host-memory backends only
    cellm_buffer* wrapped = nullptr;
    ASSERT_EQ(message(be->buffer_wrap_host(backend, data, sizeof data, &wrapped)), "");
    buffers.push_back(wrapped);
    EXPECT_EQ(message(be->buffer_read(backend, wrapped, 4, back, 4)), "");
    EXPECT_EQ(std::memcmp(back, data + 4, 4), 0);
    EXPECT_NE(message(be->buffer_write(backend, wrapped, 0, data, 1)).find("read-only"), std::string::npos);
}

// ---- The vision encoder's ops and the splicing of image embeddings (ABI 1.3) ----

// LAYER_NORM in double: the mean, the biased variance, then the weight and the bias when given.
std::vector<float> layer_norm_reference(const std::vector<float>& x, int64_t n, const std::vector<float>* w,
                                        const std::vector<float>* b, float eps) {
    std::vector<float> out(x.size());
    for (size_t r = 0; r < x.size() / size_t(n); ++r) {
        const float* row = x.data() + r * size_t(n);
        double mean = 0, var = 0;
        for (int64_t i = 0; i < n; ++i) mean += row[i];
        mean /= double(n);
        for (int64_t i = 0; i < n; ++i) var += (row[i] - mean) * (row[i] - mean);
        var /= double(n);
        for (int64_t i = 0; i < n; ++i) {
            double y = (row[i] - mean) / std::sqrt(var + double(eps));
            if (w != nullptr) y *= (*w)[size_t(i)];
            if (b != nullptr) y += (*b)[size_t(i)];
            out[r * size_t(n) + size_t(i)] = float(y);
        }
    }
    return out;
}

// PATCHES by index: images [width, height, channels, n] planar, patches of p x p row by row of each image's grid,
// each a column of channels * p * p values in (channel, ky, kx) order.
std::vector<float> patches_reference(const std::vector<float>& images, int64_t width, int64_t height, int64_t channels,
                                     int64_t n, int64_t p) {
    const int64_t across = width / p, down = height / p, column = channels * p * p;
    std::vector<float> out(size_t(column * across * down * n));
    for (int64_t im = 0; im < n; ++im)
        for (int64_t py = 0; py < down; ++py)
            for (int64_t px = 0; px < across; ++px)
                for (int64_t c = 0; c < channels; ++c)
                    for (int64_t ky = 0; ky < p; ++ky)
                        for (int64_t kx = 0; kx < p; ++kx)
                            out[size_t(((im * down + py) * across + px) * column + (c * p + ky) * p + kx)] =
                                images[size_t(((im * channels + c) * height + py * p + ky) * width + px * p + kx)];
    return out;
}

// SELF_ATTENTION in double: token t, query head h, against every token of t's group through KV head
// h / (n_head / n_kv).
std::vector<float> self_attention_reference(const std::vector<float>& q, const std::vector<float>& k,
                                            const std::vector<float>& v, int64_t n_head, int64_t n_kv, int64_t hd,
                                            int64_t group, int64_t n_tokens, float scale) {
    std::vector<float> out(size_t(n_tokens * n_head * hd));
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t h = 0; h < n_head; ++h) {
            const int64_t kvh = h / (n_head / n_kv), first = t / group * group;
            std::vector<double> w(static_cast<size_t>(group));
            for (int64_t j = 0; j < group; ++j) {
                double dot = 0;
                for (int64_t d = 0; d < hd; ++d)
                    dot += double(q[size_t((t * n_head + h) * hd + d)]) * k[size_t(((first + j) * n_kv + kvh) * hd + d)];
                w[size_t(j)] = dot * scale;
            }
            const double mx = *std::max_element(w.begin(), w.end());
            double sum = 0;
            for (double& x : w) sum += x = std::exp(x - mx);
            for (int64_t d = 0; d < hd; ++d) {
                double acc = 0;
                for (int64_t j = 0; j < group; ++j) acc += w[size_t(j)] / sum * v[size_t(((first + j) * n_kv + kvh) * hd + d)];
                out[size_t((t * n_head + h) * hd + d)] = float(acc);
            }
        }
    return out;
}

// SELF_ATTENTION in the reference's order and roundings (reference_kernels.cpp: dot_in_lanes, attention_weights,
// weight * value summed in key order), but for one function: exp correctly rounded, float(exp(double)), where the
// reference calls libm's expf, which glibc rounds the other way on 1 float in 12,400 of [-30, 0] (docs/vulkan.md). This is
// what vulkan's exact precision computes (common.glsl's exp_ref), bit for bit.
std::vector<float> self_attention_in_order(const std::vector<float>& q, const std::vector<float>& k,
                                           const std::vector<float>& v, int64_t n_head, int64_t n_kv, int64_t hd,
                                           int64_t group, int64_t n_tokens, float scale) {
    const auto dot = [&](const float* a, const float* b) {
        float lanes[8] = {};
        const int64_t whole = hd / 8 * 8;
        for (int64_t i = 0; i < whole; ++i) lanes[i % 8] = std::fma(a[i], b[i], lanes[i % 8]);
        float sum = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
        for (int64_t i = whole; i < hd; ++i) sum += a[i] * b[i];
        return sum;
    };
    std::vector<float> out(size_t(n_tokens * n_head * hd), 0.0f);
    std::vector<float> w(static_cast<size_t>(group));
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t h = 0; h < n_head; ++h) {
            const int64_t kvh = h / (n_head / n_kv), first = t / group * group;
            const float* qh = q.data() + (t * n_head + h) * hd;
            float best = -INFINITY, sum = 0.0f;
            for (int64_t j = 0; j < group; ++j) {
                w[size_t(j)] = scale * dot(qh, k.data() + ((first + j) * n_kv + kvh) * hd);
                best = std::max(best, w[size_t(j)]);
            }
            for (float& x : w) sum += x = static_cast<float>(std::exp(static_cast<double>(x - best)));
            float* o = out.data() + (t * n_head + h) * hd;
            for (int64_t j = 0; j < group; ++j) {
                const float weight = w[size_t(j)] / sum;
                const float* vj = v.data() + ((first + j) * n_kv + kvh) * hd;
                for (int64_t d = 0; d < hd; ++d) o[d] += weight * vj[d];
            }
        }
    return out;
}

// One node of `op` in the smallest graph that is valid for it; returns the node.
int32_t add_vision_op(Instance& g, cellm_op op) {
    switch (op) {
    case CELLM_OP_LAYER_NORM:
        return g.add(op, CELLM_TYPE_F32, {8, 2}, {g.f32_weight(random_floats(16, 1), 8, 2)}, {}, {1e-6f});
    case CELLM_OP_PATCHES: {
        const int32_t image = g.add(CELLM_OP_RESHAPE, CELLM_TYPE_F32, {4, 4, 3, 1}, {g.f32_weight(random_floats(48, 2), 4, 12)});
        return g.add(op, CELLM_TYPE_F32, {12, 4}, {image}, {2});
    }
    case CELLM_OP_SELF_ATTENTION: {
        const int32_t q = g.add(CELLM_OP_RESHAPE, CELLM_TYPE_F32, {4, 2, 2}, {g.f32_weight(random_floats(16, 3), 8, 2)});
        const int32_t k = g.add(CELLM_OP_RESHAPE, CELLM_TYPE_F32, {4, 1, 2}, {g.f32_weight(random_floats(8, 4), 4, 2)});
        return g.add(op, CELLM_TYPE_F32, {8, 2}, {q, k, k}, {2, 1, 4, 2}, {0.5f});
    }
    default: {
        const int32_t into = g.f32_weight(random_floats(12, 5), 4, 3);
        const int32_t rows = g.input_f32(CELLM_INPUT_EMBEDDINGS, {4, 1});
        return g.add(op, CELLM_TYPE_F32, {4, 3}, {into, rows, g.input(CELLM_INPUT_EMBEDDING_ROWS, {1})});
    }
    }
}

// VIEW (ABI 1.2) takes a strided window of its source: one layer's slice of Gemma 4's per-layer embeddings
// ([n_layers * width, n_tokens] -> [width, n_tokens] at offset layer * width), and a 4-D window with gaps in every
// dimension, each element against the index computation and, as a pure copy, bit for bit on every backend.
TEST_P(BackendOps, ViewCopiesStridedWindows) {
    const int64_t layers = 5, width = 24, n_tokens = 7;
    const std::vector<float> packed = random_floats(size_t(layers * width * n_tokens), 60);
    clear_graph();
    const int32_t src = f32_weight(packed, layers * width, n_tokens);
    const int32_t slice = add(CELLM_OP_VIEW, CELLM_TYPE_F32, {width, n_tokens}, {src}, {int32_t(3 * width), int32_t(layers * width), 0, 0});
    // A [5, 3, 2, 2] window at offset 9 with strides 11, 40 and 97 (all within the 840 elements).
    const int32_t window = add(CELLM_OP_VIEW, CELLM_TYPE_F32, {5, 3, 2, 2}, {src}, {9, 11, 40, 97});
    ASSERT_EQ(prepare({slice, window}), "");
    ASSERT_EQ(execute({}), "");
    std::vector<float> want_slice, want_window;
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t i = 0; i < width; ++i) want_slice.push_back(packed[size_t(t * layers * width + 3 * width + i)]);
    for (int64_t i3 = 0; i3 < 2; ++i3)
        for (int64_t i2 = 0; i2 < 2; ++i2)
            for (int64_t i1 = 0; i1 < 3; ++i1)
                for (int64_t i0 = 0; i0 < 5; ++i0) want_window.push_back(packed[size_t(9 + i0 + i1 * 11 + i2 * 40 + i3 * 97)]);
    expect_identical(results[0], want_slice, "one layer's slice");
    expect_identical(results[1], want_window, "4-D window");
}

// A backend runs the four ops or declines each in supports_op, and then a graph holding one fails to prepare
// with one line naming the node. The CPU backends and vulkan run them.
TEST_P(BackendOps, VisionOpsRunOrAreDeclinedByName) {
    for (cellm_op op : {CELLM_OP_LAYER_NORM, CELLM_OP_PATCHES, CELLM_OP_SELF_ATTENTION, CELLM_OP_SET_ROWS}) {
        SCOPED_TRACE("op " + std::to_string(op));
        const bool supported = be->supports_op(backend, op, CELLM_TYPE_F32) != 0;
        if (host_memory() || GetParam().name == "vulkan") {
            EXPECT_TRUE(supported);
        }
        clear_graph();
        const int32_t node = add_vision_op(*this, op);
        const std::string m = prepare({node});
        if (supported) {
            EXPECT_EQ(m, "");
            continue;
        }
        const std::string name = op == CELLM_OP_LAYER_NORM ? "LAYER_NORM" : op == CELLM_OP_PATCHES ? "PATCHES"
                                 : op == CELLM_OP_SELF_ATTENTION ? "SELF_ATTENTION" : "SET_ROWS";
        EXPECT_NE(m.find("node " + std::to_string(node) + " (" + name + ")"), std::string::npos) << m;
        EXPECT_NE(m.find("op not supported by this backend"), std::string::npos) << m;
        EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
}

// Rows of 768 (SigLIP's width) around a mean far from zero, with and without weight and bias: against the double
// math within 1e-5, and a CPU backend or vulkan's exact precision bit for bit with scalar (24 rows: enough for a
// pool to split).
TEST_P(BackendOps, LayerNormFollowsTheDoubleMath) {
    if (!runs_vision_ops()) GTEST_SKIP() << "declines the vision ops";
    const int64_t n = 768, rows = 24;
    const float eps = 1e-6f;
    std::vector<float> x = random_floats(size_t(n * rows), 40, 2.0f);
    for (size_t i = 0; i < x.size(); ++i) x[i] += float(i / size_t(n)) - 8.0f;  // row r around r - 8
    const std::vector<float> w = random_floats(size_t(n), 41, 1.5f), b = random_floats(size_t(n), 42);
    Instance scalar;
    ASSERT_EQ(scalar.open(scalar_iface()), "");
    const auto build = [&](Instance& g) {
        const int32_t xn = g.f32_weight(x, n, rows), wn = g.f32_weight(w, n, 1), bn = g.f32_weight(b, n, 1);
        std::vector<int32_t> outputs;
        for (auto [ws, bs] : {std::pair{-1, -1}, std::pair{wn, -1}, std::pair{wn, bn}, std::pair{-1, bn}})
            outputs.push_back(g.add(CELLM_OP_LAYER_NORM, CELLM_TYPE_F32, {n, rows}, {xn, ws, bs}, {}, {eps}));
        return outputs;
    };
    ASSERT_EQ(prepare_beside_scalar(scalar, build), "");
    ASSERT_EQ(execute_beside_scalar(scalar), "");
    const char* what[] = {"plain", "weight", "weight and bias", "bias"};
    const std::vector<float> want[] = {layer_norm_reference(x, n, nullptr, nullptr, eps), layer_norm_reference(x, n, &w, nullptr, eps),
                                       layer_norm_reference(x, n, &w, &b, eps), layer_norm_reference(x, n, nullptr, &b, eps)};
    for (size_t i = 0; i < 4; ++i) {
        expect_near_all(results[i], want[i], 1e-5f, what[i]);
        if (follows_scalar_exactly()) expect_identical(results[i], scalar.results[i], std::string(what[i]) + " vs scalar");
    }
}

// Two 62 x 62 RGB images bound as CELLM_INPUT_PIXELS, cut into 5 x 5 patches (the last 2 pixels of each row and
// column are no patch's), and a 11 x 7 two-channel image in 3 x 3 patches: against the index computation, and on
// every backend bit for bit with scalar.
TEST_P(BackendOps, PatchesFollowTheIndexComputation) {
    if (!runs_vision_ops()) GTEST_SKIP() << "declines the vision ops";
    const int64_t side = 62, p = 5, images = 2;
    const std::vector<float> pixels = random_floats(size_t(side * side * 3 * images), 43);
    const std::vector<float> small = random_floats(11 * 7 * 2, 44);
    Instance scalar;
    ASSERT_EQ(scalar.open(scalar_iface()), "");
    int32_t pixels_in = -1;
    const auto build = [&](Instance& g) {
        pixels_in = g.input_f32(CELLM_INPUT_PIXELS, {side, side, 3, images});
        const int32_t big = g.add(CELLM_OP_PATCHES, CELLM_TYPE_F32, {3 * p * p, (side / p) * (side / p) * images},
                                  {pixels_in}, {static_cast<int32_t>(p)});
        const int32_t shaped = g.add(CELLM_OP_RESHAPE, CELLM_TYPE_F32, {11, 7, 2, 1}, {g.f32_weight(small, 11, 14)});
        const int32_t odd = g.add(CELLM_OP_PATCHES, CELLM_TYPE_F32, {2 * 9, 3 * 2}, {shaped}, {3});
        return std::vector<int32_t>{big, odd};
    };
    ASSERT_EQ(prepare_beside_scalar(scalar, build), "");
    ASSERT_EQ(execute_beside_scalar(scalar, {}, {{pixels_in, pixels}}), "");
    EXPECT_EQ(results[0], patches_reference(pixels, side, side, 3, images, p));
    EXPECT_EQ(results[1], patches_reference(small, 11, 7, 2, 1, 3));
    expect_identical(results[0], scalar.results[0], "62 x 62 vs scalar");
    expect_identical(results[1], scalar.results[1], "11 x 7 vs scalar");
}

// Two groups (images) of 100 tokens, 4 query heads over 2 KV heads, head_dim 21 (two whole 8-lane runs and a
// tail), and one group of 2100 tokens (more keys than vulkan's shader keeps in shared memory at once, 2048), one
// head of 8: against the softmax in double within 1e-5. openblas runs the two products as SGEMMs, as it does F32
// products (self_attention.hpp), so only its weights are the reference's; another CPU backend is bit for bit scalar,
// and vulkan's exact precision bit for bit the reference's order with a correctly rounded exp.
TEST_P(BackendOps, SelfAttentionFollowsTheDoubleMath) {
    if (!runs_vision_ops()) GTEST_SKIP() << "declines the vision ops";
    struct Heads {
        int64_t n_head, n_kv, hd, group, n_tokens;
    };
    for (const Heads& sh : {Heads{4, 2, 21, 100, 200}, Heads{1, 1, 8, 2100, 2100}}) {
        const int64_t n_head = sh.n_head, n_kv = sh.n_kv, hd = sh.hd, group = sh.group, n_tokens = sh.n_tokens;
        SCOPED_TRACE("group of " + std::to_string(group));
        const float scale = 1.0f / std::sqrt(float(hd));
        const std::vector<float> q = random_floats(size_t(hd * n_head * n_tokens), 45, 2.0f);
        const std::vector<float> k = random_floats(size_t(hd * n_kv * n_tokens), 46, 2.0f);
        const std::vector<float> v = random_floats(size_t(hd * n_kv * n_tokens), 47);
        Instance scalar;
        ASSERT_EQ(scalar.open(scalar_iface()), "");
        const auto build = [&](Instance& g) {
            const auto heads = [&](const std::vector<float>& data, int64_t count) {
                return g.add(CELLM_OP_RESHAPE, CELLM_TYPE_F32, {hd, count, n_tokens}, {g.f32_weight(data, hd * count, n_tokens)});
            };
            const int32_t qn = heads(q, n_head), kn = heads(k, n_kv), vn = heads(v, n_kv);
            return std::vector<int32_t>{g.add(CELLM_OP_SELF_ATTENTION, CELLM_TYPE_F32, {hd * n_head, n_tokens}, {qn, kn, vn},
                                              {int32_t(n_head), int32_t(n_kv), int32_t(hd), int32_t(group)}, {scale})};
        };
        ASSERT_EQ(prepare_beside_scalar(scalar, build), "");
        ASSERT_EQ(execute_beside_scalar(scalar), "");
        expect_near_all(results[0], self_attention_reference(q, k, v, n_head, n_kv, hd, group, n_tokens, scale), 1e-5f,
                        "self attention");
        // Vulkan's exact precision follows the reference but for glibc's expf (self_attention_in_order); the CPU
        // backends but openblas are scalar itself.
        if (GetParam().name == "vulkan") {
            expect_identical(results[0], self_attention_in_order(q, k, v, n_head, n_kv, hd, group, n_tokens, scale),
                             "vs the reference's order with exp correctly rounded");
        } else if (host_memory() && GetParam().name != "openblas") {
            expect_identical(results[0], scalar.results[0], "vs scalar");
        }
    }
}

// Image embeddings (CELLM_INPUT_EMBEDDINGS) put in place of 5 of 40 token embeddings (CELLM_INPUT_EMBEDDING_ROWS):
// every other column is the token's. A row index out of range or given twice is one error status naming
// SET_ROWS and the index however the columns are split, and the instance keeps working.
TEST_P(BackendOps, SetRowsSplicesEmbeddingsAndChecksEveryIndex) {
    if (!runs_vision_ops()) GTEST_SKIP() << "declines the vision ops";
    const int64_t n = 768, vocab = 50, n_tokens = 40, k = 5;
    const std::vector<float> table = random_floats(size_t(n * vocab), 48);
    const std::vector<float> embeddings = random_floats(size_t(n * k), 49);
    std::vector<int32_t> tokens(static_cast<size_t>(n_tokens));
    for (int64_t t = 0; t < n_tokens; ++t) tokens[size_t(t)] = int32_t((t * 7) % vocab);
    const std::vector<int32_t> good{3, 4, 5, 6, 39};
    Instance scalar;
    ASSERT_EQ(scalar.open(scalar_iface()), "");
    int32_t tokens_in = -1, embd_in = -1, rows_in = -1, spliced = -1;
    const auto build = [&](Instance& g) {
        tokens_in = g.input(CELLM_INPUT_TOKENS, {n_tokens});
        embd_in = g.input_f32(CELLM_INPUT_EMBEDDINGS, {n, k});
        rows_in = g.input(CELLM_INPUT_EMBEDDING_ROWS, {k});
        const int32_t embedded = g.add(CELLM_OP_GET_ROWS, CELLM_TYPE_F32, {n, n_tokens}, {g.f32_weight(table, n, vocab), tokens_in});
        spliced = g.add(CELLM_OP_SET_ROWS, CELLM_TYPE_F32, {n, n_tokens}, {embedded, embd_in, rows_in});
        g.nodes[size_t(spliced)].name = "splice";
        return std::vector<int32_t>{spliced};
    };
    ASSERT_EQ(prepare_beside_scalar(scalar, build), "");
    ASSERT_EQ(execute_beside_scalar(scalar, {{tokens_in, tokens}, {rows_in, good}}, {{embd_in, embeddings}}), "");
    std::vector<float> want(size_t(n * n_tokens));
    for (int64_t t = 0; t < n_tokens; ++t)
        std::copy_n(table.begin() + tokens[size_t(t)] * n, n, want.begin() + t * n);
    for (int64_t i = 0; i < k; ++i) std::copy_n(embeddings.begin() + i * n, n, want.begin() + good[size_t(i)] * n);
    EXPECT_EQ(results[0], want);
    if (host_memory()) expect_identical(results[0], scalar.results[0], "vs scalar");

    const std::string node = "node " + std::to_string(spliced) + " (SET_ROWS 'splice')";
    for (const auto& [rows, problem] : {std::pair{std::vector<int32_t>{3, 4, 5, 6, 40}, "row index 40 at 4 is outside [0, 40)"},
                                        std::pair{std::vector<int32_t>{-1, 4, 5, 6, 7}, "row index -1 at 0 is outside [0, 40)"},
                                        std::pair{std::vector<int32_t>{3, 4, 5, 4, 7}, "row index 4 at 3 repeats the one at 1"}}) {
        for (Instance* g : {static_cast<Instance*>(this), &scalar}) {
            const std::string m = g->execute({{tokens_in, tokens}, {rows_in, rows}}, {{embd_in, embeddings}});
            EXPECT_NE(m.find(node), std::string::npos) << m;
            EXPECT_NE(m.find(problem), std::string::npos) << m;
            EXPECT_EQ(m.find(node), m.rfind(node)) << m;
        }
    }
    ASSERT_EQ(execute({{tokens_in, tokens}, {rows_in, good}}, {{embd_in, embeddings}}), "");
    EXPECT_EQ(results[0], want);
}

// Malformed vision graphs and F32 inputs come back as a status naming the node: shapes that do not follow
// graph.h, an F32 input kind declared I32, and a binding that does not cover the input's elements.
TEST_P(BackendOps, VisionGraphErrorsNameTheNode) {
    if (!runs_vision_ops()) GTEST_SKIP() << "declines the vision ops";
    const auto expect_error = [&](const std::function<int32_t(Instance&)>& build, const std::string& node,
                                  const std::string& problem) {
        clear_graph();
        const int32_t out = build(*this);
        const std::string m = prepare({out});
        EXPECT_NE(m.find(node), std::string::npos) << m;
        EXPECT_NE(m.find(problem), std::string::npos) << m;
    };
    const auto image = [](Instance& g, int64_t w, int64_t h) {
        return g.add(CELLM_OP_RESHAPE, CELLM_TYPE_F32, {w, h, 3, 1}, {g.f32_weight(random_floats(size_t(w * h * 3), 50), w, h * 3)});
    };
    const auto heads = [](Instance& g, int64_t hd, int64_t count, int64_t n_tokens) {
        return g.add(CELLM_OP_RESHAPE, CELLM_TYPE_F32, {hd, count, n_tokens},
                     {g.f32_weight(random_floats(size_t(hd * count * n_tokens), 51), hd * count, n_tokens)});
    };
    expect_error([&](Instance& g) { return g.add(CELLM_OP_PATCHES, CELLM_TYPE_F32, {48, 5}, {image(g, 10, 10)}, {4}); },
                 "node 2 (PATCHES)", "output shape [48, 5, 1, 1], expected [48, 4, 1, 1]");
    expect_error([&](Instance& g) { return g.add(CELLM_OP_PATCHES, CELLM_TYPE_F32, {48, 1}, {image(g, 10, 3)}, {4}); },
                 "node 2 (PATCHES)", "smaller than one patch");
    expect_error([&](Instance& g) { return g.add(CELLM_OP_PATCHES, CELLM_TYPE_F32, {48, 4}, {image(g, 10, 10)}, {0}); },
                 "node 2 (PATCHES)", "patch size");
    expect_error([&](Instance& g) {
        const int32_t q = heads(g, 4, 2, 6), kv = heads(g, 4, 1, 6);
        return g.add(CELLM_OP_SELF_ATTENTION, CELLM_TYPE_F32, {8, 6}, {q, kv, kv}, {2, 1, 4, 4}, {1.0f});
    }, "node 4 (SELF_ATTENTION)", "multiple of the group size (4)");
    expect_error([&](Instance& g) {
        const int32_t q = heads(g, 4, 3, 6), kv = heads(g, 4, 2, 6);
        return g.add(CELLM_OP_SELF_ATTENTION, CELLM_TYPE_F32, {12, 6}, {q, kv, kv}, {3, 2, 4, 3}, {1.0f});
    }, "node 4 (SELF_ATTENTION)", "multiple of n_head_kv");
    expect_error([&](Instance& g) {
        const int32_t q = heads(g, 4, 2, 6), k = heads(g, 4, 1, 6), v = heads(g, 4, 2, 6);
        return g.add(CELLM_OP_SELF_ATTENTION, CELLM_TYPE_F32, {8, 6}, {q, k, v}, {2, 1, 4, 3}, {1.0f});
    }, "node 6 (SELF_ATTENTION)", "v shape [4, 2, 6, 1], expected [4, 1, 6, 1]");
    expect_error([&](Instance& g) {
        const int32_t x = g.f32_weight(random_floats(16, 52), 8, 2), b = g.f32_weight(random_floats(7, 53), 7, 1);
        return g.add(CELLM_OP_LAYER_NORM, CELLM_TYPE_F32, {8, 2}, {x, -1, b}, {}, {1e-6f});
    }, "node 2 (LAYER_NORM)", "bias length differs");
    expect_error([&](Instance& g) {
        const int32_t into = g.f32_weight(random_floats(12, 54), 4, 3), rows = g.f32_weight(random_floats(10, 55), 5, 2);
        return g.add(CELLM_OP_SET_ROWS, CELLM_TYPE_F32, {4, 3}, {into, rows, g.input(CELLM_INPUT_EMBEDDING_ROWS, {2})});
    }, "node 3 (SET_ROWS)", "new rows [5, 2, 1, 1] are not [4, k]");
    expect_error([&](Instance& g) {
        const int32_t into = g.f32_weight(random_floats(12, 54), 4, 3), rows = g.f32_weight(random_floats(8, 55), 4, 2);
        return g.add(CELLM_OP_SET_ROWS, CELLM_TYPE_F32, {4, 3}, {into, rows, g.input(CELLM_INPUT_EMBEDDING_ROWS, {3})});
    }, "node 3 (SET_ROWS)", "row indices shape [3, 1, 1, 1], expected [2]");
    expect_error([&](Instance& g) { return g.input(CELLM_INPUT_PIXELS, {8, 8, 3, 1}); }, "node 0 (INPUT)",
                 "input kind 7 has type 26, expected 0 (F32)");
    expect_error([&](Instance& g) { return g.input_f32(CELLM_INPUT_EMBEDDING_ROWS, {2}); }, "node 0 (INPUT)",
                 "input kind 9 has type 0, expected 26 (I32)");
    expect_error([&](Instance& g) { return g.input_f32(CELLM_INPUT_PIXELS, {8, 6, 3, 1}); }, "node 0 (INPUT)",
                 "does not fit its kind");

    clear_graph();
    const int32_t embd = input_f32(CELLM_INPUT_EMBEDDINGS, {4, 2});
    const int32_t doubled = add(CELLM_OP_SCALE, CELLM_TYPE_F32, {4, 2}, {embd}, {}, {2.0f});
    ASSERT_EQ(prepare({doubled}), "");
    const std::vector<float> values{1, 2, 3, 4, 5, 6, 7, 8};
    ASSERT_EQ(execute({}, {{embd, values}}), "");
    EXPECT_EQ(results[0], (std::vector<float>{2, 4, 6, 8, 10, 12, 14, 16}));
    const std::string m = execute({}, {{embd, {1, 2, 3, 4}}});
    EXPECT_NE(m.find("node 0 (INPUT) needs 32 bytes (8 F32 values), binding has 16"), std::string::npos) << m;
}

// ---- Qwen3.5's recurrent ops (ABI 1.2) ----
// tests/qwen35 holds the CPU backends to the recurrence's math; these hold every backend to the reference's order:
// the CPU backends bit for bit with scalar, vulkan's exact precision bit for bit with the reference's order where
// exp and log1p are correctly rounded (docs/vulkan.md: glibc's expf and log1pf are not always).

float exp_rounded(float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }
float sigmoid_in_order(float x) { return 1.0f / (1.0f + exp_rounded(-x)); }
float softplus_in_order(float x) { return x > 20.0f ? x : static_cast<float>(std::log1p(static_cast<double>(exp_rounded(x)))); }

// The gated delta rule in the reference's order (reference_kernels.cpp, delta_net) with exp correctly rounded;
// advances `state` ([n_v * d_k * d_v] per slot) and returns the outputs.
std::vector<float> delta_net_in_order(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                                      const std::vector<float>& g, const std::vector<float>& beta, std::vector<float>& state,
                                      const std::vector<int32_t>& seq_of, const std::vector<int32_t>& slots, int64_t d_k,
                                      int64_t n_k, int64_t d_v, int64_t n_v, bool tiled) {
    const auto n_tokens = static_cast<int64_t>(seq_of.size());
    std::vector<float> out(static_cast<size_t>(d_v * n_v * n_tokens), 0.0f), u(static_cast<size_t>(d_v));
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t h = 0; h < n_v; ++h) {
            float* s = state.data() + slots[size_t(seq_of[size_t(t)])] * n_v * d_k * d_v + h * d_k * d_v;
            const int64_t kh = tiled ? h % n_k : h / (n_v / n_k);
            const float* qt = q.data() + (t * n_k + kh) * d_k;
            const float* kt = k.data() + (t * n_k + kh) * d_k;
            const float* vt = v.data() + (t * n_v + h) * d_v;
            const float decay = exp_rounded(g[size_t(t * n_v + h)]), b = beta[size_t(t * n_v + h)];
            std::fill(u.begin(), u.end(), 0.0f);
            for (int64_t i = 0; i < d_k; ++i)
                for (int64_t j = 0; j < d_v; ++j) {
                    s[i * d_v + j] *= decay;
                    u[size_t(j)] += s[i * d_v + j] * kt[i];
                }
            for (int64_t j = 0; j < d_v; ++j) u[size_t(j)] = b * (vt[j] - u[size_t(j)]);
            float* o = out.data() + (t * n_v + h) * d_v;
            for (int64_t i = 0; i < d_k; ++i)
                for (int64_t j = 0; j < d_v; ++j) {
                    s[i * d_v + j] += kt[i] * u[size_t(j)];
                    o[j] += s[i * d_v + j] * qt[i];
                }
        }
    return out;
}

// The floats of a leaf's buffer (a STATE leaf after a step).
std::vector<float> read_leaf(Instance& g, int32_t node) {
    const cellm_node& n = g.nodes[static_cast<size_t>(node)];
    std::vector<float> out(static_cast<size_t>(n.ne[0] * n.ne[1]));
    EXPECT_EQ(message(g.be->buffer_read(g.backend, n.tensor.buffer, 0, out.data(), out.size() * 4)), "");
    return out;
}

// SIGMOID and SOFTPLUS over 8192 inputs spread over [-40, 40], and the edges: softplus's switch at 20, expf's
// overflow and underflow, zeros, infinities.
TEST_P(BackendOps, SigmoidAndSoftplusFollowTheReference) {
    EXPECT_EQ(be->supports_op(backend, CELLM_OP_SIGMOID, CELLM_TYPE_F32), 1);
    EXPECT_EQ(be->supports_op(backend, CELLM_OP_SOFTPLUS, CELLM_TYPE_F32), 1);
    std::vector<float> x = random_floats(8192, 70, 40.0f);
    for (float e : {0.0f, -0.0f, 20.0f, std::nextafter(20.0f, 0.0f), std::nextafter(20.0f, 30.0f), 88.7f, 89.0f, -87.0f,
                    -104.0f, -110.0f, 1e-30f, -1e-30f, INFINITY, -INFINITY})
        x.push_back(e);
    x.resize(8208, 0.5f);
    Instance scalar;
    ASSERT_EQ(scalar.open(scalar_iface()), "");
    const auto build = [&](Instance& g) {
        const int32_t xn = g.f32_weight(x, 16, int64_t(x.size()) / 16);
        return std::vector<int32_t>{g.add(CELLM_OP_SIGMOID, CELLM_TYPE_F32, {16, int64_t(x.size()) / 16}, {xn}),
                                    g.add(CELLM_OP_SOFTPLUS, CELLM_TYPE_F32, {16, int64_t(x.size()) / 16}, {xn})};
    };
    ASSERT_EQ(prepare_beside_scalar(scalar, build), "");
    ASSERT_EQ(execute_beside_scalar(scalar), "");
    std::vector<float> sigmoid(x.size()), softplus(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        sigmoid[i] = sigmoid_in_order(x[i]);
        softplus[i] = softplus_in_order(x[i]);
        // Against the math in double: one float rounding (and expf's) away.
        const double e = std::exp(double(x[i]));
        ASSERT_NEAR(results[0][i], 1.0 / (1.0 + 1.0 / e), 1e-6) << "sigmoid of " << x[i];
        if (std::isfinite(x[i])) {
            ASSERT_NEAR(results[1][i], x[i] > 20.0f ? double(x[i]) : std::log1p(e), 1e-6 * (1.0 + std::fabs(x[i]))) << "softplus of " << x[i];
        }
    }
    if (GetParam().name == "vulkan") {
        expect_identical(results[0], sigmoid, "sigmoid vs the reference with exp correctly rounded");
        expect_identical(results[1], softplus, "softplus vs the reference with exp and log1p correctly rounded");
    } else {
        expect_identical(results[0], scalar.results[0], "sigmoid vs scalar");
        expect_identical(results[1], scalar.results[1], "softplus vs scalar");
    }
}

// SSM_CONV over two sequences interleaved in one step (rows 0 and 1 in slots 2 and 0 of 3), kernel 4, 40 channels:
// outputs and the state left behind bit for bit with scalar on every backend (no transcendental function), and
// against the convolution written out.
TEST_P(BackendOps, SsmConvFollowsTheReference) {
    const int64_t channels = 40, kernel = 4, n_slots = 3, width = (kernel - 1) * channels;
    const std::vector<int32_t> seq_of{0, 1, 1, 0, 0, 1, 0}, slots{2, 0};
    const auto n_tokens = static_cast<int64_t>(seq_of.size());
    const std::vector<float> x = random_floats(size_t(channels * n_tokens), 71), w = random_floats(size_t(kernel * channels), 72);
    const std::vector<float> state = random_floats(size_t(width * n_slots), 73);
    Instance scalar;
    ASSERT_EQ(scalar.open(scalar_iface()), "");
    int32_t state_node = -1, seq_in = -1, slots_in = -1;
    const auto build = [&](Instance& g) {
        const int32_t xn = g.f32_weight(x, channels, n_tokens), wn = g.f32_weight(w, kernel, channels);
        state_node = g.leaf(CELLM_OP_STATE, CELLM_TYPE_F32, width, n_slots, state.data());
        seq_in = g.input(CELLM_INPUT_TOKEN_SEQ, {n_tokens});
        slots_in = g.input(CELLM_INPUT_STATE_SLOTS, {2});
        return std::vector<int32_t>{g.add(CELLM_OP_SSM_CONV, CELLM_TYPE_F32, {channels, n_tokens}, {xn, wn, state_node, seq_in, slots_in})};
    };
    ASSERT_EQ(prepare_beside_scalar(scalar, build), "");
    ASSERT_EQ(execute_beside_scalar(scalar, {{seq_in, seq_of}, {slots_in, slots}}), "");
    expect_identical(results[0], scalar.results[0], "outputs vs scalar");
    expect_identical(read_leaf(*this, state_node), read_leaf(scalar, state_node), "state vs scalar");
    // The convolution written out: each row's inputs, oldest first, are its slot's kernel - 1 then its tokens.
    for (int32_t r = 0; r < 2; ++r)
        for (int64_t c = 0; c < channels; ++c) {
            std::vector<float> inputs;
            for (int64_t j = 0; j + 1 < kernel; ++j) inputs.push_back(state[size_t(slots[size_t(r)] * width + j * channels + c)]);
            for (int64_t t = 0; t < n_tokens; ++t) {
                if (seq_of[size_t(t)] != r) continue;
                inputs.push_back(x[size_t(t * channels + c)]);
                float sum = 0.0f;
                for (int64_t j = 0; j < kernel; ++j) sum += w[size_t(c * kernel + j)] * inputs[inputs.size() - size_t(kernel) + size_t(j)];
                ASSERT_EQ(results[0][size_t(t * channels + c)], sum) << "row " << r << ", channel " << c << ", token " << t;
            }
        }
}

// DELTA_NET over three sequences in one step, tokens interleaved, 4 value heads over 2 key heads in both head
// orders (Hugging Face's h / 2 and GGUF's h % 2), d_k 16, d_v 12: outputs and the state left behind bit for bit with
// scalar on the CPU backends, and with the reference's order under a correctly rounded exp on vulkan.
TEST_P(BackendOps, DeltaNetFollowsTheReference) {
    const int64_t d_k = 16, n_k = 2, d_v = 12, n_v = 4, n_slots = 4, size = n_v * d_k * d_v;
    const std::vector<int32_t> seq_of{0, 1, 2, 2, 0, 1, 1, 2, 0, 0}, slots{3, 0, 1};
    const auto n_tokens = static_cast<int64_t>(seq_of.size());
    for (int32_t order : {0, 1}) {
        SCOPED_TRACE("head order " + std::to_string(order));
        const std::vector<float> q = random_floats(size_t(d_k * n_k * n_tokens), 80 + unsigned(order), 0.3f);
        const std::vector<float> k = random_floats(q.size(), 82, 0.3f), v = random_floats(size_t(d_v * n_v * n_tokens), 83);
        std::vector<float> g = random_floats(size_t(n_v * n_tokens), 84, 1.5f), beta = random_floats(g.size(), 85, 0.5f);
        for (float& x : g) x = x - 1.5f;     // in [-3, 0]: log decays
        for (float& x : beta) x = x + 0.5f;  // in [0, 1]
        const std::vector<float> state = random_floats(size_t(size * n_slots), 86, 0.5f);
        Instance scalar;
        ASSERT_EQ(scalar.open(scalar_iface()), "");
        int32_t state_node = -1, seq_in = -1, slots_in = -1;
        const auto build = [&](Instance& gr) {
            const auto heads = [&](const std::vector<float>& data, int64_t dim, int64_t count) {
                return gr.add(CELLM_OP_RESHAPE, CELLM_TYPE_F32, {dim, count, n_tokens}, {gr.f32_weight(data, dim * count, n_tokens)});
            };
            const int32_t qn = heads(q, d_k, n_k), kn = heads(k, d_k, n_k), vn = heads(v, d_v, n_v);
            const int32_t gn = gr.f32_weight(g, n_v, n_tokens), bn = gr.f32_weight(beta, n_v, n_tokens);
            state_node = gr.leaf(CELLM_OP_STATE, CELLM_TYPE_F32, size, n_slots, state.data());
            seq_in = gr.input(CELLM_INPUT_TOKEN_SEQ, {n_tokens});
            slots_in = gr.input(CELLM_INPUT_STATE_SLOTS, {3});
            return std::vector<int32_t>{gr.add(CELLM_OP_DELTA_NET, CELLM_TYPE_F32, {d_v, n_v, n_tokens},
                                               {qn, kn, vn, gn, bn, state_node, seq_in, slots_in}, {order})};
        };
        ASSERT_EQ(prepare_beside_scalar(scalar, build), "");
        ASSERT_EQ(execute_beside_scalar(scalar, {{seq_in, seq_of}, {slots_in, slots}}), "");
        if (GetParam().name == "vulkan") {
            std::vector<float> advanced = state;
            const std::vector<float> out = delta_net_in_order(q, k, v, g, beta, advanced, seq_of, slots, d_k, n_k, d_v, n_v, order == 1);
            expect_identical(results[0], out, "outputs vs the reference with exp correctly rounded");
            expect_identical(read_leaf(*this, state_node), advanced, "state vs the reference with exp correctly rounded");
            expect_near_all(results[0], scalar.results[0], 1e-5f, "outputs vs scalar");
        } else {
            expect_identical(results[0], scalar.results[0], "outputs vs scalar");
            expect_identical(read_leaf(*this, state_node), read_leaf(scalar, state_node), "state vs scalar");
        }
    }
}

// A state slot out of range or shared by two rows, or a token in a row the slot table lacks, is one error naming the
// node, before any state is written; the instance keeps working.
TEST_P(BackendOps, BadStateRowsAreOneErrorBeforeAnyWrite) {
    const int64_t channels = 8, kernel = 3, n_tokens = 3, width = (kernel - 1) * channels;
    const std::vector<float> state = random_floats(size_t(width * 3), 90);
    clear_graph();
    const int32_t xn = f32_weight(random_floats(size_t(channels * n_tokens), 91), channels, n_tokens);
    const int32_t wn = f32_weight(random_floats(size_t(kernel * channels), 92), kernel, channels);
    const int32_t st = leaf(CELLM_OP_STATE, CELLM_TYPE_F32, width, 3, state.data());
    const int32_t seq_in = input(CELLM_INPUT_TOKEN_SEQ, {n_tokens}), slots_in = input(CELLM_INPUT_STATE_SLOTS, {2});
    const int32_t conv = add(CELLM_OP_SSM_CONV, CELLM_TYPE_F32, {channels, n_tokens}, {xn, wn, st, seq_in, slots_in});
    nodes[size_t(conv)].name = "conv";
    ASSERT_EQ(prepare({conv}), "");
    const std::string node = "node " + std::to_string(conv) + " (SSM_CONV 'conv')";
    for (const auto& [seq_of, slots, problem] :
         {std::tuple<std::vector<int32_t>, std::vector<int32_t>, std::string>{{0, 1, 0}, {0, 3}, "state slot 3 of sequence row 1 is outside [0, 3)"},
          std::tuple<std::vector<int32_t>, std::vector<int32_t>, std::string>{{0, 1, 0}, {2, 2}, "state slot 2 is given to two sequence rows"},
          std::tuple<std::vector<int32_t>, std::vector<int32_t>, std::string>{{0, 2, 0}, {0, 1}, "token 1 belongs to sequence row 2, outside [0, 2)"}}) {
        const std::string m = execute({{seq_in, seq_of}, {slots_in, slots}});
        EXPECT_NE(m.find(node + ": " + problem), std::string::npos) << m;
        EXPECT_EQ(m.find('\n'), std::string::npos) << m;
        expect_identical(read_leaf(*this, st), state, "state after '" + problem + "'");
    }
    ASSERT_EQ(execute({{seq_in, {0, 1, 0}}, {slots_in, {2, 0}}}), "");
    EXPECT_NE(read_leaf(*this, st), state);
}

// ---- The vulkan backend's fast precision (docs/vulkan.md) ----

// Fast precision sums in its own order, in float, with activations left unrounded: it is held to the float math
// of the stored weights, within what float summation of k terms can lose, a bound in units of the terms' sizes.
class VulkanFast : public ::testing::Test, public Instance {
protected:
    void SetUp() override {
        const BackendPlugin* vulkan = find_backend("vulkan");
        if (vulkan == nullptr) GTEST_SKIP() << "the vulkan backend is not built";
        const std::string opened = open_with(vulkan->iface, {{"precision", "fast"}});
        if (opened.find("needs subgroup shuffles") != std::string::npos || opened.find("no Vulkan") != std::string::npos)
            GTEST_SKIP() << opened;
        ASSERT_EQ(opened, "");
    }
};

// |got - want| <= 1e-5 of the sum of the terms' magnitudes (plus 1e-6, plus `slack`): float sums of a few
// thousand terms stay far inside, while a wrong element, scale or min moves a result by a whole term.
void expect_within_terms(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& terms,
                         const std::string& what, const std::vector<double>& slack = {}) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5 * terms[i] + 1e-6 + (slack.empty() ? 0.0 : slack[i])) << what << " element " << i;
}

// W x in double with the stored weights' values and the activations rounded as the reference rounds them for
// the weight type (Q8 blocks, Q8_K blocks, fp16, bf16; fast precision leaves Q8_K unrounded past 8 columns), and
// the sums of |w x|.
void float_product(const Weights& w, const std::vector<float>& x_in, int64_t n, std::vector<double>& want, std::vector<double>& terms) {
    const bool k_quant = w.type == CELLM_TYPE_Q4_K || w.type == CELLM_TYPE_Q5_K || w.type == CELLM_TYPE_Q6_K;
    std::vector<float> x = x_in;
    if (!k_quant || n <= 8)
        for (int64_t c = 0; c < n; ++c) cellm::blocks::round_activations(w.type, x.data() + c * w.k, x.data() + c * w.k, w.k);
    want.assign(static_cast<size_t>(w.m * n), 0.0);
    terms.assign(want.size(), 0.0);
    for (int64_t c = 0; c < n; ++c)
        for (int64_t r = 0; r < w.m; ++r)
            for (int64_t i = 0; i < w.k; ++i) {
                const double t = double(w.values[static_cast<size_t>(r * w.k + i)]) * x[static_cast<size_t>(c * w.k + i)];
                want[static_cast<size_t>(c * w.m + r)] += t;
                terms[static_cast<size_t>(c * w.m + r)] += std::fabs(t);
            }
}

// Decode shapes (1 to 8 columns, matvec_fast.comp) and prefill shapes (matmul_fast.comp, with tile remainders),
// every weight type.
TEST_F(VulkanFast, ProductsFollowTheFloatMath) {
    unsigned seed = 500;
    for (int64_t k : {256, 512}) {
        std::vector<MatmulCase> cases;
        for (cellm_dtype type : every_weight_type)
            for (int64_t n : {1, 3, 8, 33, 70}) cases.push_back({type, k, 37, n, seed += 2});
        // Long outputs, such as the logits, give each group of invocations several rows.
        for (int64_t n : {1, 2}) cases.push_back({CELLM_TYPE_Q8_0, 64, 16411, n, seed += 2});
        clear_graph();
        std::vector<int32_t> outputs;
        for (const MatmulCase& c : cases) outputs.push_back(c.add_to(*this));
        ASSERT_EQ(prepare(outputs), "");
        ASSERT_EQ(execute({}), "");
        for (size_t i = 0; i < cases.size(); ++i) {
            SCOPED_TRACE(cases[i].label());
            std::vector<double> want, terms;
            const Weights w = cases[i].weights();
            const std::vector<float> x = cases[i].x();
            float_product(w, x, cases[i].n, want, terms);
            // The device's float division may put x * 127 / amax on the other side of a half from the reference's
            // and move one activation code by one: a step of amax / 127 times one weight.
            std::vector<double> flip(want.size());
            double w_max = 0, x_max = 0;
            for (float v : w.values) w_max = std::max(w_max, double(std::fabs(v)));
            for (float v : x) x_max = std::max(x_max, double(std::fabs(v)));
            std::fill(flip.begin(), flip.end(), w_max * x_max / 127.0);
            expect_within_terms(results[i], want, terms, "matmul", flip);
        }
    }
}

// A transformer block's products as fast precision folds them: an RMS_NORM read by three products (Q, K, V) and
// by a gate and up pair whose GLU becomes one dispatch, a down product with its residual ADD, for decode and a
// small prefill, SwiGLU and GEGLU.
TEST_F(VulkanFast, FoldedNormGluAndResidualFollowTheFloatMath) {
    const int64_t d = 512, ff = 256, qd = 128;
    const float eps = 1e-5f;
    unsigned seed = 700;
    for (int64_t n : {1, 2, 20})
        for (int32_t act : {0, 1}) {
            SCOPED_TRACE("n " + std::to_string(n) + ", act " + std::to_string(act));
            clear_graph();
            const std::vector<float> x = random_floats(static_cast<size_t>(d * n), seed++, 2.0f);
            const std::vector<float> nw = random_floats(static_cast<size_t>(d), seed++);
            const Weights wq = make_weights(CELLM_TYPE_Q4_1, d, qd, seed++), wg = make_weights(CELLM_TYPE_Q8_0, d, ff, seed++),
                          wu = make_weights(CELLM_TYPE_Q8_0, d, ff, seed++), wd = make_weights(CELLM_TYPE_Q4_K, ff, d, seed++);
            const int32_t xn = f32_weight(x, d, n), nwn = f32_weight(nw, d, 1);
            const int32_t normed = add(CELLM_OP_RMS_NORM, CELLM_TYPE_F32, {d, n}, {xn, nwn}, {}, {eps});
            const int32_t q = add(CELLM_OP_MATMUL, CELLM_TYPE_F32, {qd, n}, {weight(wq), normed});
            const int32_t k = add(CELLM_OP_MATMUL, CELLM_TYPE_F32, {qd, n}, {weight(wq), normed});
            const int32_t g = add(CELLM_OP_MATMUL, CELLM_TYPE_F32, {ff, n}, {weight(wg), normed});
            const int32_t u = add(CELLM_OP_MATMUL, CELLM_TYPE_F32, {ff, n}, {weight(wu), normed});
            const int32_t glu = add(CELLM_OP_GLU, CELLM_TYPE_F32, {ff, n}, {g, u}, {act});
            const int32_t down = add(CELLM_OP_MATMUL, CELLM_TYPE_F32, {d, n}, {weight(wd), glu});
            const int32_t sum = add(CELLM_OP_ADD, CELLM_TYPE_F32, {d, n}, {xn, down});
            ASSERT_EQ(prepare({q, k, sum}), "");
            ASSERT_EQ(execute({}), "");

            std::vector<float> y(x.size());
            for (int64_t c = 0; c < n; ++c) {
                double ss = 0;
                for (int64_t i = 0; i < d; ++i) ss += double(x[size_t(c * d + i)]) * x[size_t(c * d + i)];
                const double inv = 1.0 / std::sqrt(ss / double(d) + eps);
                for (int64_t i = 0; i < d; ++i) y[size_t(c * d + i)] = float(x[size_t(c * d + i)] * inv * nw[size_t(i)]);
            }
            std::vector<double> want, terms, gate, gate_terms, up, up_terms;
            float_product(wq, y, n, want, terms);
            expect_within_terms(results[0], want, terms, "q");
            expect_within_terms(results[1], want, terms, "k");
            float_product(wg, y, n, gate, gate_terms);
            float_product(wu, y, n, up, up_terms);
            std::vector<float> h(gate.size());
            for (size_t i = 0; i < h.size(); ++i) {
                const double z = gate[i];
                const double a = act == 0 ? z / (1 + std::exp(-z))
                                          : 0.5 * z * (1 + std::tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)));
                h[i] = float(a * up[i]);
            }
            float_product(wd, h, n, want, terms);
            for (size_t i = 0; i < want.size(); ++i) {
                want[i] += x[i];
                terms[i] += std::fabs(x[i]);
            }
            // The GLU's inputs carry their own float error into the down product: allow a term's worth of slack
            // at 1e-4 for them, still far below a wrong element.
            for (size_t i = 0; i < want.size(); ++i) terms[i] *= 10;
            expect_within_terms(results[2], want, terms, "down + residual");
        }
}

// Paged causal attention against the softmax in double over the pools' values: decode steps, whose keys are split
// into chunks and merged (flash-decoding), and a prefill batch of two sequences; head_dim 64, 128 and 256; F16 and
// F32 pools; GQA, a sliding window and a soft-cap.
// The vision encoder's float ops in fast precision, which runs their exact kernels' ".f32" variants: LAYER_NORM
// sums a tree of floats (mean, then the squares about it), SELF_ATTENTION the reference's order with the device's
// exp and division. Both within the bound BackendOps holds every backend to against the double math (1e-5
// relative), on rows of 768 around means far from zero and on groups longer than the shared-memory cache.
TEST_F(VulkanFast, VisionOpsFollowTheDoubleMath) {
    const int64_t n = 768, rows = 24;
    const float eps = 1e-6f;
    std::vector<float> x = random_floats(size_t(n * rows), 40, 2.0f);
    for (size_t i = 0; i < x.size(); ++i) x[i] += float(i / size_t(n)) * 4.0f - 40.0f;  // row r around 4r - 40
    const std::vector<float> w = random_floats(size_t(n), 41, 1.5f), b = random_floats(size_t(n), 42);
    clear_graph();
    const int32_t xn = f32_weight(x, n, rows), wn = f32_weight(w, n, 1), bn = f32_weight(b, n, 1);
    const int32_t norm = add(CELLM_OP_LAYER_NORM, CELLM_TYPE_F32, {n, rows}, {xn, wn, bn}, {}, {eps});
    ASSERT_EQ(prepare({norm}), "");
    ASSERT_EQ(execute({}), "");
    expect_near_all(results[0], layer_norm_reference(x, n, &w, &b, eps), 1e-5f, "layer norm");

    for (const auto& [n_head, n_kv, hd, group, n_tokens] : {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{4, 2, 64, 100, 200},
                                                             std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{2, 1, 21, 2100, 2100}}) {
        SCOPED_TRACE("group of " + std::to_string(group));
        const float scale = 1.0f / std::sqrt(float(hd));
        const std::vector<float> q = random_floats(size_t(hd * n_head * n_tokens), 45, 2.0f);
        const std::vector<float> k = random_floats(size_t(hd * n_kv * n_tokens), 46, 2.0f);
        const std::vector<float> v = random_floats(size_t(hd * n_kv * n_tokens), 47);
        clear_graph();
        const auto heads = [&](const std::vector<float>& data, int64_t count) {
            return add(CELLM_OP_RESHAPE, CELLM_TYPE_F32, {hd, count, n_tokens}, {f32_weight(data, hd * count, n_tokens)});
        };
        const int32_t qn = heads(q, n_head), kn = heads(k, n_kv), vn = heads(v, n_kv);
        const int32_t at = add(CELLM_OP_SELF_ATTENTION, CELLM_TYPE_F32, {hd * n_head, n_tokens}, {qn, kn, vn},
                               {int32_t(n_head), int32_t(n_kv), int32_t(hd), int32_t(group)}, {scale});
        ASSERT_EQ(prepare({at}), "");
        ASSERT_EQ(execute({}), "");
        expect_near_all(results[0], self_attention_reference(q, k, v, n_head, n_kv, hd, group, n_tokens, scale), 1e-5f,
                        "self attention");
    }
}

// The recurrent ops in fast precision, their exact kernels' ".f32" variants (the device's exp, log and division):
// SIGMOID and SOFTPLUS within 1e-5 relative of the double math, DELTA_NET's outputs and state within 1e-5 relative of
// the reference's order.
TEST_F(VulkanFast, RecurrentOpsFollowTheMath) {
    const std::vector<float> x = random_floats(4096, 74, 40.0f);
    clear_graph();
    const int32_t xn = f32_weight(x, 16, 256);
    const int32_t sg = add(CELLM_OP_SIGMOID, CELLM_TYPE_F32, {16, 256}, {xn});
    const int32_t sp = add(CELLM_OP_SOFTPLUS, CELLM_TYPE_F32, {16, 256}, {xn});
    ASSERT_EQ(prepare({sg, sp}), "");
    ASSERT_EQ(execute({}), "");
    for (size_t i = 0; i < x.size(); ++i) {
        const double e = std::exp(double(x[i])), sigmoid = 1.0 / (1.0 + 1.0 / e), softplus = x[i] > 20.0f ? x[i] : std::log1p(e);
        ASSERT_NEAR(results[0][i], sigmoid, 1e-5 * sigmoid + 1e-30) << "sigmoid of " << x[i];
        ASSERT_NEAR(results[1][i], softplus, 1e-5 * softplus + 1e-30) << "softplus of " << x[i];
    }

    const int64_t d_k = 16, n_k = 2, d_v = 12, n_v = 4, n_slots = 2, size = n_v * d_k * d_v;
    const std::vector<int32_t> seq_of{0, 1, 1, 0, 1, 0, 0}, slots{1, 0};
    const auto n_tokens = static_cast<int64_t>(seq_of.size());
    const std::vector<float> q = random_floats(size_t(d_k * n_k * n_tokens), 87, 0.3f), k = random_floats(q.size(), 88, 0.3f);
    const std::vector<float> v = random_floats(size_t(d_v * n_v * n_tokens), 89);
    std::vector<float> g = random_floats(size_t(n_v * n_tokens), 93, 1.5f), beta = random_floats(g.size(), 94, 0.5f);
    for (float& y : g) y = y - 1.5f;
    for (float& y : beta) y = y + 0.5f;
    const std::vector<float> state = random_floats(size_t(size * n_slots), 95, 0.5f);
    clear_graph();
    const auto heads = [&](const std::vector<float>& data, int64_t dim, int64_t count) {
        return add(CELLM_OP_RESHAPE, CELLM_TYPE_F32, {dim, count, n_tokens}, {f32_weight(data, dim * count, n_tokens)});
    };
    const int32_t qn = heads(q, d_k, n_k), kn = heads(k, d_k, n_k), vn = heads(v, d_v, n_v);
    const int32_t gn = f32_weight(g, n_v, n_tokens), bn = f32_weight(beta, n_v, n_tokens);
    const int32_t st = leaf(CELLM_OP_STATE, CELLM_TYPE_F32, size, n_slots, state.data());
    const int32_t seq_in = input(CELLM_INPUT_TOKEN_SEQ, {n_tokens}), slots_in = input(CELLM_INPUT_STATE_SLOTS, {2});
    const int32_t dn = add(CELLM_OP_DELTA_NET, CELLM_TYPE_F32, {d_v, n_v, n_tokens}, {qn, kn, vn, gn, bn, st, seq_in, slots_in}, {0});
    ASSERT_EQ(prepare({dn}), "");
    ASSERT_EQ(execute({{seq_in, seq_of}, {slots_in, slots}}), "");
    std::vector<float> advanced = state;
    expect_near_all(results[0], delta_net_in_order(q, k, v, g, beta, advanced, seq_of, slots, d_k, n_k, d_v, n_v, false),
                    1e-5f, "delta net outputs");
    expect_near_all(read_leaf(*this, st), advanced, 1e-5f, "delta net state");
}

TEST_F(VulkanFast, AttentionFollowsTheSoftmaxMath) {
    const int32_t n_head = 4, n_kv = 2, bs = 16, max_blocks = 8, n_blocks = 20, n_slots = n_blocks * bs;
    unsigned seed = 900;
    for (int32_t hd : {64, 128, 256})
        for (int mode = 0; mode < 3; ++mode)
            for (int variant = 0; variant < 2; ++variant) {
                const int32_t window = variant == 1 ? 40 : 0;
                const float scale = 1.0f / std::sqrt(float(hd)), cap = variant == 1 ? 3.0f : 0.0f;
                const cellm_dtype k_type = variant == 0 ? CELLM_TYPE_F16 : CELLM_TYPE_F32;
                const cellm_dtype v_type = variant == 0 ? CELLM_TYPE_F32 : CELLM_TYPE_F16;
                SCOPED_TRACE("head_dim " + std::to_string(hd) + ", mode " + std::to_string(mode) + ", variant " + std::to_string(variant));
                clear_graph();
                const int32_t kv_dim = n_kv * hd;
                std::vector<int32_t> table(size_t(2) * max_blocks);
                for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t((i * 7 + 3) % n_blocks);
                auto slot_of = [&](int r, int j) { return table[size_t(r * max_blocks + j / bs)] * bs + j % bs; };
                // Two sequences. Mode 0, decode: one token each at positions 100 and 37. Mode 1, several sessions'
                // decode (a workgroup per token too): 6 tokens each at 95..100 and 32..37. Mode 2, prefill (past 64
                // tokens, a workgroup per head and 16 tokens, keys in two chunks): 136 tokens, 120 of sequence 0
                // and 16 of sequence 1, so that one workgroup's rows take two turns.
                std::vector<int32_t> seq, pos;
                if (mode == 0) {
                    seq = {0, 1};
                    pos = {100, 37};
                } else if (mode == 1) {
                    for (int32_t p = 0; p < 6; ++p) {
                        seq.insert(seq.end(), {0, 1});
                        pos.insert(pos.end(), {95 + p, 32 + p});
                    }
                } else {
                    for (int32_t p = 0; p < 120; ++p) {
                        seq.push_back(0);
                        pos.push_back(p);
                    }
                    for (int32_t p = 22; p < 38; ++p) {
                        seq.push_back(1);
                        pos.push_back(p);
                    }
                }
                const auto nt = static_cast<int32_t>(seq.size());
                // Pool contents as stored (the values the reference reads), random.
                const std::vector<float> k_all = random_floats(size_t(n_slots) * kv_dim, seed++, 2.0f);
                const std::vector<float> v_all = random_floats(size_t(n_slots) * kv_dim, seed++);
                std::vector<uint16_t> k_half(k_all.size()), v_half(v_all.size());
                std::vector<float> k_ref(k_all), v_ref(v_all);
                for (size_t i = 0; i < k_all.size(); ++i) {
                    k_half[i] = cellm::blocks::fp32_to_fp16(k_all[i]);
                    v_half[i] = cellm::blocks::fp32_to_fp16(v_all[i]);
                    if (k_type == CELLM_TYPE_F16) k_ref[i] = cellm::blocks::fp16_to_fp32(k_half[i]);
                    if (v_type == CELLM_TYPE_F16) v_ref[i] = cellm::blocks::fp16_to_fp32(v_half[i]);
                }
                const int32_t kc = leaf(CELLM_OP_KV_CACHE, k_type, kv_dim, n_slots,
                                        k_type == CELLM_TYPE_F16 ? static_cast<const void*>(k_half.data()) : k_all.data());
                const int32_t vc = leaf(CELLM_OP_KV_CACHE, v_type, kv_dim, n_slots,
                                        v_type == CELLM_TYPE_F16 ? static_cast<const void*>(v_half.data()) : v_all.data());
                const std::vector<float> q = random_floats(size_t(nt) * n_head * hd, seed++, 2.0f);
                const int32_t qn = f32_weight(q, hd * n_head, nt);
                const int32_t qr = add(CELLM_OP_RESHAPE, CELLM_TYPE_F32, {hd, n_head, nt}, {qn});
                const int32_t tb = input(CELLM_INPUT_BLOCK_TABLE, {max_blocks, 2});
                const int32_t sq = input(CELLM_INPUT_TOKEN_SEQ, {nt});
                const int32_t ps = input(CELLM_INPUT_POSITIONS, {nt});
                const int32_t at = add(CELLM_OP_ATTENTION, CELLM_TYPE_F32, {hd * n_head, nt}, {qr, kc, vc, tb, sq, ps},
                                       {n_head, n_kv, hd, bs, window}, {scale, cap});
                ASSERT_EQ(prepare({at}), "");
                ASSERT_EQ(execute({{tb, table}, {sq, seq}, {ps, pos}}), "");

                std::vector<double> want(size_t(nt) * n_head * hd, 0.0), terms(want.size(), 0.0);
                for (int t = 0; t < nt; ++t)
                    for (int h = 0; h < n_head; ++h) {
                        const int kvh = h / (n_head / n_kv);
                        std::vector<double> w;
                        std::vector<int> js;
                        for (int j = window > 0 ? std::max(0, pos[size_t(t)] - window + 1) : 0; j <= pos[size_t(t)]; ++j) {
                            double s = 0;
                            for (int dd = 0; dd < hd; ++dd) {
                                // q meets an F16 key pool rounded to fp16, as in llama.cpp and the reference.
                                float qv = q[size_t((t * n_head + h) * hd + dd)];
                                if (k_type == CELLM_TYPE_F16) qv = cellm::blocks::fp16_to_fp32(cellm::blocks::fp32_to_fp16(qv));
                                s += double(qv) * k_ref[size_t(slot_of(seq[size_t(t)], j)) * kv_dim + kvh * hd + dd];
                            }
                            s *= scale;
                            if (cap > 0) s = cap * std::tanh(s / cap);
                            w.push_back(s);
                            js.push_back(j);
                        }
                        double mx = *std::max_element(w.begin(), w.end()), sum = 0;
                        for (double& x : w) sum += x = std::exp(x - mx);
                        for (size_t i = 0; i < js.size(); ++i)
                            for (int dd = 0; dd < hd; ++dd) {
                                const double term = w[i] / sum * v_ref[size_t(slot_of(seq[size_t(t)], js[i])) * kv_dim + kvh * hd + dd];
                                want[size_t((t * n_head + h) * hd + dd)] += term;
                                terms[size_t((t * n_head + h) * hd + dd)] += std::fabs(term);
                            }
                    }
                // Scores pass through exp: their float error (a few ULP of a score of size ~|q||k| scale) is allowed
                // for as 1e-4 of the weighted values' magnitudes.
                for (double& t : terms) t *= 10;
                expect_within_terms(results[0], want, terms, "attention");
            }
}

}  // namespace
