#include "gemma3_reference.h"

#include "blocks.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace cellm::testing {
namespace {

using Vec = std::vector<float>;

// ---- Reading the model ------------------------------------------------------------------------------------

const cellm_meta_value* find_meta(const cellm_model_view& m, std::string_view key) {
    for (uint64_t i = 0; i < m.n_meta; ++i) {
        if (std::string_view(m.meta[i].key.data, m.meta[i].key.len) == key) return &m.meta[i].value;
    }
    return nullptr;
}

double number(const cellm_model_view& m, const std::string& key, double fallback) {
    const cellm_meta_value* v = find_meta(m, key);
    if (v == nullptr) return fallback;
    if (v->type == CELLM_VALUE_F32 || v->type == CELLM_VALUE_F64) return v->v.f64;
    return static_cast<double>(v->v.u64);
}

double number(const cellm_model_view& m, const std::string& key) {
    if (find_meta(m, key) == nullptr) throw std::runtime_error("missing metadata key '" + key + "'");
    return number(m, key, 0.0);
}

// A [cols, rows] tensor as `rows` float vectors of `cols` (a 1-D tensor: one row).
std::vector<Vec> load(const cellm_model_view& m, const std::string& name) {
    for (uint64_t i = 0; i < m.n_tensors; ++i) {
        const cellm_tensor_info* t = cellm_model_tensor(&m, i);
        if (std::string_view(t->name.data, t->name.len) != name) continue;
        const uint64_t row_bytes = blocks::row_bytes(t->type, t->ne[0]);
        std::vector<Vec> rows(static_cast<size_t>(t->n_dims > 1 ? t->ne[1] : 1), Vec(static_cast<size_t>(t->ne[0])));
        for (size_t r = 0; r < rows.size(); ++r) {
            blocks::dequantize_row(t->type, static_cast<const char*>(t->data) + r * row_bytes, rows[r].data(),
                                   t->ne[0]);
        }
        return rows;
    }
    throw std::runtime_error("missing tensor '" + name + "'");
}

// ---- The math -----------------------------------------------------------------------------------------------

Vec matvec(const std::vector<Vec>& w, const Vec& x) {
    Vec y(w.size());
    for (size_t r = 0; r < w.size(); ++r) {
        double sum = 0.0;
        for (size_t i = 0; i < x.size(); ++i) sum += static_cast<double>(w[r][i]) * x[i];
        y[r] = static_cast<float>(sum);
    }
    return y;
}

// x / sqrt(mean(x^2) + eps) * gain over gain.size() values at x. The file's gains already hold Gemma's (1 + w).
void rms_norm(float* x, const Vec& gain, double eps) {
    double ss = 0.0;
    for (size_t i = 0; i < gain.size(); ++i) ss += static_cast<double>(x[i]) * x[i];
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(gain.size()) + eps);
    for (size_t i = 0; i < gain.size(); ++i) x[i] = static_cast<float>(x[i] * scale) * gain[i];
}

Vec rms_norm(Vec x, const Vec& gain, double eps) {
    rms_norm(x.data(), gain, eps);
    return x;
}

// Hugging Face's rotate_half: within each head, dimension i pairs with i + head_dim/2.
void rope(Vec& v, size_t head_dim, int64_t pos, double base) {
    const size_t half = head_dim / 2;
    for (size_t head = 0; head * head_dim < v.size(); ++head) {
        float* x = v.data() + head * head_dim;
        for (size_t i = 0; i < half; ++i) {
            const double theta = static_cast<double>(pos) * std::pow(base, -2.0 * static_cast<double>(i) /
                                                                             static_cast<double>(head_dim));
            const double a = x[i], b = x[i + half];
            x[i] = static_cast<float>(a * std::cos(theta) - b * std::sin(theta));
            x[i + half] = static_cast<float>(a * std::sin(theta) + b * std::cos(theta));
        }
    }
}

double gelu_tanh(double x) {
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

double softcap(double x, double cap) { return cap > 0.0 ? cap * std::tanh(x / cap) : x; }

}  // namespace

std::vector<std::vector<float>> gemma3_reference_logits(const cellm_model_view& m, std::span<const int32_t> tokens) {
    const cellm_meta_value* arch_value = find_meta(m, "general.architecture");
    if (arch_value == nullptr || arch_value->type != CELLM_VALUE_STRING ||
        std::string_view(arch_value->v.str.data, arch_value->v.str.len) != "gemma3") {
        throw std::runtime_error("not a gemma3 model");
    }
    const auto n_embd = static_cast<size_t>(number(m, "gemma3.embedding_length"));
    const auto n_layer = static_cast<size_t>(number(m, "gemma3.block_count"));
    const auto n_head = static_cast<size_t>(number(m, "gemma3.attention.head_count"));
    const auto n_head_kv = static_cast<size_t>(number(m, "gemma3.attention.head_count_kv", double(n_head)));
    const auto head_dim = static_cast<size_t>(number(m, "gemma3.attention.key_length", double(n_embd / n_head)));
    const double eps = number(m, "gemma3.attention.layer_norm_rms_epsilon");
    const double global_base = number(m, "gemma3.rope.freq_base", 10000.0);
    const auto window = static_cast<size_t>(number(m, "gemma3.attention.sliding_window"));
    const double attn_cap = number(m, "gemma3.attn_logit_softcapping", 0.0);
    const double final_cap = number(m, "gemma3.final_logit_softcapping", 0.0);

    // Embeddings times sqrt(n_embd), rounded to float as llama.cpp's scale is.
    const std::vector<Vec> token_embd = load(m, "token_embd.weight");
    const float embd_scale = std::sqrt(static_cast<float>(n_embd));
    std::vector<Vec> x;  // the residual stream, one vector per position
    for (int32_t t : tokens) {
        x.push_back(token_embd.at(static_cast<size_t>(t)));
        for (float& e : x.back()) e *= embd_scale;
    }
    const size_t n = x.size();

    for (size_t il = 0; il < n_layer; ++il) {
        const std::string blk = "blk." + std::to_string(il) + ".";
        // Gemma 3: layers 5, 11, 17, ... attend to everything with the file's RoPE base; the rest see the last
        // `window` positions and rotate with base 10000.
        const bool global = (il + 1) % 6 == 0;
        const size_t span = global ? n : window;
        const double base = global ? global_base : 10000.0;

        const Vec attn_norm = load(m, blk + "attn_norm.weight")[0];
        const Vec q_norm = load(m, blk + "attn_q_norm.weight")[0], k_norm = load(m, blk + "attn_k_norm.weight")[0];
        const std::vector<Vec> wq = load(m, blk + "attn_q.weight"), wk = load(m, blk + "attn_k.weight"),
                               wv = load(m, blk + "attn_v.weight"), wo = load(m, blk + "attn_output.weight");
        std::vector<Vec> q(n), k(n), v(n);
        for (size_t p = 0; p < n; ++p) {
            const Vec h = rms_norm(x[p], attn_norm, eps);
            q[p] = matvec(wq, h);
            k[p] = matvec(wk, h);
            v[p] = matvec(wv, h);
            for (size_t hd = 0; hd < n_head; ++hd) rms_norm(q[p].data() + hd * head_dim, q_norm, eps);
            for (size_t hd = 0; hd < n_head_kv; ++hd) rms_norm(k[p].data() + hd * head_dim, k_norm, eps);
            rope(q[p], head_dim, static_cast<int64_t>(p), base);
            rope(k[p], head_dim, static_cast<int64_t>(p), base);
        }

        // Causal attention over the span, scaled by 1/sqrt(head_dim) (query_pre_attn_scalar = head_dim).
        const Vec post_attn = load(m, blk + "post_attention_norm.weight")[0];
        for (size_t p = 0; p < n; ++p) {
            const size_t first = p + 1 > span ? p + 1 - span : 0;
            Vec out(n_head * head_dim);
            for (size_t hd = 0; hd < n_head; ++hd) {
                const float* qh = q[p].data() + hd * head_dim;
                const size_t kv_offset = hd / (n_head / n_head_kv) * head_dim;
                std::vector<double> weight(p + 1 - first);
                double max = -INFINITY, total = 0.0;
                for (size_t j = first; j <= p; ++j) {
                    double dot = 0.0;
                    for (size_t d = 0; d < head_dim; ++d) dot += static_cast<double>(qh[d]) * k[j][kv_offset + d];
                    weight[j - first] = softcap(dot / std::sqrt(static_cast<double>(head_dim)), attn_cap);
                    max = std::max(max, weight[j - first]);
                }
                for (double& w : weight) total += (w = std::exp(w - max));
                for (size_t d = 0; d < head_dim; ++d) {
                    double acc = 0.0;
                    for (size_t j = first; j <= p; ++j) acc += weight[j - first] * v[j][kv_offset + d];
                    out[hd * head_dim + d] = static_cast<float>(acc / total);
                }
            }
            const Vec o = rms_norm(matvec(wo, out), post_attn, eps);
            for (size_t i = 0; i < n_embd; ++i) x[p][i] += o[i];
        }

        // GeGLU feed-forward between its pre- and post-norm.
        const Vec ffn_norm = load(m, blk + "ffn_norm.weight")[0], post_ffw = load(m, blk + "post_ffw_norm.weight")[0];
        const std::vector<Vec> gate = load(m, blk + "ffn_gate.weight"), up = load(m, blk + "ffn_up.weight"),
                               down = load(m, blk + "ffn_down.weight");
        for (size_t p = 0; p < n; ++p) {
            const Vec h = rms_norm(x[p], ffn_norm, eps);
            Vec g = matvec(gate, h);
            const Vec u = matvec(up, h);
            for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(gelu_tanh(g[i])) * u[i];
            const Vec o = rms_norm(matvec(down, g), post_ffw, eps);
            for (size_t i = 0; i < n_embd; ++i) x[p][i] += o[i];
        }
    }

    const Vec output_norm = load(m, "output_norm.weight")[0];
    std::vector<Vec> logits;
    for (const Vec& xp : x) {
        Vec l = matvec(token_embd, rms_norm(xp, output_norm, eps));
        for (float& e : l) e = static_cast<float>(softcap(e, final_cap));
        logits.push_back(std::move(l));
    }
    return logits;
}

}  // namespace cellm::testing
