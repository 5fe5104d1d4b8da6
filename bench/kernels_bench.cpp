// Microbenchmarks of the CPU kernels where a step spends its time, at the shapes of the models cellm runs:
// MATMUL as the openblas backend runs it (and through SGEMM, the yardstick of the int8 tiles), paged attention
// over an F16 KV pool, RMS_NORM through the reference kernel, and GLU through the reference kernel and the
// openblas backend's fast activations. Decode matmuls report the weight bytes they stream per second
// (bytes_per_second, GiB/s), prefill matmuls their FLOP rate. Every benchmark measures wall time, since the
// thread pool's workers do most of the work.
#include "activations_fast.hpp"
#include "attention.hpp"
#include "blocks.h"
#include "kernels.hpp"
#include "matmul.hpp"
#include "memory.hpp"
#include "plan.hpp"
#include "reference_kernels.hpp"
#include "thread_pool.hpp"

#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace cellm;

// ---- Inputs ----

std::vector<float> random_floats(int64_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = u(rng);
    // A few large outliers, as real activations have: they set the scales of the Q8 blocks they fall in.
    for (size_t i = 0; i < v.size(); i += 97) v[i] *= 20.0f;
    return v;
}

// A node over storage the benchmark owns; sources unused (-1) until the caller sets them.
cpu::Node tensor(cellm_op op, cellm_dtype type, std::array<int64_t, 4> ne, void* data) {
    cpu::Node node;
    node.op = op;
    node.type = type;
    node.ne = ne;
    node.src.fill(-1);
    node.data = static_cast<std::byte*>(data);
    return node;
}

// An m x k weight matrix of one type, 64-byte aligned as the backend's buffers are.
struct Weights {
    cellm_dtype type = CELLM_TYPE_F32;
    int64_t k = 0, m = 0;
    uint64_t bytes = 0;
    cpu::AlignedBytes storage;
};

// The weight matrix of the benchmark being run. Benchmarks of one matrix are registered one after another, so
// keeping only the latest quantizes each matrix once without holding all of them (the Gemma head is 178 MB).
const Weights& weights(cellm_dtype type, int64_t k, int64_t m) {
    static Weights w;
    if (w.type == type && w.k == k && w.m == m) return w;
    const uint64_t row_bytes = blocks::row_bytes(type, k);
    w = Weights{type, k, m, row_bytes * static_cast<uint64_t>(m), cpu::AlignedBytes(row_bytes * static_cast<uint64_t>(m))};
    // At most 1024 distinct random rows, repeated: the kernels' speed does not depend on the values, and it
    // keeps quantizing the large output heads quick. Every row still has its own address, so all bytes stream.
    const int64_t distinct = std::min<int64_t>(m, 1024);
    blocks::quantize_row(type, random_floats(distinct * k, 1).data(), w.storage.data(), distinct * k);
    for (int64_t r = distinct; r < m; ++r)
        std::memcpy(w.storage.data() + static_cast<uint64_t>(r) * row_bytes,
                    w.storage.data() + static_cast<uint64_t>(r % distinct) * row_bytes, row_bytes);
    return w;
}

// ---- MATMUL ----

// 8 columns: one decode step of 8 sessions batched together.
constexpr int64_t decode_columns = 1, sessions_columns = 8, prefill_columns = 128;

// One weight tensor of a model: y (m) = W (m x k) x (k) per column.
struct MatmulShape {
    const char* tensor;
    int64_t k, m;
    std::vector<cellm_dtype> types;
    bool prefill;     // also with prefill_columns columns
    bool one_thread;  // decode also on one thread, to show how it scales
};

const std::vector<cellm_dtype> all_types{CELLM_TYPE_Q8_0, CELLM_TYPE_Q4_0, CELLM_TYPE_Q4_1, CELLM_TYPE_Q5_0,
                                         CELLM_TYPE_Q4_K, CELLM_TYPE_Q6_K, CELLM_TYPE_F16};

const std::vector<MatmulShape> matmul_shapes{
    {"smollm2.attn_q", 576, 576, all_types, true, false},
    {"smollm2.ffn_up", 576, 1536, all_types, true, true},
    {"smollm2.ffn_down", 1536, 576, all_types, true, false},
    {"smollm2.output", 576, 49152, all_types, true, true},
    {"gemma3.attn_q", 640, 1024, all_types, true, false},  // 4 heads x 256
    {"gemma3.ffn_up", 640, 2048, all_types, true, false},
    {"gemma3.ffn_down", 2048, 640, all_types, true, false},
    {"gemma3.output", 640, 262144, {CELLM_TYPE_Q8_0}, false, false},  // 178 MB in Q8_0
};

struct MatmulCase {
    cellm_dtype type;
    int64_t k, m, n;
    int threads;
    bool sgemm;  // matmul_sgemm whatever the type, instead of what the backend runs
    bool fast = false;  // fast precision: the block formats on repacked rows (repacked.hpp)
};

// What runs: the int8 tiles (Q8 or Q8_K), SGEMM over expanded panels, or expanded rows meeting each column
// (matmul.hpp).
const char* path_name(const MatmulCase& c) {
    if (c.sgemm) return "sgemm";
    if (c.fast) return "repacked";
    if (blocks::has_q8_dot(c.type) || blocks::has_q8k_dot(c.type)) return "int8";
    return c.n >= openblas::blas_min_columns ? "sgemm" : "rows";
}

const char* type_name(cellm_dtype type) {
    switch (type) {
    case CELLM_TYPE_Q8_0: return "Q8_0";
    case CELLM_TYPE_Q4_0: return "Q4_0";
    case CELLM_TYPE_Q4_1: return "Q4_1";
    case CELLM_TYPE_Q5_0: return "Q5_0";
    case CELLM_TYPE_Q4_K: return "Q4_K";
    case CELLM_TYPE_Q6_K: return "Q6_K";
    case CELLM_TYPE_F16: return "F16";
    default: return "?";
    }
}

void bench_matmul(benchmark::State& state, const MatmulCase& c) {
    const Weights& w = weights(c.type, c.k, c.m);
    std::vector<float> x = random_floats(c.k * c.n, 2), y(static_cast<size_t>(c.m * c.n));
    cpu::Node wn = tensor(CELLM_OP_WEIGHT, c.type, {c.k, c.m, 1, 1}, w.storage.data());
    // Read-only, as a mapped model is: fast precision repacks only such weights.
    cellm_buffer buffer;
    buffer.data = wn.data;
    buffer.size = w.bytes;
    buffer.writable = false;
    wn.buffer = &buffer;
    const cpu::Node xn = tensor(CELLM_OP_INPUT, CELLM_TYPE_F32, {c.k, c.n, 1, 1}, x.data());
    const cpu::Node yn = tensor(CELLM_OP_MATMUL, CELLM_TYPE_F32, {c.m, c.n, 1, 1}, y.data());
    openblas::ThreadPool pool(c.threads);
    openblas::MatmulScratch scratch;
    openblas::RepackedWeights repacked;
    for (auto _ : state) {
        if (c.sgemm) openblas::matmul_sgemm(wn, xn, yn, pool, scratch);
        else openblas::matmul(wn, xn, yn, pool, scratch, c.fast ? &repacked : nullptr);
        benchmark::ClobberMemory();
    }
    const double iterations = static_cast<double>(state.iterations());
    if (c.n == decode_columns) state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.bytes));
    else state.counters["FLOP"] = benchmark::Counter(2.0 * static_cast<double>(c.k * c.m * c.n) * iterations,
                                                     benchmark::Counter::kIsRate);
}

void register_matmul(const MatmulShape& shape, const MatmulCase& c) {
    const std::string name = std::string("BM_Matmul/") + type_name(c.type) + "/" + shape.tensor + "/" +
                             std::to_string(c.k) + "x" + std::to_string(c.m) + "/n" + std::to_string(c.n) + "/t" +
                             std::to_string(c.threads) + "/" + path_name(c);
    benchmark::RegisterBenchmark(name.c_str(), [c](benchmark::State& state) { bench_matmul(state, c); })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
}

void register_matmuls() {
    for (const MatmulShape& s : matmul_shapes)
        for (cellm_dtype type : s.types) {
            // K-quants need k to be a multiple of 256; models store such tensors in another type.
            if (blocks::row_bytes(type, s.k) == 0) continue;
            if (s.one_thread) register_matmul(s, {type, s.k, s.m, decode_columns, 1, false});
            register_matmul(s, {type, s.k, s.m, decode_columns, 2, false});
            if (blocks::has_q8_dot(type) || blocks::has_q8k_dot(type)) {
                if (s.one_thread) register_matmul(s, {type, s.k, s.m, sessions_columns, 1, false});
                register_matmul(s, {type, s.k, s.m, sessions_columns, 2, false});
            }
            if (!s.prefill) continue;
            // One thread too for the quantized tiles: its CPU time is a steadier measure on a busy machine.
            if (blocks::has_q8_dot(type) || blocks::has_q8k_dot(type))
                register_matmul(s, {type, s.k, s.m, prefill_columns, 1, false});
            register_matmul(s, {type, s.k, s.m, prefill_columns, 2, false});
            // The integer tiles against expanding the weights for SGEMM, on the types models use most.
            if (type == CELLM_TYPE_Q8_0 || type == CELLM_TYPE_Q4_1)
                register_matmul(s, {type, s.k, s.m, prefill_columns, 2, true});
        }
    // Fast precision's repacked rows, where this CPU has them (the first run repacks).
    if (openblas::repacked_dot() == nullptr) return;
    for (const MatmulShape& s : matmul_shapes)
        for (cellm_dtype type : s.types) {
            if (openblas::repacked_format(type) == nullptr) continue;
            for (const int64_t n : {decode_columns, sessions_columns}) register_matmul(s, {type, s.k, s.m, n, 2, false, true});
            if (!s.prefill) continue;
            register_matmul(s, {type, s.k, s.m, prefill_columns, 1, false, true});
            register_matmul(s, {type, s.k, s.m, prefill_columns, 2, false, true});
        }
}

// ---- ATTENTION ----

// SmolLM2-135M's attention: 9 query heads sharing 3 KV heads of 64, an F16 cache in blocks of 16 positions.
constexpr int32_t n_head = 9, n_head_kv = 3, head_dim = 64, kv_block = 16;
constexpr int64_t kv_dim = int64_t{n_head_kv} * head_dim;

// Sequences of n_tokens / n_seqs tokens each, at positions [first_position, first_position + tokens), each token
// attending causally to every position of its sequence up to its own. Their blocks lie anywhere in a pool of
// pool_blocks blocks, as they do once sequences come and go: a pool larger than the caches makes the rows come
// from memory, as an 8-session decode step's do.
struct AttentionCase {
    const char* name;
    int64_t n_seqs, n_tokens, first_position, pool_blocks;
};

const std::vector<AttentionCase> attention_cases{
    {"decode", 1, 1, 511, 32},         // one token attending to 512 positions, in cache
    {"prefill", 1, 128, 0, 8},         // a 128-token prompt
    {"decode8", 8, 8, 191, 8192},      // 8 sessions at 192 positions, a 96 MiB pool (K and V)
};

void bench_attention(benchmark::State& state, const AttentionCase& c, bool fast) {
    const int64_t n = c.n_tokens, per_seq = n / c.n_seqs, context = c.first_position + per_seq;
    const int64_t n_blocks = (context + kv_block - 1) / kv_block, n_slots = c.pool_blocks * kv_block;
    // On huge pages, as the backend's buffers are.
    const uint64_t pool_halves = static_cast<uint64_t>(n_slots * kv_dim);
    const auto k_bytes = cpu::AlignedBytes::huge(2 * pool_halves, cpu::AlignedBytes::Commit::now);
    const auto v_bytes = cpu::AlignedBytes::huge(2 * pool_halves, cpu::AlignedBytes::Commit::now);
    auto* k_pool = reinterpret_cast<uint16_t*>(k_bytes.data());
    auto* v_pool = reinterpret_cast<uint16_t*>(v_bytes.data());
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (uint64_t i = 0; i < pool_halves; ++i) {
        k_pool[i] = blocks::fp32_to_fp16(u(rng));
        v_pool[i] = blocks::fp32_to_fp16(u(rng));
    }
    std::vector<int32_t> pool_order(static_cast<size_t>(c.pool_blocks));
    std::iota(pool_order.begin(), pool_order.end(), 0);
    std::shuffle(pool_order.begin(), pool_order.end(), std::mt19937(5));
    // Several block tables (as a step's layers have), taken in turn, so that a pool larger than the caches is
    // read from memory.
    const int64_t table_size = c.n_seqs * n_blocks, tables = std::max<int64_t>(1, c.pool_blocks / table_size);
    const std::vector<int32_t> block_tables(pool_order.begin(), pool_order.begin() + tables * table_size);
    std::vector<int32_t> token_seq(static_cast<size_t>(n)), positions(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
        token_seq[static_cast<size_t>(t)] = static_cast<int32_t>(t / per_seq);
        positions[static_cast<size_t>(t)] = static_cast<int32_t>(c.first_position + t % per_seq);
    }
    std::vector<float> q = random_floats(n * n_head * head_dim, 6), out(q.size());

    cpu::Plan plan;
    plan.nodes = {
        tensor(CELLM_OP_INPUT, CELLM_TYPE_F32, {head_dim, n_head, n, 1}, q.data()),
        tensor(CELLM_OP_KV_CACHE, CELLM_TYPE_F16, {kv_dim, n_slots, 1, 1}, k_pool),
        tensor(CELLM_OP_KV_CACHE, CELLM_TYPE_F16, {kv_dim, n_slots, 1, 1}, v_pool),
        tensor(CELLM_OP_INPUT, CELLM_TYPE_I32, {n_blocks, c.n_seqs, 1, 1}, const_cast<int32_t*>(block_tables.data())),
        tensor(CELLM_OP_INPUT, CELLM_TYPE_I32, {n, 1, 1, 1}, token_seq.data()),
        tensor(CELLM_OP_INPUT, CELLM_TYPE_I32, {n, 1, 1, 1}, positions.data()),
        tensor(CELLM_OP_ATTENTION, CELLM_TYPE_F32, {int64_t{head_dim} * n_head, n, 1, 1}, out.data()),
    };
    cpu::Node& attention = plan.nodes.back();
    for (int32_t s = 0; s < 6; ++s) attention.src[static_cast<size_t>(s)] = s;
    attention.iparams = {n_head, n_head_kv, head_dim, kv_block, 0};  // window 0: unlimited
    attention.fparams = {1.0f / std::sqrt(static_cast<float>(head_dim)), 0.0f};  // no soft-cap

    openblas::ThreadPool pool(2);
    openblas::AttentionScratch scratch;
    const int32_t index = static_cast<int32_t>(plan.nodes.size()) - 1;
    int64_t table = 0;
    for (auto _ : state) {
        plan.nodes[3].data = reinterpret_cast<std::byte*>(const_cast<int32_t*>(block_tables.data() + table * table_size));
        table = (table + 1) % tables;
        openblas::attention(plan, index, pool, scratch, fast);
        benchmark::ClobberMemory();
    }
    // Bytes of K and V rows the tokens read (one KV head's row segment serves its group of query heads).
    int64_t positions_read = 0;
    for (int32_t p : positions) positions_read += p + 1;
    state.SetBytesProcessed(state.iterations() * positions_read * kv_dim * 2 * int64_t{sizeof(uint16_t)});
    state.counters["tokens"] = benchmark::Counter(static_cast<double>(n * state.iterations()), benchmark::Counter::kIsRate);
}

void register_attention() {
    for (const AttentionCase& c : attention_cases)
        for (const bool fast : {false, true}) {
            const std::string name = std::string("BM_Attention/smollm2/f16/") + (fast ? "fast/" : "exact/") + c.name +
                                     "/n" + std::to_string(c.n_tokens) + "/ctx" +
                                     std::to_string(c.first_position + c.n_tokens / c.n_seqs) + "/t2";
            benchmark::RegisterBenchmark(name.c_str(), [c, fast](benchmark::State& state) { bench_attention(state, c, fast); })
                ->UseRealTime()
                ->Unit(benchmark::kMicrosecond);
        }
}

// ---- RMS_NORM ----

void bench_rms_norm(benchmark::State& state, int64_t dim, int64_t n) {
    std::vector<float> x = random_floats(dim * n, 7), weight = random_floats(dim, 8), out(x.size());
    cpu::Plan plan;
    plan.nodes = {
        tensor(CELLM_OP_INPUT, CELLM_TYPE_F32, {dim, n, 1, 1}, x.data()),
        tensor(CELLM_OP_WEIGHT, CELLM_TYPE_F32, {dim, 1, 1, 1}, weight.data()),
        tensor(CELLM_OP_RMS_NORM, CELLM_TYPE_F32, {dim, n, 1, 1}, out.data()),
    };
    plan.nodes[2].src[0] = 0;
    plan.nodes[2].src[1] = 1;
    plan.nodes[2].fparams[0] = 1e-5f;  // eps
    for (auto _ : state) {
        cpu::run_reference(plan, 2);
        benchmark::ClobberMemory();
    }
    // Activations read and written.
    state.SetBytesProcessed(state.iterations() * 2 * dim * n * int64_t{sizeof(float)});
}

void register_rms_norms() {
    const int64_t dim = 576;  // SmolLM2's hidden size
    for (int64_t n : {decode_columns, prefill_columns}) {
        const std::string name = "BM_RmsNorm/reference/" + std::to_string(dim) + "/n" + std::to_string(n);
        benchmark::RegisterBenchmark(name.c_str(), [dim, n](benchmark::State& state) { bench_rms_norm(state, dim, n); })
            ->Unit(benchmark::kMicrosecond);
    }
}

// ---- GLU ----

// act(gate) * up over Gemma-3-270M's FFN width (2048) for a prefill chunk, GELU as Gemma gates and SiLU as
// Llama does; gate values of both signs as the products give them. One thread.
void bench_glu(benchmark::State& state, const openblas::Activations* fast, int64_t dim, int64_t n, bool gelu) {
    std::vector<float> gate = random_floats(dim * n, 9), up = random_floats(dim * n, 10), out(gate.size());
    for (float& g : gate) g *= 4.0f;
    cpu::Plan plan;
    plan.nodes = {
        tensor(CELLM_OP_INPUT, CELLM_TYPE_F32, {dim, n, 1, 1}, gate.data()),
        tensor(CELLM_OP_INPUT, CELLM_TYPE_F32, {dim, n, 1, 1}, up.data()),
        tensor(CELLM_OP_GLU, CELLM_TYPE_F32, {dim, n, 1, 1}, out.data()),
    };
    plan.nodes[2].src[0] = 0;
    plan.nodes[2].src[1] = 1;
    plan.nodes[2].iparams[0] = gelu ? 1 : 0;
    for (auto _ : state) {
        if (fast != nullptr) fast->glu(gate.data(), up.data(), out.data(), dim * n, gelu);
        else cpu::run_reference(plan, 2);
        benchmark::ClobberMemory();
    }
    // Gate and up read, the result written.
    state.SetBytesProcessed(state.iterations() * 3 * dim * n * int64_t{sizeof(float)});
}

void register_glus() {
    const int64_t dim = 2048, n = prefill_columns;
    std::vector<const openblas::Activations*> runs{nullptr};  // nullptr: the reference
    for (const openblas::Activations* t : openblas::runnable_activations()) runs.push_back(t);
    for (bool gelu : {true, false})
        for (const openblas::Activations* t : runs) {
            const std::string name = std::string("BM_Glu/") + (gelu ? "gelu/" : "silu/") +
                                     (t != nullptr ? std::string("fast-") + t->isa : "reference") + "/" +
                                     std::to_string(dim) + "/n" + std::to_string(n);
            benchmark::RegisterBenchmark(name.c_str(), [t, dim, n, gelu](benchmark::State& state) {
                bench_glu(state, t, dim, n, gelu);
            })->Unit(benchmark::kMicrosecond);
        }
}

}  // namespace

int main(int argc, char** argv) {
    register_matmuls();
    register_attention();
    register_rms_norms();
    register_glus();
    // As the backend does (plugin.cpp): each pool thread calls SGEMM on its own panel, so OpenBLAS starts none.
    openblas_set_num_threads(1);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::AddCustomContext("kernels", cellm::openblas::kernels().isa);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
