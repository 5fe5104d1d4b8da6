#include "engine/kv_calibration.h"

#include "engine/step_graph.h"
#include "error.h"
#include "kv/state_pool.h"

#include <algorithm>
#include <cmath>
#include <string_view>

namespace cellm {
namespace {

// Public domain: the Gettysburg Address (A. Lincoln, 1863) and the opening of the Declaration of Independence
// (1776), the text tools/kv_study calibrated on.
constexpr std::string_view calibration_text =
    "Four score and seven years ago our fathers brought forth on this continent, a new nation, conceived "
    "in Liberty, and dedicated to the proposition that all men are created equal.\n\n"
    "Now we are engaged in a great civil war, testing whether that nation, or any nation so conceived and"
    " so dedicated, can long endure. We are met on a great battle-field of that war. We have come to "
    "dedicate a portion of that field, as a final resting place for those who here gave their lives that "
    "that nation might live. It is altogether fitting and proper that we should do this.\n\n"
    "But, in a larger sense, we can not dedicate, we can not consecrate, we can not hallow this ground. "
    "The brave men, living and dead, who struggled here, have consecrated it, far above our poor power to"
    " add or detract. The world will little note, nor long remember what we say here, but it can never "
    "forget what they did here. It is for us the living, rather, to be dedicated here to the unfinished "
    "work which they who fought here have thus far so nobly advanced. It is rather for us to be here "
    "dedicated to the great task remaining before us, that from these honored dead we take increased "
    "devotion to that cause for which they gave the last full measure of devotion, that we here highly "
    "resolve that these dead shall not have died in vain, that this nation, under God, shall have a new "
    "birth of freedom, and that government of the people, by the people, for the people, shall not perish"
    " from the earth.\n\n"
    "When in the Course of human events, it becomes necessary for one people to dissolve the political "
    "bands which have connected them with another, and to assume among the powers of the earth, the "
    "separate and equal station to which the Laws of Nature and of Nature's God entitle them, a decent "
    "respect to the opinions of mankind requires that they should declare the causes which impel them to "
    "the separation.\n\n"
    "We hold these truths to be self-evident, that all men are created equal, that they are endowed by "
    "their Creator with certain unalienable Rights, that among these are Life, Liberty and the pursuit of"
    " Happiness. That to secure these rights, Governments are instituted among Men, deriving their just "
    "powers from the consent of the governed.";

constexpr int32_t chunk_tokens = 64;
constexpr double alpha = 0.75;  // how far the smoothing balances q's and k's energy (tools/kv_study: 0.5..1 alike)

struct LayerStats {
    std::vector<double> sum_k, sum_k2, sum_q2;  // per K-row channel, over tokens (and a group's query heads)
    int64_t n_keys = 0, n_queries = 0;
    bool softcap = false;
};

// Adds tokens [first, n) of one chunk's probe to its layer's sums.
void add(std::vector<LayerStats>& stats, const StepGraph::Probe& probe, const std::vector<float>& v, int64_t first,
         int64_t n) {
    LayerStats& st = stats[static_cast<size_t>(probe.layer)];
    const auto width = static_cast<int64_t>(st.sum_k.size());
    if (width == 0) return;
    if (!probe.query) {
        for (int64_t t = first; t < n; ++t) {
            for (int64_t c = 0; c < width; ++c) {
                const double k = v[static_cast<size_t>(t * width + c)];
                st.sum_k[static_cast<size_t>(c)] += k;
                st.sum_k2[static_cast<size_t>(c)] += k * k;
            }
        }
        st.n_keys += n - first;
        return;
    }
    // [head_dim, n_head, n]: query head h meets KV head h / (n_head / n_head_kv).
    const int64_t n_kv = probe.n_head_kv, head_dim = width / std::max<int64_t>(1, n_kv);
    const int64_t n_head = static_cast<int64_t>(v.size()) / (head_dim * n);
    if (n_kv <= 0 || head_dim * n_kv != width || n_head % n_kv != 0) return;
    const int64_t group = n_head / n_kv;
    st.softcap = st.softcap || probe.softcap != 0.0f;
    for (int64_t t = first; t < n; ++t) {
        for (int64_t h = 0; h < n_head; ++h) {
            for (int64_t c = 0; c < head_dim; ++c) {
                const double q = v[static_cast<size_t>((t * n_head + h) * head_dim + c)];
                st.sum_q2[static_cast<size_t>(h / group * head_dim + c)] += q * q / static_cast<double>(group);
            }
        }
    }
    st.n_queries += n - first;
}

// Floors a KV head's channel statistics at a millionth of their largest, so no ratio divides by zero.
void floor_head(std::vector<double>& x, size_t begin, size_t end) {
    const double top = *std::max_element(x.begin() + static_cast<ptrdiff_t>(begin), x.begin() + static_cast<ptrdiff_t>(end));
    for (size_t c = begin; c < end; ++c) x[c] = std::max({x[c], top * 1e-6, 1e-30});
}

}  // namespace

void calibrate_key_transform(const Model& model, Backend& backend, const WeightStore& weights, KvCache& kv,
                             int32_t block_size, int32_t max_tokens) {
    const Tokenizer& tok = model.tokenizer();
    std::vector<int32_t> tokens = tok.encode(calibration_text, tok.add_bos() && tok.bos() >= 0, false);
    if (static_cast<int32_t>(tokens.size()) > max_tokens) tokens.resize(static_cast<size_t>(max_tokens));
    const auto n = static_cast<int32_t>(tokens.size());
    if (n < 2) throw Error("the KV calibration text is too short for this model's context");
    const int32_t n_blocks = (n + block_size - 1) / block_size;

    KvCache scratch_kv(backend, model.layers(), n_blocks, block_size, CELLM_TYPE_F32);
    StatePool states(backend, model.layers(), 1);
    std::vector<int32_t> table;
    for (int32_t b = 0; b < n_blocks; ++b) table.push_back(scratch_kv.allocate());
    const int32_t state_slot = states.empty() ? -1 : states.acquire();

    const std::vector<cellm_arch_layer_info>& layers = model.layers();
    std::vector<LayerStats> stats(layers.size());
    for (size_t il = 0; il < layers.size(); ++il) {
        const auto width = static_cast<size_t>(layers[il].kv_dim);
        stats[il].sum_k.assign(width, 0.0);
        stats[il].sum_k2.assign(width, 0.0);
        stats[il].sum_q2.assign(width, 0.0);
    }
    // In chunks, as a chunked prefill runs: the probes of the whole text at once would grow the backend's scratch
    // memory for good.
    const int32_t chunk = std::min(n, chunk_tokens);
    const cellm_batch_shape shape{sizeof(cellm_batch_shape), chunk, 1, 1, n_blocks, block_size, 0};
    StepGraph graph(model, backend, weights, scratch_kv, states, shape, true);
    std::vector<float> logits(static_cast<size_t>(model.info().n_vocab));
    std::vector<std::vector<float>> values;
    for (int32_t start = 0; start + chunk <= n; start += chunk) {
        StepGraph::Inputs in;
        in.i32[CELLM_INPUT_BLOCK_TABLE] = table;
        for (int32_t i = start; i < start + chunk; ++i) {
            in.i32[CELLM_INPUT_TOKENS].push_back(tokens[static_cast<size_t>(i)]);
            in.i32[CELLM_INPUT_POSITIONS].push_back(i);
            in.i32[CELLM_INPUT_TOKEN_SEQ].push_back(0);
            in.i32[CELLM_INPUT_SLOTS].push_back(table[static_cast<size_t>(i / block_size)] * block_size + i % block_size);
        }
        in.i32[CELLM_INPUT_OUTPUT_ROWS] = {chunk - 1};
        in.i32[CELLM_INPUT_STATE_SLOTS] = {state_slot};
        graph.execute(in, logits.data(), logits.size(), &values);
        const int64_t first = start == 0 ? 1 : 0;  // position 0 is an attention sink: left out
        for (size_t p = 0; p < graph.probes().size(); ++p) add(stats, graph.probes()[p], values[p], first, chunk);
    }

    for (size_t il = 0; il < layers.size(); ++il) {
        const LayerStats& st = stats[il];
        const size_t width = st.sum_k.size();
        if (width == 0) continue;
        std::vector<float> shift(width, 0.0f), scale(width, 1.0f);
        if (st.n_keys > 0 && st.n_queries > 0) {
            const auto head_dim = width / static_cast<size_t>(layers[il].n_head_kv);
            std::vector<double> ms_k(width), ms_q(width);
            for (size_t c = 0; c < width; ++c) {
                const double mean = st.softcap ? 0.0 : st.sum_k[c] / static_cast<double>(st.n_keys);
                shift[c] = static_cast<float>(-mean);
                ms_k[c] = std::max(0.0, st.sum_k2[c] / static_cast<double>(st.n_keys) - mean * mean);
                ms_q[c] = st.sum_q2[c] / static_cast<double>(st.n_queries);
            }
            for (size_t h0 = 0; h0 < width; h0 += head_dim) {
                floor_head(ms_k, h0, h0 + head_dim);
                floor_head(ms_q, h0, h0 + head_dim);
                double log_sum = 0.0;
                for (size_t c = h0; c < h0 + head_dim; ++c) log_sum += std::log(ms_q[c] / ms_k[c]) * alpha / 4.0;
                const double log_mean = log_sum / static_cast<double>(head_dim);
                for (size_t c = h0; c < h0 + head_dim; ++c)
                    scale[c] = static_cast<float>(std::exp(std::log(ms_q[c] / ms_k[c]) * alpha / 4.0 - log_mean));
            }
        }
        kv.set_key_transform(static_cast<int32_t>(il), shift, scale);
    }
}

}  // namespace cellm
