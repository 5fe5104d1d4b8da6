// SSM_CONV, DELTA_NET, SIGMOID and SOFTPLUS (graph.h, ABI 1.2) on every backend through its C ABI: against
// naive loops over each sequence's tokens, a prompt split over steps against one step, sequences interleaved in a
// batch, and the graph checks that turn a malformed node into an error instead of an out-of-bounds access.
#include "plugin/backend.h"
#include "plugin/host_api.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace cellm::testing {
namespace {

std::vector<float> random_floats(size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
}

std::string message(cellm_status* s) {
    if (s == nullptr) return "";
    std::string m = host_api()->status_message(s);
    host_api()->status_free(s);
    return m;
}

// One graph on one backend instance: nodes as graph.h spells them, F32 leaves in buffers of their own.
class Graph {
public:
    explicit Graph(const std::string& backend) {
        const Plugin* plugin = registry().find(CELLM_PLUGIN_BACKEND, backend);
        if (plugin == nullptr) throw std::runtime_error("backend '" + backend + "' was not built");
        backend_ = std::make_unique<Backend>(*plugin, OptionList{});
    }
    ~Graph() {
        if (plan_ != nullptr) be().plan_free(backend_->handle(), plan_);
    }

    int32_t add(cellm_op op, std::initializer_list<int64_t> ne, std::initializer_list<int32_t> src = {},
                std::initializer_list<int32_t> ip = {}) {
        cellm_node n{};
        n.op = op;
        n.type = CELLM_TYPE_F32;
        size_t d = 0;
        for (int64_t v : ne) n.ne[d++] = v;
        for (; d < 4; ++d) n.ne[d] = 1;
        std::fill(std::begin(n.src), std::end(n.src), -1);
        std::copy(src.begin(), src.end(), n.src);
        std::copy(ip.begin(), ip.end(), n.iparams);
        nodes.push_back(n);
        return static_cast<int32_t>(nodes.size() - 1);
    }
    int32_t input(cellm_input_kind kind, int64_t n) {
        const int32_t i = add(CELLM_OP_INPUT, {n}, {}, {kind});
        nodes[static_cast<size_t>(i)].type = CELLM_TYPE_I32;
        return i;
    }
    // An F32 leaf [ne0, ne1] holding `data` (a WEIGHT, or a writable STATE).
    int32_t leaf(cellm_op op, int64_t ne0, int64_t ne1, const std::vector<float>& data) {
        const uint64_t bytes = static_cast<uint64_t>(ne0 * ne1) * sizeof(float);
        buffers_.push_back(DeviceBuffer::allocate(*backend_, bytes, CELLM_BUFFER_KV_CACHE));
        EXPECT_EQ(message(be().buffer_write(backend_->handle(), buffers_.back()->get(), 0, data.data(), bytes)), "");
        const int32_t i = add(op, {ne0, ne1});
        cellm_tensor_desc& t = nodes[static_cast<size_t>(i)].tensor;
        t.struct_size = sizeof t;
        t.type = CELLM_TYPE_F32;
        t.n_dims = 2;
        t.ne[0] = ne0;
        t.ne[1] = ne1;
        t.ne[2] = t.ne[3] = 1;
        t.nb[0] = sizeof(float);
        t.nb[1] = static_cast<int64_t>(ne0 * sizeof(float));
        t.nb[2] = t.nb[3] = t.nb[1] * ne1;
        t.buffer = buffers_.back()->get();
        leaf_buffers_.emplace_back(i, buffers_.back().get());
        return i;
    }
    std::vector<float> read_leaf(int32_t node) const {
        for (const auto& [i, buffer] : leaf_buffers_) {
            if (i != node) continue;
            std::vector<float> out(buffer->size() / sizeof(float));
            EXPECT_EQ(message(be().buffer_read(backend_->handle(), buffer->get(), 0, out.data(), buffer->size())), "");
            return out;
        }
        return {};
    }

    std::string prepare(std::vector<int32_t> outputs) {
        if (plan_ != nullptr) be().plan_free(backend_->handle(), plan_);
        plan_ = nullptr;
        outputs_ = std::move(outputs);
        const cellm_graph g{sizeof(cellm_graph), sizeof(cellm_node), static_cast<int32_t>(nodes.size()), nodes.data(),
                            static_cast<int32_t>(outputs_.size()), outputs_.data()};
        return message(be().graph_prepare(backend_->handle(), &g, &plan_));
    }
    // Runs the prepared plan with I32 inputs; `results` gets each output's values.
    std::string run(const std::vector<std::pair<int32_t, std::vector<int32_t>>>& inputs) {
        std::vector<cellm_input_binding> in;
        for (const auto& [node, data] : inputs) in.push_back({node, data.data(), data.size() * sizeof(int32_t)});
        results.assign(outputs_.size(), {});
        std::vector<cellm_output_binding> out;
        for (size_t k = 0; k < outputs_.size(); ++k) {
            results[k].resize(static_cast<size_t>(cellm_node_nelements(&nodes[static_cast<size_t>(outputs_[k])])));
            out.push_back({outputs_[k], results[k].data(), results[k].size() * sizeof(float)});
        }
        const cellm_execute_args args{sizeof args, in.data(), in.size(), sizeof(cellm_input_binding),
                                      out.data(), out.size(), sizeof(cellm_output_binding)};
        return message(be().graph_execute(backend_->handle(), plan_, &args));
    }

    std::vector<cellm_node> nodes;
    std::vector<std::vector<float>> results;

private:
    const cellm_backend_iface& be() const { return backend_->iface(); }

    std::unique_ptr<Backend> backend_;
    std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
    std::vector<std::pair<int32_t, const DeviceBuffer*>> leaf_buffers_;
    std::vector<int32_t> outputs_;
    cellm_plan* plan_ = nullptr;
};

// ---- The gated delta rule ----

struct DeltaShape {
    int64_t d_k = 4, n_k = 2, d_v = 3, n_v = 4, n_slots = 3;
    int64_t state_size() const { return n_v * d_k * d_v; }
};

struct DeltaInputs {
    std::vector<float> q, k, v, g, beta, state;
    std::vector<int32_t> seq_of, slots;  // token -> sequence row, row -> state slot
};

DeltaInputs delta_inputs(const DeltaShape& s, int64_t n_tokens, std::vector<int32_t> seq_of, std::vector<int32_t> slots,
                         unsigned seed) {
    DeltaInputs in;
    in.q = random_floats(static_cast<size_t>(s.d_k * s.n_k * n_tokens), seed);
    in.k = random_floats(in.q.size(), seed + 1);
    in.v = random_floats(static_cast<size_t>(s.d_v * s.n_v * n_tokens), seed + 2);
    in.g = random_floats(static_cast<size_t>(s.n_v * n_tokens), seed + 3, -2.0f, 0.0f);
    in.beta = random_floats(in.g.size(), seed + 4, 0.0f, 1.0f);
    in.state = random_floats(static_cast<size_t>(s.state_size() * s.n_slots), seed + 5, -0.5f, 0.5f);
    in.seq_of = std::move(seq_of);
    in.slots = std::move(slots);
    return in;
}

// The recurrence as transformers' torch_recurrent_gated_delta_rule writes it, one token at a time in double:
// returns the outputs and leaves `state` advanced.
std::vector<float> naive_delta_rule(const DeltaShape& s, const DeltaInputs& in, int32_t head_order, std::vector<float>& state) {
    const auto n_tokens = static_cast<int64_t>(in.seq_of.size());
    std::vector<float> out(static_cast<size_t>(s.d_v * s.n_v * n_tokens));
    for (int64_t t = 0; t < n_tokens; ++t) {
        const int64_t slot = in.slots[static_cast<size_t>(in.seq_of[static_cast<size_t>(t)])];
        for (int64_t h = 0; h < s.n_v; ++h) {
            const int64_t kh = head_order == 0 ? h / (s.n_v / s.n_k) : h % s.n_k;
            const auto at = [&](const std::vector<float>& x, int64_t dim, int64_t heads, int64_t head, int64_t i) {
                return static_cast<double>(x[static_cast<size_t>((t * heads + head) * dim + i)]);
            };
            float* S = state.data() + slot * s.state_size() + h * s.d_k * s.d_v;
            const double decay = std::exp(static_cast<double>(in.g[static_cast<size_t>(t * s.n_v + h)]));
            const double beta = in.beta[static_cast<size_t>(t * s.n_v + h)];
            std::vector<double> m(static_cast<size_t>(s.d_k * s.d_v));
            for (size_t i = 0; i < m.size(); ++i) m[i] = S[i] * decay;
            for (int64_t j = 0; j < s.d_v; ++j) {
                double kv_mem = 0;
                for (int64_t i = 0; i < s.d_k; ++i) kv_mem += m[static_cast<size_t>(i * s.d_v + j)] * at(in.k, s.d_k, s.n_k, kh, i);
                const double delta = (at(in.v, s.d_v, s.n_v, h, j) - kv_mem) * beta;
                for (int64_t i = 0; i < s.d_k; ++i) m[static_cast<size_t>(i * s.d_v + j)] += at(in.k, s.d_k, s.n_k, kh, i) * delta;
            }
            for (int64_t j = 0; j < s.d_v; ++j) {
                double o = 0;
                for (int64_t i = 0; i < s.d_k; ++i) o += m[static_cast<size_t>(i * s.d_v + j)] * at(in.q, s.d_k, s.n_k, kh, i);
                out[static_cast<size_t>((t * s.n_v + h) * s.d_v + j)] = static_cast<float>(o);
            }
            for (size_t i = 0; i < m.size(); ++i) S[i] = static_cast<float>(m[i]);
        }
    }
    return out;
}

// A DELTA_NET node over `n_tokens` tokens in `n_seqs` rows, its state leaf holding `in.state`.
struct DeltaGraph {
    int32_t q, k, v, g, beta, state, seq_of, slots, out;
};
DeltaGraph delta_graph(Graph& gr, const DeltaShape& s, const DeltaInputs& in, int64_t n_tokens, int64_t n_seqs,
                       int32_t head_order) {
    DeltaGraph d{};
    d.q = gr.leaf(CELLM_OP_WEIGHT, s.d_k * s.n_k, n_tokens, in.q);
    d.k = gr.leaf(CELLM_OP_WEIGHT, s.d_k * s.n_k, n_tokens, in.k);
    d.v = gr.leaf(CELLM_OP_WEIGHT, s.d_v * s.n_v, n_tokens, in.v);
    d.g = gr.leaf(CELLM_OP_WEIGHT, s.n_v, n_tokens, in.g);
    d.beta = gr.leaf(CELLM_OP_WEIGHT, s.n_v, n_tokens, in.beta);
    d.state = gr.leaf(CELLM_OP_STATE, s.state_size(), s.n_slots, in.state);
    d.seq_of = gr.input(CELLM_INPUT_TOKEN_SEQ, n_tokens);
    d.slots = gr.input(CELLM_INPUT_STATE_SLOTS, n_seqs);
    const int32_t q = gr.add(CELLM_OP_RESHAPE, {s.d_k, s.n_k, n_tokens}, {d.q});
    const int32_t k = gr.add(CELLM_OP_RESHAPE, {s.d_k, s.n_k, n_tokens}, {d.k});
    const int32_t v = gr.add(CELLM_OP_RESHAPE, {s.d_v, s.n_v, n_tokens}, {d.v});
    d.out = gr.add(CELLM_OP_DELTA_NET, {s.d_v, s.n_v, n_tokens}, {q, k, v, d.g, d.beta, d.state, d.seq_of, d.slots},
                   {head_order});
    return d;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << what << " element " << i;
}

class RecurrentOps : public ::testing::TestWithParam<std::string> {};

std::vector<std::string> backends() {
    std::vector<std::string> out;
    for (const Plugin* p : registry().plugins(CELLM_PLUGIN_BACKEND)) out.emplace_back(p->name());
    return out;
}

INSTANTIATE_TEST_SUITE_P(EveryBackend, RecurrentOps, ::testing::ValuesIn(backends()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST_P(RecurrentOps, DeltaNetFollowsTheRecurrenceTokenByToken) {
    const DeltaShape s;
    // Two sequences interleaved in one batch, in slots 2 and 0; slot 1 belongs to nobody in this step.
    const std::vector<int32_t> seq_of = {0, 1, 0, 0, 1, 0};
    for (int32_t head_order : {0, 1}) {
        const DeltaInputs in = delta_inputs(s, 6, seq_of, {2, 0}, 10);
        Graph gr(GetParam());
        const DeltaGraph d = delta_graph(gr, s, in, 6, 2, head_order);
        ASSERT_EQ(gr.prepare({d.out}), "");
        ASSERT_EQ(gr.run({{d.seq_of, in.seq_of}, {d.slots, in.slots}}), "");
        std::vector<float> state = in.state;
        const std::vector<float> want = naive_delta_rule(s, in, head_order, state);
        const std::string what = "head order " + std::to_string(head_order);
        expect_near(gr.results[0], want, 1e-5f, what + ": outputs");
        expect_near(gr.read_leaf(d.state), state, 1e-5f, what + ": states after the step");
    }
}

TEST_P(RecurrentOps, DeltaNetPromptInChunksEqualsOneStep) {
    const DeltaShape s;
    const int64_t n = 8;
    const DeltaInputs whole = delta_inputs(s, n, std::vector<int32_t>(n, 0), {1}, 20);
    Graph one(GetParam());
    const DeltaGraph d = delta_graph(one, s, whole, n, 1, 0);
    ASSERT_EQ(one.prepare({d.out}), "");
    ASSERT_EQ(one.run({{d.seq_of, whole.seq_of}, {d.slots, whole.slots}}), "");

    // The same tokens as steps of 3, 4 and 1, the state carried in the leaf between them.
    std::vector<float> state = whole.state, outputs;
    int64_t first = 0;
    for (int64_t len : {3, 4, 1}) {
        DeltaInputs part = whole;
        const auto cut = [&](const std::vector<float>& x, int64_t per_token) {
            return std::vector<float>(x.begin() + first * per_token, x.begin() + (first + len) * per_token);
        };
        part.q = cut(whole.q, s.d_k * s.n_k);
        part.k = cut(whole.k, s.d_k * s.n_k);
        part.v = cut(whole.v, s.d_v * s.n_v);
        part.g = cut(whole.g, s.n_v);
        part.beta = cut(whole.beta, s.n_v);
        part.state = state;
        part.seq_of.assign(static_cast<size_t>(len), 0);
        Graph step(GetParam());
        const DeltaGraph p = delta_graph(step, s, part, len, 1, 0);
        ASSERT_EQ(step.prepare({p.out}), "");
        ASSERT_EQ(step.run({{p.seq_of, part.seq_of}, {p.slots, part.slots}}), "");
        outputs.insert(outputs.end(), step.results[0].begin(), step.results[0].end());
        state = step.read_leaf(p.state);
        first += len;
    }
    EXPECT_EQ(outputs, one.results[0]);
    EXPECT_EQ(state, one.read_leaf(d.state));
}

// ---- The causal convolution ----

TEST_P(RecurrentOps, SsmConvSlidesOverEachSequenceWithItsSavedInputs) {
    const int64_t channels = 5, kernel = 4, n_tokens = 7, n_slots = 3;
    const std::vector<float> x = random_floats(static_cast<size_t>(channels * n_tokens), 30);
    const std::vector<float> w = random_floats(static_cast<size_t>(kernel * channels), 31);
    const std::vector<float> saved = random_floats(static_cast<size_t>((kernel - 1) * channels * n_slots), 32);
    const std::vector<int32_t> seq_of = {1, 0, 1, 1, 0, 0, 1}, slots = {0, 2};

    Graph gr(GetParam());
    const int32_t xn = gr.leaf(CELLM_OP_WEIGHT, channels, n_tokens, x);
    const int32_t wn = gr.leaf(CELLM_OP_WEIGHT, kernel, channels, w);
    const int32_t st = gr.leaf(CELLM_OP_STATE, (kernel - 1) * channels, n_slots, saved);
    const int32_t sq = gr.input(CELLM_INPUT_TOKEN_SEQ, n_tokens);
    const int32_t sl = gr.input(CELLM_INPUT_STATE_SLOTS, 2);
    const int32_t out = gr.add(CELLM_OP_SSM_CONV, {channels, n_tokens}, {xn, wn, st, sq, sl});
    ASSERT_EQ(gr.prepare({out}), "");
    ASSERT_EQ(gr.run({{sq, seq_of}, {sl, slots}}), "");

    // Each sequence's inputs in order, after the kernel - 1 its slot saved.
    std::vector<float> want(x.size()), state = saved;
    for (int32_t r = 0; r < 2; ++r) {
        std::vector<std::vector<float>> history;
        float* slot = state.data() + slots[static_cast<size_t>(r)] * (kernel - 1) * channels;
        for (int64_t j = 0; j < kernel - 1; ++j) history.emplace_back(slot + j * channels, slot + (j + 1) * channels);
        for (int64_t t = 0; t < n_tokens; ++t) {
            if (seq_of[static_cast<size_t>(t)] != r) continue;
            history.emplace_back(x.begin() + t * channels, x.begin() + (t + 1) * channels);
            for (int64_t c = 0; c < channels; ++c) {
                double sum = 0;
                for (int64_t j = 0; j < kernel; ++j)
                    sum += double{w[static_cast<size_t>(c * kernel + j)]} * history[history.size() - static_cast<size_t>(kernel - j)][static_cast<size_t>(c)];
                want[static_cast<size_t>(t * channels + c)] = static_cast<float>(sum);
            }
        }
        for (int64_t j = 0; j < kernel - 1; ++j) {
            const std::vector<float>& row = history[history.size() - static_cast<size_t>(kernel - 1 - j)];
            std::copy(row.begin(), row.end(), slot + j * channels);
        }
    }
    expect_near(gr.results[0], want, 1e-5f, "outputs");
    EXPECT_EQ(gr.read_leaf(st), state);
}

TEST_P(RecurrentOps, SigmoidAndSoftplus) {
    const std::vector<float> x = {-30.0f, -2.0f, -0.5f, 0.0f, 0.5f, 3.0f, 19.0f, 25.0f};
    Graph gr(GetParam());
    const int32_t xn = gr.leaf(CELLM_OP_WEIGHT, 8, 1, x);
    const int32_t sg = gr.add(CELLM_OP_SIGMOID, {8}, {xn});
    const int32_t sp = gr.add(CELLM_OP_SOFTPLUS, {8}, {xn});
    ASSERT_EQ(gr.prepare({sg, sp}), "");
    ASSERT_EQ(gr.run({}), "");
    for (size_t i = 0; i < x.size(); ++i) {
        EXPECT_NEAR(gr.results[0][i], 1.0 / (1.0 + std::exp(-double{x[i]})), 1e-6) << x[i];
        EXPECT_NEAR(gr.results[1][i], x[i] > 20.0f ? x[i] : std::log1p(std::exp(double{x[i]})), 1e-5) << x[i];
    }
}

// Big enough that openblas splits DELTA_NET by value head and SSM_CONV by channel across its threads: every
// part must give the reference's values and states bit for bit.
TEST(RecurrentOpsOpenblas, SplitWorkMatchesScalarBitForBit) {
    const DeltaShape s{8, 4, 8, 16, 3};
    const int64_t n = 160, channels = 128, kernel = 4;
    std::vector<int32_t> seq_of(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) seq_of[static_cast<size_t>(t)] = t < n / 2 ? 0 : 1;
    const DeltaInputs in = delta_inputs(s, n, seq_of, {2, 0}, 60);
    const std::vector<float> x = random_floats(static_cast<size_t>(channels * n), 61);
    const std::vector<float> w = random_floats(static_cast<size_t>(kernel * channels), 62);
    const std::vector<float> saved = random_floats(static_cast<size_t>((kernel - 1) * channels * 3), 63);
    std::vector<std::vector<float>> results[2], states[2];
    const char* backends[] = {"scalar", "openblas"};
    for (int b = 0; b < 2; ++b) {
        Graph gr(backends[b]);
        const DeltaGraph d = delta_graph(gr, s, in, n, 2, 0);
        const int32_t xn = gr.leaf(CELLM_OP_WEIGHT, channels, n, x);
        const int32_t wn = gr.leaf(CELLM_OP_WEIGHT, kernel, channels, w);
        const int32_t st = gr.leaf(CELLM_OP_STATE, (kernel - 1) * channels, 3, saved);
        const int32_t conv = gr.add(CELLM_OP_SSM_CONV, {channels, n}, {xn, wn, st, d.seq_of, d.slots});
        ASSERT_EQ(gr.prepare({d.out, conv}), "");
        ASSERT_EQ(gr.run({{d.seq_of, in.seq_of}, {d.slots, in.slots}}), "");
        results[b] = gr.results;
        states[b] = {gr.read_leaf(d.state), gr.read_leaf(st)};
    }
    EXPECT_EQ(results[1], results[0]);
    EXPECT_EQ(states[1], states[0]);
}

// ---- Malformed graphs and step inputs ----

// A DELTA_NET graph with one thing broken by `spoil`; its prepare error must contain `expected`.
void expect_delta_error(const std::string& backend, const std::function<void(Graph&, DeltaGraph&)>& spoil,
                        const std::string& expected) {
    const DeltaShape s;
    const DeltaInputs in = delta_inputs(s, 2, {0, 0}, {0}, 40);
    Graph gr(backend);
    DeltaGraph d = delta_graph(gr, s, in, 2, 1, 0);
    spoil(gr, d);
    const std::string m = gr.prepare({d.out});
    EXPECT_NE(m.find("DELTA_NET"), std::string::npos) << m;
    EXPECT_NE(m.find(expected), std::string::npos) << m;
}

TEST_P(RecurrentOps, MalformedDeltaNetIsAnError) {
    const auto node = [](Graph& g, int32_t i) -> cellm_node& { return g.nodes[static_cast<size_t>(i)]; };
    expect_delta_error(GetParam(), [&](Graph& g, DeltaGraph& d) { node(g, d.out).iparams[0] = 2; }, "head order");
    expect_delta_error(GetParam(), [&](Graph& g, DeltaGraph& d) { node(g, d.out).src[5] = d.g; }, "must be a STATE leaf");
    expect_delta_error(GetParam(), [&](Graph& g, DeltaGraph& d) { node(g, d.out).src[4] = d.v; }, "is not [n_v_heads, n_tokens]");
    expect_delta_error(GetParam(), [&](Graph& g, DeltaGraph& d) {
        // A state one float short per slot: the kernel would read past each slot.
        cellm_node& st = node(g, d.state);
        st.ne[0] -= 1;
        st.tensor.ne[0] -= 1;
        st.tensor.nb[1] -= sizeof(float);
        st.tensor.nb[2] = st.tensor.nb[3] = st.tensor.nb[1] * st.ne[1];
    }, "floats per slot");
    expect_delta_error(GetParam(), [&](Graph& g, DeltaGraph& d) {
        // Three value heads for two key heads.
        const int32_t v = node(g, d.out).src[2];
        node(g, v).ne[0] = 4;
        node(g, v).ne[1] = 3;
        node(g, d.out).ne[0] = 4;
        node(g, d.out).ne[1] = 3;
    }, "not a multiple of key heads");
    expect_delta_error(GetParam(), [&](Graph& g, DeltaGraph& d) { node(g, d.out).src[7] = d.beta; }, "state slots");
}

TEST_P(RecurrentOps, MalformedSsmConvIsAnError) {
    Graph gr(GetParam());
    const int32_t x = gr.leaf(CELLM_OP_WEIGHT, 6, 2, std::vector<float>(12));
    const int32_t w = gr.leaf(CELLM_OP_WEIGHT, 4, 5, std::vector<float>(20));  // 5 channels, not 6
    const int32_t st = gr.leaf(CELLM_OP_STATE, 18, 1, std::vector<float>(18));
    const int32_t sq = gr.input(CELLM_INPUT_TOKEN_SEQ, 2);
    const int32_t sl = gr.input(CELLM_INPUT_STATE_SLOTS, 1);
    const int32_t out = gr.add(CELLM_OP_SSM_CONV, {6, 2}, {x, w, st, sq, sl});
    std::string m = gr.prepare({out});
    EXPECT_NE(m.find("SSM_CONV"), std::string::npos) << m;
    EXPECT_NE(m.find("weights shape"), std::string::npos) << m;
}

TEST_P(RecurrentOps, BadStateSlotsAreErrorsBeforeAnyWrite) {
    const DeltaShape s;
    const DeltaInputs in = delta_inputs(s, 3, {0, 1, 0}, {0, 1}, 50);
    Graph gr(GetParam());
    const DeltaGraph d = delta_graph(gr, s, in, 3, 2, 0);
    ASSERT_EQ(gr.prepare({d.out}), "");
    const std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> bad = {
        {{0, 1, 0}, {0, 3}},  // a slot past the state's 3
        {{0, 1, 0}, {2, 2}},  // two rows in one slot
        {{0, 2, 0}, {0, 1}},  // a token in a row the slot table lacks
    };
    for (const auto& [seq_of, slots] : bad) {
        const std::string m = gr.run({{d.seq_of, seq_of}, {d.slots, slots}});
        EXPECT_NE(m.find("DELTA_NET"), std::string::npos) << m;
        EXPECT_EQ(gr.read_leaf(d.state), in.state) << m;
    }
}

}  // namespace
}  // namespace cellm::testing
