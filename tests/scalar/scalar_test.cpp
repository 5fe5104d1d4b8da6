// The scalar backend through its C ABI: every op against straightforward reference code, plan reuse,
// and bad input that must come back as an error status.
#include "blocks.h"
#include "host_api.h"

#include <cellm/backend.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

namespace {

const cellm_backend_iface* load_iface() {
    static const cellm_backend_iface* iface = [] {
        void* lib = dlopen(CELLM_PLUGIN_DIR "/cellm-scalar.so", RTLD_NOW | RTLD_LOCAL);
        if (lib == nullptr) return static_cast<const cellm_backend_iface*>(nullptr);
        auto entry = reinterpret_cast<cellm_plugin_entry_fn>(dlsym(lib, CELLM_PLUGIN_ENTRY_SYMBOL));
        const cellm_plugin_desc* desc = entry != nullptr ? entry(cellm::host_api(), CELLM_ABI_MAJOR, CELLM_ABI_MINOR) : nullptr;
        return desc != nullptr ? static_cast<const cellm_backend_iface*>(desc->iface) : nullptr;
    }();
    return iface;
}

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

class Scalar : public ::testing::Test {
protected:
    void SetUp() override {
        be = load_iface();
        ASSERT_NE(be, nullptr) << "cannot load " CELLM_PLUGIN_DIR "/cellm-scalar.so: " << dlerror();
        ASSERT_EQ(message(be->create(nullptr, 0, &backend)), "");
    }
    void TearDown() override {
        if (plan != nullptr) be->plan_free(backend, plan);
        for (cellm_buffer* b : buffers) be->buffer_free(backend, b);
        if (backend != nullptr) be->destroy(backend);
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

    // A leaf whose data (already in `type`'s layout) is uploaded into a fresh buffer.
    int32_t leaf(cellm_op op, cellm_dtype type, int64_t ne0, int64_t ne1, const void* data) {
        const uint64_t bytes = cellm::blocks::row_bytes(type, ne0) * static_cast<uint64_t>(ne1);
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
        t.nb[1] = static_cast<int64_t>(cellm::blocks::row_bytes(type, ne0));
        t.buffer = buf;
        return i;
    }
    int32_t f32_weight(const std::vector<float>& v, int64_t ne0, int64_t ne1) {
        return leaf(CELLM_OP_WEIGHT, CELLM_TYPE_F32, ne0, ne1, v.data());
    }

    std::string prepare(std::vector<int32_t> outputs) {
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

    // Executes with I32 inputs; fills `results` (one vector per prepared output).
    std::string execute(const std::vector<std::pair<int32_t, std::vector<int32_t>>>& in) {
        std::vector<cellm_input_binding> ib;
        for (const auto& [node, data] : in) ib.push_back({node, data.data(), data.size() * 4});
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

TEST_F(Scalar, OptionsInfoAndCapabilities) {
    cellm_backend* other = nullptr;
    const cellm_option good{"threads", "2"};
    EXPECT_EQ(message(be->create(&good, 1, &other)), "");
    be->destroy(other);
    const cellm_option zero{"threads", "0"};
    EXPECT_NE(message(be->create(&zero, 1, &other)).find("threads"), std::string::npos);
    const cellm_option typo{"thread", "2"};
    EXPECT_NE(message(be->create(&typo, 1, &other)).find("'thread'"), std::string::npos);

    cellm_backend_info info{};
    info.struct_size = sizeof info;
    ASSERT_EQ(message(be->get_info(backend, &info)), "");
    EXPECT_STREQ(info.device_name, "cpu (scalar reference)");
    EXPECT_EQ(info.flags, CELLM_BACKEND_HOST_MEMORY);
    EXPECT_EQ(info.threads, 1);
    EXPECT_TRUE(be->supports_type(backend, CELLM_TYPE_Q4_1));
    EXPECT_FALSE(be->supports_type(backend, CELLM_TYPE_Q2_K));
    EXPECT_TRUE(be->supports_op(backend, CELLM_OP_KV_STORE, CELLM_TYPE_F16));
    EXPECT_TRUE(be->supports_op(backend, CELLM_OP_ATTENTION, CELLM_TYPE_F32));
    std::string line;
    be->describe([](void* user, const char* l) { *static_cast<std::string*>(user) = l; }, &line);
    EXPECT_EQ(line, "cpu: portable scalar reference");
}

TEST_F(Scalar, MatmulAndGetRowsForEveryWeightType) {
    const int64_t k = 256, m = 3, n = 2;
    const std::vector<float> x = random_floats(k * n, 1);
    for (cellm_dtype type : {CELLM_TYPE_F32, CELLM_TYPE_F16, CELLM_TYPE_BF16, CELLM_TYPE_Q8_0, CELLM_TYPE_Q4_0,
                             CELLM_TYPE_Q4_1, CELLM_TYPE_Q5_0, CELLM_TYPE_Q5_1, CELLM_TYPE_Q4_K, CELLM_TYPE_Q5_K,
                             CELLM_TYPE_Q6_K}) {
        SCOPED_TRACE("type " + std::to_string(type));
        nodes.clear();
        if (plan != nullptr) be->plan_free(backend, plan);
        plan = nullptr;
        std::vector<uint8_t> stored(cellm::blocks::row_bytes(type, k) * m);
        cellm::blocks::quantize_row(type, random_floats(k * m, 2).data(), stored.data(), k * m);
        std::vector<float> w(k * m);
        cellm::blocks::dequantize_row(type, stored.data(), w.data(), k * m);

        const int32_t wn = leaf(CELLM_OP_WEIGHT, type, k, m, stored.data());
        const int32_t xn = f32_weight(x, k, n);
        const int32_t mm = add(CELLM_OP_MATMUL, CELLM_TYPE_F32, {m, n}, {wn, xn});
        const int32_t ids = input(CELLM_INPUT_TOKENS, {2});
        const int32_t rows = add(CELLM_OP_GET_ROWS, CELLM_TYPE_F32, {k, 2}, {wn, ids});
        ASSERT_EQ(prepare({mm, rows}), "");
        ASSERT_EQ(execute({{ids, {2, 0}}}), "");

        // MATMUL's definition written out: the activations rounded as the weight type's dot product sees
        // them (ggml's Q8 blocks: codes x*127/amax, fp16 scale); Q4_1/Q5_1 add each block's min times the
        // Q8_1 block sum stored as fp16 rather than the exact sum of the rounded values.
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
                for (int64_t i = 0; i < k; ++i) s += double(w[r * k + i]) * xr[i];
                if (affine) {
                    const uint8_t* row = stored.data() + r * cellm::blocks::row_bytes(type, k);
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
        expect_near_all(results[0], want, 1e-5f, "matmul");
        std::vector<float> picked(w.begin() + 2 * k, w.end());
        picked.insert(picked.end(), w.begin(), w.begin() + k);
        EXPECT_EQ(results[1], picked);

        EXPECT_NE(execute({{ids, {3, 0}}}).find("row id 3"), std::string::npos);
        EXPECT_NE(execute({{ids, {0, -1}}}).find("row id -1"), std::string::npos);
    }
}

TEST_F(Scalar, ElementwiseOpsAndPlanReuse) {
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

TEST_F(Scalar, RopeBothModes) {
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
TEST_F(Scalar, PagedAttention) {
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

TEST_F(Scalar, GraphErrorsNameTheNode) {
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

TEST_F(Scalar, UnsupportedWeightType) {
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

TEST_F(Scalar, BuffersAreBoundsChecked) {
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

    cellm_buffer* wrapped = nullptr;
    ASSERT_EQ(message(be->buffer_wrap_host(backend, data, sizeof data, &wrapped)), "");
    buffers.push_back(wrapped);
    EXPECT_EQ(message(be->buffer_read(backend, wrapped, 4, back, 4)), "");
    EXPECT_EQ(std::memcmp(back, data + 4, 4), 0);
    EXPECT_NE(message(be->buffer_write(backend, wrapped, 0, data, 1)).find("read-only"), std::string::npos);
}

}  // namespace
