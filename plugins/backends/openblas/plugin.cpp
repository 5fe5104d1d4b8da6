// The "openblas" backend: the reference kernels except where a step spends its time (MATMUL, ATTENTION),
// which run on a persistent thread pool with SIMD kernels chosen for this CPU and OpenBLAS SGEMM.
#include "activations_fast.hpp"
#include "attention.hpp"
#include "frame.hpp"
#include "kernels.hpp"
#include "matmul.hpp"
#include "reference_kernels.hpp"
#include "self_attention.hpp"
#include "thread_pool.hpp"

#include "plugin_host.hpp"

#include <cblas.h>
#include <sched.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace cellm::openblas {
namespace {

// Physical cores this process may run on: hyper-threads share a core's SIMD units, so they add little.
int physical_cores() {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return std::max(1u, std::thread::hardware_concurrency());
    std::set<std::pair<std::string, std::string>> cores;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (!CPU_ISSET(cpu, &allowed)) continue;
        const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
        std::string package, core;
        std::ifstream(dir + "physical_package_id") >> package;
        std::ifstream(dir + "core_id") >> core;
        cores.emplace(package.empty() ? std::to_string(cpu) : package, core.empty() ? std::to_string(cpu) : core);
    }
    return std::max<int>(1, static_cast<int>(cores.size()));
}

class BlasExecutor final : public cpu::Executor {
public:
    BlasExecutor(int threads, bool fast) : pool_(threads), fast_(fast) {}

    void run(cpu::Plan& plan) override {
        angles_.clear();
        matmul_.q8_input = matmul_.q8k_input = -1;  // node indices name this plan's values only
        for (size_t i = 0; i < plan.nodes.size(); ++i) {
            const auto index = static_cast<int32_t>(i);
            const cpu::Node& node = plan.nodes[i];
            switch (node.op) {
            case CELLM_OP_MATMUL: i = products(plan, i); break;
            case CELLM_OP_ATTENTION: attention(plan, index, pool_, attention_, fast_); break;
            case CELLM_OP_SELF_ATTENTION: self_attention(plan, index, pool_, self_attention_); break;
            case CELLM_OP_ROPE: rope(plan, node); break;
            case CELLM_OP_KV_STORE: kv_store(plan, index); break;
            case CELLM_OP_GLU: case CELLM_OP_GELU: case CELLM_OP_SILU:
                if (fast_ && takes_gelu(node)) gelu(plan, index);
                else if (!takes_gelu(node) && exp_ != nullptr) silu(plan, index);
                else run_split(plan, index);
                break;
            default: run_split(plan, index); break;
            }
        }
        if (const auto [count, bytes] = repacked_.take_new(); count > 0)
            plugin::log(CELLM_LOG_INFO, "openblas",
                        "fast precision repacked " + std::to_string(count) + " weights (" + mib(bytes) + " MiB; " +
                            mib(repacked_.bytes()) + " MiB in all, in place of the mapped rows they came from)");
    }
    int threads() const override { return pool_.size(); }
    void forget(const std::byte* begin, uint64_t size) override { repacked_.forget(begin, size); }

private:
    // The MATMUL at node i; in a fast decode step with the MATMULs right after it that share its input, only
    // their weights' leaves between them (Q, K and V; gate and up), as one dispatch. Returns the last node it
    // did. Decode gained 3% (one session) to 4% (eight); prefill lost 2%, so its products stay one by one.
    size_t products(const cpu::Plan& plan, size_t i) {
        const cpu::Node& first = plan.nodes[i];
        const cpu::Node& x = src(plan, first, 1);
        if (fast_ && x.rows() <= max_decode_columns) {
            run_.assign(1, {&src(plan, first, 0), &first});
            size_t last = i;
            for (size_t j = i + 1; j < plan.nodes.size(); ++j) {
                const cpu::Node& next = plan.nodes[j];
                if (next.op == CELLM_OP_WEIGHT) continue;
                if (next.op != CELLM_OP_MATMUL || next.src[1] != first.src[1]) break;
                run_.push_back({&src(plan, next, 0), &next});
                last = j;
            }
            if (matmul_repacked(run_, x, pool_, matmul_, repacked_, first.src[1])) return last;
        }
        matmul(src(plan, first, 0), x, first, pool_, matmul_, fast_ ? &repacked_ : nullptr, first.src[1]);
        return i;
    }

    static constexpr int64_t max_decode_columns = 16;

    // The other ops through the reference kernels, rows split across the pool.
    void run_split(cpu::Plan& plan, int32_t index) {
        const cpu::Node& node = plan.nodes[static_cast<size_t>(index)];
        auto run = [&](int64_t begin, int64_t end) { cpu::run_reference_part(plan, index, begin, end); };
        // An exp per element (SiLU, GELU and their GLUs) pays for the hand-off at an eighth of the size: eight
        // sessions' SwiGLU on one thread took a tenth of a SmolLM2 decode step.
        const bool costly = node.op == CELLM_OP_GLU || node.op == CELLM_OP_SILU || node.op == CELLM_OP_GELU;
        if (costly || node.op == CELLM_OP_RMS_NORM) return rows_for_products(plan, index, costly ? 8 : 1, run);
        split(cpu::reference_parts(plan, index), node.nelements(), run);
    }

    // An op made row by row (a norm, an activation) whose rows are the input of the MATMULs right after it (the
    // norms before Q, K and V or gate and up; SwiGLU before down): each task quantizes the rows it made while they
    // are in cache, as those products would (matmul.hpp), and the products skip their own pass and its hand-off
    // to the pool. One dispatch where there were two, and the norm no longer runs on one thread while the others
    // wait. Without such products, split() with each element weighted by `cost`.
    template <class Run>
    void rows_for_products(const cpu::Plan& plan, int32_t index, int64_t cost, Run run) {
        const cpu::Node& node = plan.nodes[static_cast<size_t>(index)];
        const ColumnForm form = readers_form(plan, index);
        if (form == ColumnForm::floats) return split(node.rows(), node.nelements() * cost, run);
        const int64_t rows = node.rows(), k = node.ne[0];
        prepare_columns(matmul_, form, rows, k);
        // A norm takes four rows to a task at least: the reference RMSNorm sums four rows' squares at once.
        const int64_t least = node.op == CELLM_OP_RMS_NORM ? 4 : 1;
        const int64_t per_task = std::max<int64_t>(least, rows / (4 * pool_.size()));
        pool_.run((rows + per_task - 1) / per_task, [&](int64_t task, int) {
            const int64_t r0 = task * per_task, r1 = std::min(rows, r0 + per_task);
            run(r0, r1);
            for (int64_t r = r0; r < r1; ++r) quantize_column(matmul_, form, node.f32() + r * k, r, k);
        });
        columns_hold(matmul_, form, index);
    }

    // The form the products reading node `index` take it in, when they come next in the plan (only their weights'
    // leaves between); floats when they do not, or read floats.
    static ColumnForm readers_form(const cpu::Plan& plan, int32_t index) {
        for (size_t j = static_cast<size_t>(index) + 1; j < plan.nodes.size(); ++j) {
            const cpu::Node& next = plan.nodes[j];
            if (next.op == CELLM_OP_WEIGHT) continue;
            if (next.op != CELLM_OP_MATMUL || next.src[1] != index) return ColumnForm::floats;
            return column_form(src(plan, next, 0).type);
        }
        return ColumnForm::floats;
    }

    // run(begin, end) over `parts` independent units of an op that writes `elements` values (weighted by their
    // cost): split across the pool when there are enough of them to pay for the hand-off (prefill; a decode
    // step's vectors are faster on one thread), else whole. Fewer than two parts means the op must run whole.
    template <class Run>
    void split(int64_t parts, int64_t elements, Run run) {
        if (parts < 2 || elements < min_split_elements) {
            run(0, parts);
            return;
        }
        const int64_t per_task = std::max<int64_t>(1, parts / (4 * pool_.size()));
        pool_.run((parts + per_task - 1) / per_task,
                  [&](int64_t task, int) { run(task * per_task, std::min(parts, (task + 1) * per_task)); });
    }
    static constexpr int64_t min_split_elements = 16384;

    // Fast precision's GELU (activations_fast.hpp), vectorised where the reference calls libm's tanhf for each
    // element (15% of Gemma-3's prefill). SiLU has no fast form: an approximate exp turned SmolLM2's last-place
    // differences into logits further from scalar's than llama.cpp is from itself, so both precisions take
    // silu() below, bit-equal to the reference.
    static bool takes_gelu(const cpu::Node& node) {
        return node.op == CELLM_OP_GELU || (node.op == CELLM_OP_GLU && node.iparams[0] == 1);
    }
    void gelu(const cpu::Plan& plan, int32_t index) {
        const cpu::Node& node = plan.nodes[static_cast<size_t>(index)];
        const float* x = src(plan, node, 0).f32();
        const float* up = node.op == CELLM_OP_GLU ? src(plan, node, 1).f32() : nullptr;
        const int64_t width = node.ne[0];
        rows_for_products(plan, index, 1, [&](int64_t r0, int64_t r1) {
            const int64_t at = r0 * width, n = (r1 - r0) * width;
            if (up != nullptr) glu_fast(x + at, up + at, node.f32() + at, n, true);
            else gelu_fast(x + at, node.f32() + at, n);
        });
    }

    // F16 pools through the table's conversion (F16C), where the reference converts each value in software.
    void kv_store(cpu::Plan& plan, int32_t index) {
        const cpu::Node& pool = plan.nodes[static_cast<size_t>(index)];
        if (pool.type != CELLM_TYPE_F16) return run_split(plan, index);
        const cpu::Node& rows = src(plan, pool, 1);
        const int32_t* slots = src(plan, pool, 2).i32();
        graph::check_slots(cpu::error_prefix(), plan.nodes, index, slots);  // all of them before any write
        auto* halves = reinterpret_cast<uint16_t*>(pool.data);
        for (int64_t t = 0; t < rows.ne[1]; ++t)
            kernels().to_f16(rows.f32() + t * rows.ne[0], halves + slots[t] * pool.ne[0], pool.ne[0]);
    }

    // SiLU and its GLU as the reference computes them, x / (1 + exp(-x)) (times up), with the exps a vector at a
    // time (kernels.hpp's libm_exp, bit-equal to std::exp) instead of one libm call each: 8 sessions' SwiGLU
    // took 7% of a SmolLM2 step.
    void silu(const cpu::Plan& plan, int32_t index) {
        const cpu::Node& node = plan.nodes[static_cast<size_t>(index)];
        const float* x = src(plan, node, 0).f32();
        const float* up = node.op == CELLM_OP_GLU ? src(plan, node, 1).f32() : nullptr;
        const int64_t width = node.ne[0];
        rows_for_products(plan, index, 2, [&](int64_t r0, int64_t r1) {
            float e[256];
            for (int64_t at = r0 * width, end = r1 * width; at < end; at += 256) {
                const int64_t n = std::min<int64_t>(256, end - at);
                for (int64_t i = 0; i < n; ++i) e[i] = -x[at + i];
                exp_(e, e, n);
                for (int64_t i = 0; i < n; ++i) {
                    const float s = x[at + i] / (1.0f + e[i]);
                    node.f32()[at + i] = up != nullptr ? s * up[at + i] : s;
                }
            }
        });
    }

    // The angles of every token of a step for one set of ROPE parameters. Every layer's Q and K rotate by the
    // same angles, so each set is computed once per step (the pow, cos and sin cost more than the rotations).
    struct Angles {
        int32_t positions;  // the node holding the positions
        const float* factors;
        int64_t half;
        float base, scale;
        std::vector<float> cos_sin;  // token t's at 2 * half * t (cpu::rope_angles' layout)
    };

    void rope(const cpu::Plan& plan, const cpu::Node& node) {
        const cpu::Node& x = src(plan, node, 0);
        const cpu::Node& positions = src(plan, node, 1);
        const float* factors = node.src[2] >= 0 ? src(plan, node, 2).f32() : nullptr;
        const int64_t half = node.iparams[0] / 2, n_tokens = x.ne[2], width = 2 * half;
        auto same = [&](const Angles& a) {
            return a.positions == node.src[1] && a.factors == factors && a.half == half &&
                   a.base == node.fparams[0] && a.scale == node.fparams[1];
        };
        auto found = std::find_if(angles_.begin(), angles_.end(), same);
        if (found == angles_.end()) {
            Angles a{node.src[1], factors, half, node.fparams[0], node.fparams[1], {}};
            a.cos_sin.resize(static_cast<size_t>(n_tokens * width));
            for (int64_t t = 0; t < n_tokens; ++t)
                cpu::rope_angles(node, positions.i32()[t], factors, a.cos_sin.data() + t * width);
            found = angles_.insert(angles_.end(), std::move(a));
        }
        const float* table = found->cos_sin.data();
        split(n_tokens, node.nelements(), [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) cpu::rope_rotate(node, x, t, table + t * width);
        });
    }

    static const cpu::Node& src(const cpu::Plan& plan, const cpu::Node& node, int k) {
        return plan.nodes[static_cast<size_t>(node.src[static_cast<size_t>(k)])];
    }

    static std::string mib(uint64_t bytes) { return std::to_string((bytes + (1u << 19)) >> 20); }

    ThreadPool pool_;
    bool fast_;
    ExpF32 exp_ = libm_exp();
    RepackedWeights repacked_;
    MatmulScratch matmul_;
    std::vector<Product> run_;  // products() gathers a run of them here
    AttentionScratch attention_;
    SelfAttentionScratch self_attention_;
    std::vector<Angles> angles_;  // this step's
};

std::unique_ptr<cpu::Executor> make_executor(const cpu::ExecutorOptions& options) {
    // Each pool thread calls SGEMM on its own panel, so OpenBLAS must not start threads of its own.
    openblas_set_num_threads(1);
    return std::make_unique<BlasExecutor>(options.threads > 0 ? options.threads : physical_cores(), options.fast);
}

void describe(void (*emit)(void* user, const char* line), void* user) {
    if (emit == nullptr) return;
    const std::string line = "cpu: " + std::to_string(physical_cores()) + " physical cores, kernels " + kernels().isa +
                             ", OpenBLAS " + openblas_get_corename() + " (" + openblas_get_config() + ")";
    emit(user, line.c_str());
}

const cpu::BackendSpec spec = {
    "openblas",
    "0.1.0",
    "CPU backend: SIMD quantized kernels, OpenBLAS SGEMM for batches, a persistent thread pool",
    "cpu (openblas)",
    make_executor,
    describe,
};

}  // namespace
}  // namespace cellm::openblas

extern "C" CELLM_EXPORT const cellm_plugin_desc* cellm_plugin_entry(const cellm_host_api* host, uint32_t host_abi_major,
                                                                    uint32_t) {
    return cellm::cpu::plugin_descriptor(cellm::openblas::spec, host, host_abi_major);
}
