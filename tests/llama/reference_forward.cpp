#include "reference_forward.h"

#include "blocks.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>

namespace cellm::testing {
namespace {

using Vec = std::vector<float>;
using Rows = std::vector<Vec>;  // one vector per position

// ---- Reading the model ------------------------------------------------------------------------------------

struct Reader {
    const cellm_model_view& m;

    const cellm_meta_value* meta(std::string_view key) const {
        for (uint64_t i = 0; i < m.n_meta; ++i) {
            if (std::string_view(m.meta[i].key.data, m.meta[i].key.len) == key) return &m.meta[i].value;
        }
        return nullptr;
    }

    double number_or(std::string_view key, double fallback) const {
        const cellm_meta_value* v = meta(key);
        if (v == nullptr) return fallback;
        switch (v->type) {
        case CELLM_VALUE_F32: case CELLM_VALUE_F64: return v->v.f64;
        case CELLM_VALUE_I8: case CELLM_VALUE_I16: case CELLM_VALUE_I32: case CELLM_VALUE_I64:
            return static_cast<double>(v->v.i64);
        case CELLM_VALUE_STRING: case CELLM_VALUE_ARRAY:
            throw std::runtime_error("metadata key '" + std::string(key) + "' is not a number");
        default: return static_cast<double>(v->v.u64);
        }
    }

    double number(std::string_view key) const {
        if (meta(key) == nullptr) throw std::runtime_error("missing metadata key '" + std::string(key) + "'");
        return number_or(key, 0.0);
    }

    int64_t count(std::string_view key) const { return static_cast<int64_t>(number(key)); }

    std::string string_or(std::string_view key, const std::string& fallback) const {
        const cellm_meta_value* v = meta(key);
        if (v == nullptr || v->type != CELLM_VALUE_STRING) return fallback;
        return std::string(v->v.str.data, v->v.str.len);
    }

    const cellm_tensor_info* find(const std::string& name) const {
        for (uint64_t i = 0; i < m.n_tensors; ++i) {
            const cellm_tensor_info* t = cellm_model_tensor(&m, i);
            if (std::string_view(t->name.data, t->name.len) == name) return t;
        }
        return nullptr;
    }

    const cellm_tensor_info& tensor(const std::string& name) const {
        const cellm_tensor_info* t = find(name);
        if (t == nullptr) throw std::runtime_error("missing tensor '" + name + "'");
        return *t;
    }
};

// Row r of a [cols, rows] tensor, as floats.
Vec row(const cellm_tensor_info& t, int64_t r) {
    Vec out(static_cast<size_t>(t.ne[0]));
    const uint64_t bytes = blocks::row_bytes(t.type, t.ne[0]);
    blocks::dequantize_row(t.type, static_cast<const char*>(t.data) + static_cast<uint64_t>(r) * bytes, out.data(),
                           t.ne[0]);
    return out;
}

// ---- The math -----------------------------------------------------------------------------------------------

// y = W x for every position; W is [in, out] (GGUF order), so each of its `out` rows is dotted with x: in float,
// or as MATMUL defines it (the activations quantized for W's type, as llama.cpp does; blocks::Activations).
Rows matmul(const cellm_tensor_info& w, const Rows& x, Arithmetic arithmetic) {
    Rows y(x.size(), Vec(static_cast<size_t>(w.ne[1])));
    const uint64_t bytes = blocks::row_bytes(w.type, w.ne[0]);
    std::vector<blocks::Activations> prepared(x.size());
    for (size_t p = 0; p < x.size(); ++p) prepared[p].prepare(w.type, x[p].data(), static_cast<int64_t>(x[p].size()));
    for (int64_t r = 0; r < w.ne[1]; ++r) {
        const Vec wr = row(w, r);
        for (size_t p = 0; p < x.size(); ++p) {
            if (arithmetic == Arithmetic::LikeLlamaCpp) {
                y[p][static_cast<size_t>(r)] =
                    prepared[p].dot(static_cast<const char*>(w.data) + static_cast<uint64_t>(r) * bytes, wr.data());
                continue;
            }
            double sum = 0.0;
            for (size_t c = 0; c < wr.size(); ++c) sum += static_cast<double>(wr[c]) * x[p][c];
            y[p][static_cast<size_t>(r)] = static_cast<float>(sum);
        }
    }
    return y;
}

void add_bias(Rows& y, const cellm_tensor_info* bias) {
    if (bias == nullptr) return;
    const Vec b = row(*bias, 0);
    for (Vec& v : y) {
        for (size_t i = 0; i < v.size(); ++i) v[i] += b[i];
    }
}

Rows rms_norm(const Rows& x, const cellm_tensor_info& weight, double eps) {
    const Vec w = row(weight, 0);
    Rows y = x;
    for (Vec& v : y) {
        double ss = 0.0;
        for (float e : v) ss += static_cast<double>(e) * e;
        const double scale = 1.0 / std::sqrt(ss / static_cast<double>(v.size()) + eps);
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(v[i] * scale) * w[i];
    }
    return y;
}

struct Rope {
    int64_t head_dim, n_rot;
    double freq_base, freq_scale;
    bool halves;
    Vec freq_factors;  // empty when the model has none

    // Rotates each head of `v` (n_heads * head_dim) for position `pos`.
    void apply(Vec& v, int64_t pos) const {
        for (size_t head = 0; head * head_dim < v.size(); ++head) {
            float* x = v.data() + head * head_dim;
            for (int64_t i = 0; i < n_rot / 2; ++i) {
                double theta = static_cast<double>(pos) * freq_scale *
                               std::pow(freq_base, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
                if (!freq_factors.empty()) theta /= freq_factors[static_cast<size_t>(i)];
                const int64_t a = halves ? i : 2 * i;
                const int64_t b = halves ? i + n_rot / 2 : 2 * i + 1;
                const double x0 = x[a], x1 = x[b];
                x[a] = static_cast<float>(x0 * std::cos(theta) - x1 * std::sin(theta));
                x[b] = static_cast<float>(x0 * std::sin(theta) + x1 * std::cos(theta));
            }
        }
    }
};

// Causal multi-head attention of one sequence; query head h reads KV head h / (n_head / n_head_kv).
Rows attention(const Rows& q, const Rows& k, const Rows& v, int64_t n_head, int64_t n_head_kv, int64_t head_dim) {
    const auto hd = static_cast<size_t>(head_dim);
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    Rows out(q.size(), Vec(static_cast<size_t>(n_head) * hd, 0.0f));
    for (size_t p = 0; p < q.size(); ++p) {
        for (int64_t h = 0; h < n_head; ++h) {
            const size_t qo = static_cast<size_t>(h) * hd;
            const size_t ko = static_cast<size_t>(h / (n_head / n_head_kv)) * hd;
            std::vector<double> score(p + 1);
            double max = -INFINITY;
            for (size_t j = 0; j <= p; ++j) {
                double dot = 0.0;
                for (size_t d = 0; d < hd; ++d) dot += static_cast<double>(q[p][qo + d]) * k[j][ko + d];
                score[j] = dot * scale;
                max = std::max(max, score[j]);
            }
            double total = 0.0;
            for (double& s : score) total += (s = std::exp(s - max));
            for (size_t d = 0; d < hd; ++d) {
                double acc = 0.0;
                for (size_t j = 0; j <= p; ++j) acc += score[j] * v[j][ko + d];
                out[p][qo + d] = static_cast<float>(acc / total);
            }
        }
    }
    return out;
}

void add(Rows& x, const Rows& y) {
    for (size_t p = 0; p < x.size(); ++p) {
        for (size_t i = 0; i < x[p].size(); ++i) x[p][i] += y[p][i];
    }
}

}  // namespace

std::vector<std::vector<float>> reference_logits(const cellm_model_view& model, std::span<const int32_t> tokens,
                                                 Arithmetic arithmetic) {
    auto matmul = [arithmetic](const cellm_tensor_info& w, const Rows& x) { return testing::matmul(w, x, arithmetic); };
    const Reader r{model};
    const int64_t n_embd = r.count("llama.embedding_length");
    const int64_t n_layer = r.count("llama.block_count");
    const int64_t n_head = r.count("llama.attention.head_count");
    const auto n_head_kv = static_cast<int64_t>(r.number_or("llama.attention.head_count_kv", double(n_head)));
    const auto head_dim = static_cast<int64_t>(r.number_or("llama.attention.key_length", double(n_embd / n_head)));
    const double eps = r.number("llama.attention.layer_norm_rms_epsilon");

    Rope rope{head_dim, static_cast<int64_t>(r.number_or("llama.rope.dimension_count", double(head_dim))),
              r.number_or("llama.rope.freq_base", 10000.0), 1.0, r.string_or("cellm.rope.layout", "") == "halves", {}};
    if (r.string_or("llama.rope.scaling.type", "none") == "linear") {
        const double factor = r.number_or("llama.rope.scaling.factor", 0.0);
        if (factor != 0.0) rope.freq_scale = 1.0 / factor;
    }
    if (const cellm_tensor_info* f = r.find("rope_freqs.weight")) rope.freq_factors = row(*f, 0);

    const cellm_tensor_info& token_embd = r.tensor("token_embd.weight");
    Rows x;
    for (int32_t t : tokens) {
        if (t < 0 || t >= token_embd.ne[1]) {
            throw std::out_of_range("token " + std::to_string(t) + " outside the vocab");
        }
        x.push_back(row(token_embd, t));
    }

    for (int64_t il = 0; il < n_layer; ++il) {
        const std::string blk = "blk." + std::to_string(il) + ".";
        Rows h = rms_norm(x, r.tensor(blk + "attn_norm.weight"), eps);
        Rows q = matmul(r.tensor(blk + "attn_q.weight"), h);
        Rows k = matmul(r.tensor(blk + "attn_k.weight"), h);
        Rows v = matmul(r.tensor(blk + "attn_v.weight"), h);
        add_bias(q, r.find(blk + "attn_q.bias"));
        add_bias(k, r.find(blk + "attn_k.bias"));
        add_bias(v, r.find(blk + "attn_v.bias"));
        for (size_t p = 0; p < x.size(); ++p) {
            rope.apply(q[p], static_cast<int64_t>(p));
            rope.apply(k[p], static_cast<int64_t>(p));
        }
        Rows attn = matmul(r.tensor(blk + "attn_output.weight"), attention(q, k, v, n_head, n_head_kv, head_dim));
        add_bias(attn, r.find(blk + "attn_output.bias"));
        add(x, attn);

        h = rms_norm(x, r.tensor(blk + "ffn_norm.weight"), eps);
        Rows gate = matmul(r.tensor(blk + "ffn_gate.weight"), h);
        const Rows up = matmul(r.tensor(blk + "ffn_up.weight"), h);
        for (size_t p = 0; p < gate.size(); ++p) {
            for (size_t i = 0; i < gate[p].size(); ++i) {
                const double g = gate[p][i];
                gate[p][i] = static_cast<float>(g / (1.0 + std::exp(-g))) * up[p][i];
            }
        }
        add(x, matmul(r.tensor(blk + "ffn_down.weight"), gate));
    }

    x = rms_norm(x, r.tensor("output_norm.weight"), eps);
    const cellm_tensor_info* output = r.find("output.weight");
    return matmul(output != nullptr ? *output : token_embd, x);
}

}  // namespace cellm::testing
