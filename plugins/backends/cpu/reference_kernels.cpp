#include "reference_kernels.hpp"

#include "blocks.h"
#include "coded_kv.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace cellm::cpu {
namespace {

struct Context {
    Plan& plan;
    int32_t index;
    const Node& node;
    int64_t begin = 0, end = 0;  // the units (see reference_parts) this call computes
    const Node& src(int k) const { return plan.nodes[static_cast<size_t>(node.src[static_cast<size_t>(k)])]; }
    bool has(int k) const { return node.src[static_cast<size_t>(k)] >= 0; }
};

float dot(const float* a, const float* b, int64_t n) {
    return dot_in_lanes(a, [b](int64_t i) { return b[i]; }, n);
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
float gelu(float x) {
    constexpr float sqrt_2_over_pi = 0.7978845608028654f;
    return 0.5f * x * (1.0f + std::tanh(sqrt_2_over_pi * (x + 0.044715f * x * x * x)));
}

// Row (i1, i2, i3) of a tensor broadcast to a larger shape: dims of size 1 repeat.
const float* broadcast_row(const Node& t, int64_t i1, int64_t i2, int64_t i3) {
    const int64_t r = (t.ne[1] == 1 ? 0 : i1) + t.ne[1] * ((t.ne[2] == 1 ? 0 : i2) + t.ne[2] * (t.ne[3] == 1 ? 0 : i3));
    return t.f32() + r * t.ne[0];
}

// Rows [begin, end) of out = a op b with b broadcast.
template <class Op>
void broadcast_apply(const Node& out, const float* a, const Node& b, int64_t begin, int64_t end, Op op) {
    for (int64_t r = begin; r < end; ++r) {
        const int64_t i1 = r % out.ne[1], i2 = r / out.ne[1] % out.ne[2], i3 = r / (out.ne[1] * out.ne[2]);
        const float* rb = broadcast_row(b, i1, i2, i3);
        const float* ra = a + r * out.ne[0];
        float* ro = out.f32() + r * out.ne[0];
        // Two loops rather than an index times a 0-or-1 step, which kept the compiler from vectorising them.
        if (b.ne[0] == 1) {
            for (int64_t i0 = 0; i0 < out.ne[0]; ++i0) ro[i0] = op(ra[i0], rb[0]);
        } else {
            for (int64_t i0 = 0; i0 < out.ne[0]; ++i0) ro[i0] = op(ra[i0], rb[i0]);
        }
    }
}

template <class F>
void map(const Context& c, F f) {
    const float* x = c.src(0).f32();
    float* y = c.node.f32();
    for (int64_t i = c.begin * c.node.ne[0]; i < c.end * c.node.ne[0]; ++i) y[i] = f(x[i]);
}

void get_rows(const Context& c) {
    const Node& table = c.src(0);
    const int32_t* ids = c.src(1).i32();
    const uint64_t row_bytes = blocks::row_bytes(table.type, table.ne[0]);
    graph::check_row_ids(error_prefix(), c.plan.nodes, c.index, ids, c.begin, c.end);
    for (int64_t i = c.begin; i < c.end; ++i) {
        blocks::dequantize_row(table.type, table.data + static_cast<uint64_t>(ids[i]) * row_bytes,
                               c.node.f32() + i * table.ne[0], table.ne[0]);
    }
}

// y = W x. Each column of x is prepared once as the weight type's dot product defines it (quantized to Q8 or
// Q8_K blocks, or rounded; see blocks::Activations), then every weight row meets every column.
void matmul(const Context& c) {
    const Node& w = c.src(0);
    const Node& x = c.src(1);
    const int64_t k = w.ne[0], m = w.ne[1], n = x.rows();
    const uint64_t row_bytes = blocks::row_bytes(w.type, k);
    auto& columns = c.plan.columns;
    for (int64_t col = 0; col < n; ++col) columns[static_cast<size_t>(col)].prepare(w.type, x.f32() + col * k, k);
    const bool expand = !blocks::has_q8_dot(w.type) && !blocks::has_q8k_dot(w.type);
    float* expanded = c.plan.row.data();
    for (int64_t r = 0; r < m; ++r) {
        const std::byte* row = w.data + static_cast<uint64_t>(r) * row_bytes;
        if (expand) blocks::dequantize_row(w.type, row, expanded, k);
        for (int64_t col = 0; col < n; ++col) c.node.f32()[col * m + r] = columns[static_cast<size_t>(col)].dot(row, expanded);
    }
}

void view(const Context& c) {
    const Node& out = c.node;
    const float* in = c.src(0).f32();
    for (int64_t r = c.begin; r < c.end; ++r) {
        const int64_t i1 = r % out.ne[1], i2 = r / out.ne[1] % out.ne[2], i3 = r / (out.ne[1] * out.ne[2]);
        const int64_t from = out.iparams[0] + i1 * out.iparams[1] + i2 * out.iparams[2] + i3 * out.iparams[3];
        std::copy(in + from, in + from + out.ne[0], out.f32() + r * out.ne[0]);
    }
}

void rms_norm(const Context& c) {
    const Node& x = c.src(0);
    const int64_t n = x.ne[0];
    const float eps = c.node.fparams[0];
    // Each row's sum of squares in double, in index order. Four rows go at once, so that their chains of
    // dependent adds overlap (one row alone waits on each add's latency: a tenth of an 8-session decode step).
    // Then out = x * scale, times the weight, as two float roundings in one pass (apart, the weight's pass
    // took a third of the op).
    auto normalize = [&]<int Rows>(int64_t r) {
        double sum[Rows] = {};
        for (int64_t i = 0; i < n; ++i)
            for (int j = 0; j < Rows; ++j) {
                const auto v = static_cast<double>(x.f32()[(r + j) * n + i]);
                sum[j] += v * v;
            }
        for (int j = 0; j < Rows; ++j) {
            const float scale = 1.0f / std::sqrt(static_cast<float>(sum[j] / static_cast<double>(n)) + eps);
            const float* in = x.f32() + (r + j) * n;
            float* out = c.node.f32() + (r + j) * n;
            if (!c.has(1)) {
                for (int64_t i = 0; i < n; ++i) out[i] = in[i] * scale;
                continue;
            }
            // The weight is [ne0] (graph checks), its row broadcast over the node's rows.
            const Node& y = c.node;
            const int64_t row = r + j;
            const float* weight = broadcast_row(c.src(1), row % y.ne[1], row / y.ne[1] % y.ne[2], row / (y.ne[1] * y.ne[2]));
            for (int64_t i = 0; i < n; ++i) out[i] = (in[i] * scale) * weight[i];
        }
    };
    int64_t r = c.begin;
    for (; r + 4 <= c.end; r += 4) normalize.template operator()<4>(r);
    for (; r < c.end; ++r) normalize.template operator()<1>(r);
}

// LAYER_NORM, row by row, in this order (other backends follow it):
//   mean = (x_0 + x_1 + ... + x_{n-1}) / n        in double, each x_i widened exactly, summed in index order
//   var  = ((x_0 - mean)^2 + ... ) / n             in double, the same order: the biased variance, a second pass
//   m = float(mean), s = 1.0f / sqrtf(float(var) + eps), out_i = (x_i - m) * s      in float
// then, as separate float roundings (no fused multiply-add), out_i = out_i * w_i with a weight and
// out_i = out_i + b_i with a bias, each broadcast as RMS_NORM's weight is.
void layer_norm(const Context& c) {
    const Node& x = c.src(0);
    const int64_t n = x.ne[0];
    const float eps = c.node.fparams[0];
    for (int64_t r = c.begin; r < c.end; ++r) {
        const float* in = x.f32() + r * n;
        float* out = c.node.f32() + r * n;
        double sum = 0.0;
        for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(in[i]);
        const double mean = sum / static_cast<double>(n);
        double squares = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            const double d = static_cast<double>(in[i]) - mean;
            squares += d * d;
        }
        const float m = static_cast<float>(mean);
        const float scale = 1.0f / std::sqrt(static_cast<float>(squares / static_cast<double>(n)) + eps);
        for (int64_t i = 0; i < n; ++i) out[i] = (in[i] - m) * scale;
    }
    if (c.has(1)) broadcast_apply(c.node, c.node.f32(), c.src(1), c.begin, c.end, [](float a, float w) { return a * w; });
    if (c.has(2)) broadcast_apply(c.node, c.node.f32(), c.src(2), c.begin, c.end, [](float a, float b) { return a + b; });
}

// Patches [begin, end): patch j is image j / per_image's patch (py, px) of its grid, row by row; each of its rows
// of p pixels, channel by channel, is a run of the output column.
void patches(const Context& c) {
    const Node& image = c.src(0);
    const int64_t p = c.node.iparams[0], width = image.ne[0], height = image.ne[1], channels = image.ne[2];
    const int64_t across = width / p, per_image = (height / p) * across;
    for (int64_t j = c.begin; j < c.end; ++j) {
        const int64_t n = j / per_image, py = j % per_image / across, px = j % across;
        float* out = c.node.f32() + j * c.node.ne[0];
        for (int64_t ch = 0; ch < channels; ++ch)
            for (int64_t ky = 0; ky < p; ++ky) {
                const float* in = image.f32() + ((n * channels + ch) * height + py * p + ky) * width + px * p;
                std::copy(in, in + p, out + (ch * p + ky) * p);
            }
    }
}

// (token, head) units [begin, end), unit t * n_head + h: query head h of token t against every key of t's group
// through KV head h / (n_head / n_head_kv). The q . k dots are ATTENTION's (dot_in_lanes), the weights its softmax
// (attention_weights, no soft-cap), and each output sums weight * value in float, keys in order.
void self_attention(const Context& c) {
    const Node& q = c.src(0);
    const Node& k = c.src(1);
    const Node& v = c.src(2);
    const int64_t n_head = c.node.iparams[0], n_head_kv = c.node.iparams[1], head_dim = c.node.iparams[2];
    const int64_t group = c.node.iparams[3], per_kv_head = n_head / n_head_kv;
    AttentionShape a;  // attention_weights reads the scale and the soft-cap only
    a.scale = c.node.fparams[0];
    std::vector<float> scores(static_cast<size_t>(group));
    for (int64_t u = c.begin; u < c.end; ++u) {
        const int64_t t = u / n_head, h = u % n_head, first = t / group * group, kv_head = h / per_kv_head;
        const float* qh = q.f32() + u * head_dim;
        for (int64_t j = 0; j < group; ++j)
            scores[static_cast<size_t>(j)] = dot(qh, k.f32() + ((first + j) * n_head_kv + kv_head) * head_dim, head_dim);
        attention_weights(a, scores.data(), group);
        float* out = c.node.f32() + u * head_dim;
        std::fill(out, out + head_dim, 0.0f);
        for (int64_t j = 0; j < group; ++j) {
            const float w = scores[static_cast<size_t>(j)];
            const float* vj = v.f32() + ((first + j) * n_head_kv + kv_head) * head_dim;
            for (int64_t d = 0; d < head_dim; ++d) out[d] += w * vj[d];
        }
    }
}

// Columns [begin, end) of SET_ROWS: src0's, or the new row that names the column. Every part checks every index
// before it writes, so a bad one is one error whichever part meets it.
void set_rows(const Context& c) {
    const Node& into = c.src(0);
    const Node& rows = c.src(1);
    const int32_t* at = c.src(2).i32();
    graph::check_set_rows(error_prefix(), c.plan.nodes, c.index, at);
    const int64_t n = into.ne[0];
    std::copy(into.f32() + c.begin * n, into.f32() + c.end * n, c.node.f32() + c.begin * n);
    for (int64_t i = 0; i < rows.ne[1]; ++i)
        if (at[i] >= c.begin && at[i] < c.end) std::copy(rows.f32() + i * n, rows.f32() + (i + 1) * n, c.node.f32() + at[i] * n);
}

void glu(const Context& c) {
    const float* gate = c.src(0).f32();
    const float* up = c.src(1).f32();
    const bool use_gelu = c.node.iparams[0] == 1;
    for (int64_t i = c.begin * c.node.ne[0]; i < c.end * c.node.ne[0]; ++i)
        c.node.f32()[i] = (use_gelu ? gelu(gate[i]) : silu(gate[i])) * up[i];
}

// theta_i = pos * freq_scale * base^(-2i/n_rot) / factor_i rotates pair i; dims >= n_rot pass through.
void rope(const Context& c) {
    const Node& x = c.src(0);
    const int32_t* pos = c.src(1).i32();
    const int64_t half = c.node.iparams[0] / 2;
    const float* factors = c.has(2) ? c.src(2).f32() : nullptr;
    std::vector<float> cos_sin(static_cast<size_t>(2 * half));
    for (int64_t t = c.begin; t < c.end; ++t) {
        rope_angles(c.node, pos[t], factors, cos_sin.data());
        rope_rotate(c.node, x, t, cos_sin.data());
    }
}

// One row of n floats in the I8 encoding (graph.h), groups of `width` values. NaN codes as -127 rather than
// reaching an undefined float-to-int conversion.
void quantize_i8(const float* x, int64_t n, int64_t width, int8_t* codes, float* scales) {
    for (int64_t g = 0; g < n / width; ++g) {
        const float* in = x + g * width;
        float amax = 0.0f;
        for (int64_t i = 0; i < width; ++i) amax = std::max(amax, std::fabs(in[i]));
        const float scale = amax / 127.0f;
        scales[g] = scale;
        for (int64_t i = 0; i < width; ++i) {
            const float code = scale == 0.0f ? 0.0f : std::fmin(std::fmax(in[i] / scale, -127.0f), 127.0f);
            codes[g * width + i] = static_cast<int8_t>(std::nearbyint(code));
        }
    }
}

void kv_store(const Context& c) {
    const Node& pool = c.node;  // aliases src0's storage
    const Node& rows = c.src(1);
    const int32_t* slots = c.src(2).i32();
    const int64_t n_tokens = rows.ne[1];
    // Check every slot before writing any, so a bad batch leaves the cache untouched.
    graph::check_slots(error_prefix(), c.plan.nodes, c.index, slots);
    if (pool.type == CELLM_TYPE_I8) {
        const Node& scales = c.src(3);
        for (int64_t t = 0; t < n_tokens; ++t)
            quantize_i8(rows.f32() + t * rows.ne[0], pool.ne[0], pool.ne[0] / scales.ne[0],
                        reinterpret_cast<int8_t*>(pool.data) + slots[t] * pool.ne[0], scales.f32() + slots[t] * scales.ne[0]);
        return;
    }
    if (coded_kv(pool.type)) {
        const Node& scales = c.src(3);
        const uint64_t row_bytes = static_cast<uint64_t>(pool.ne[0] / cellm_dtype_block_size(pool.type) *
                                                         cellm_dtype_type_size(pool.type));
        for (int64_t t = 0; t < n_tokens; ++t)
            code_row(pool.type, rows.f32() + t * rows.ne[0], pool.ne[0], pool.ne[0] / scales.ne[0],
                     reinterpret_cast<uint8_t*>(pool.data) + static_cast<uint64_t>(slots[t]) * row_bytes,
                     reinterpret_cast<uint16_t*>(scales.data) + slots[t] * scales.ne[0]);
        return;
    }
    const uint64_t row_bytes = blocks::row_bytes(pool.type, pool.ne[0]);
    for (int64_t t = 0; t < n_tokens; ++t)
        blocks::quantize_row(pool.type, rows.f32() + t * rows.ne[0], pool.data + static_cast<uint64_t>(slots[t]) * row_bytes,
                             pool.ne[0]);
}

// Part of one pool row as floats. `scales` is the scale pool of an I8 or coded pool, nullptr for the other types.
const float* pool_segment(const Node& pool, const Node* scales, int64_t slot, int64_t offset, int64_t n, float* scratch) {
    if (pool.type == CELLM_TYPE_F32) return pool.f32() + slot * pool.ne[0] + offset;
    if (pool.type == CELLM_TYPE_I8) expand_i8(pool, *scales, slot, offset, n, scratch);
    else if (coded_kv(pool.type)) expand_slot(pool, *scales, slot, offset, n, scratch);
    else blocks::dequantize_row(pool.type, pool.data + (slot * pool.ne[0] + offset) * 2, scratch, n);
    return scratch;
}

void attention(const Context& c) {
    const Node& q = c.src(0);
    const Node& k_pool = c.src(1);
    const Node& v_pool = c.src(2);
    const Node* k_scales = c.has(6) ? &c.src(6) : nullptr;
    const Node* v_scales = c.has(7) ? &c.src(7) : nullptr;
    const AttentionShape a = check_attention(c.plan, c.index);
    float* scores = c.plan.scores.data();
    float* kv_row = c.plan.row.data();
    float* acc = c.plan.row.data() + a.head_dim;
    float* q_rounded = c.plan.row.data() + 2 * a.head_dim;

    for (int64_t t = 0; t < a.n_tokens; ++t) {
        const int64_t first = a.first(t), last = a.position(t);
        for (int64_t h = 0; h < a.n_head; ++h) {
            // q meets the keys, and the attention weights meet the values, as MATMUL operands would: rounded to
            // the pool's type (so an F16 cache computes what llama.cpp's F16 cache computes); an F32 or I8 pool
            // leaves them as they are.
            const float* qh = q_rounded;
            blocks::round_activations(k_pool.type, q.f32() + (t * a.n_head + h) * a.head_dim, q_rounded, a.head_dim);
            const int64_t kv_offset = a.kv_offset(h);
            for (int64_t j = first; j <= last; ++j)
                scores[j - first] =
                    dot(qh, pool_segment(k_pool, k_scales, a.slot(t, j), kv_offset, a.head_dim, kv_row), a.head_dim);
            attention_weights(a, scores, last - first + 1);
            std::fill(acc, acc + a.head_dim, 0.0f);
            for (int64_t j = first; j <= last; ++j) {
                float w = scores[j - first];
                blocks::round_activations(v_pool.type, &w, &w, 1);
                const float* v = pool_segment(v_pool, v_scales, a.slot(t, j), kv_offset, a.head_dim, kv_row);
                for (int64_t d = 0; d < a.head_dim; ++d) acc[d] += w * v[d];
            }
            std::copy(acc, acc + a.head_dim, c.node.f32() + (t * a.n_head + h) * a.head_dim);
        }
    }
}

// Channels [begin, end) of SSM_CONV, every sequence row in turn. `window` holds a channel's last kernel inputs,
// oldest first: the slot's saved ones, then the row's tokens as they come.
void ssm_conv(const Context& c) {
    const Node& x = c.src(0);
    const Node& w = c.src(1);
    const Node& state = c.src(2);
    const int32_t* seq_of = c.src(3).i32();
    const int32_t* slots = c.src(4).i32();
    const int64_t channels = x.ne[0], n_tokens = x.ne[1], kernel = w.ne[0], n_seqs = c.src(4).ne[0];
    graph::check_state_rows(error_prefix(), c.plan.nodes, c.index, state, seq_of, n_tokens, slots, n_seqs);
    std::vector<float> window(static_cast<size_t>(kernel));
    for (int64_t r = 0; r < n_seqs; ++r) {
        float* saved = state.f32() + slots[r] * state.ne[0];
        for (int64_t ch = c.begin; ch < c.end; ++ch) {
            const float* taps = w.f32() + ch * kernel;
            for (int64_t j = 0; j + 1 < kernel; ++j) window[static_cast<size_t>(j)] = saved[j * channels + ch];
            for (int64_t t = 0; t < n_tokens; ++t) {
                if (seq_of[t] != r) continue;
                window[static_cast<size_t>(kernel - 1)] = x.f32()[t * channels + ch];
                float sum = 0.0f;
                for (int64_t j = 0; j < kernel; ++j) sum += taps[j] * window[static_cast<size_t>(j)];
                c.node.f32()[t * channels + ch] = sum;
                std::copy(window.begin() + 1, window.end(), window.begin());
            }
            for (int64_t j = 0; j + 1 < kernel; ++j) saved[j * channels + ch] = window[static_cast<size_t>(j)];
        }
    }
}

// Value heads [begin, end) of DELTA_NET, every sequence row's tokens in order against the row's state.
void delta_net(const Context& c) {
    const Node& q = c.src(0);
    const Node& k = c.src(1);
    const Node& v = c.src(2);
    const float* g = c.src(3).f32();
    const float* beta = c.src(4).f32();
    const Node& state = c.src(5);
    const int32_t* seq_of = c.src(6).i32();
    const int32_t* slots = c.src(7).i32();
    const int64_t d_k = q.ne[0], n_k = q.ne[1], n_tokens = q.ne[2], d_v = v.ne[0], n_v = v.ne[1];
    const int64_t n_seqs = c.src(7).ne[0], group = n_v / n_k;
    const bool tiled = c.node.iparams[0] == 1;
    graph::check_state_rows(error_prefix(), c.plan.nodes, c.index, state, seq_of, n_tokens, slots, n_seqs);
    std::vector<float> u(static_cast<size_t>(d_v));
    for (int64_t r = 0; r < n_seqs; ++r) {
        for (int64_t h = c.begin; h < c.end; ++h) {
            float* s = state.f32() + slots[r] * state.ne[0] + h * d_k * d_v;  // S_h[i][j] at s[i * d_v + j]
            const int64_t kh = tiled ? h % n_k : h / group;
            for (int64_t t = 0; t < n_tokens; ++t) {
                if (seq_of[t] != r) continue;
                const float* qt = q.f32() + (t * n_k + kh) * d_k;
                const float* kt = k.f32() + (t * n_k + kh) * d_k;
                const float* vt = v.f32() + (t * n_v + h) * d_v;
                const float decay = std::exp(g[t * n_v + h]), b = beta[t * n_v + h];
                // u = beta (v - S^T k), with S already decayed.
                std::fill(u.begin(), u.end(), 0.0f);
                for (int64_t i = 0; i < d_k; ++i) {
                    float* row = s + i * d_v;
                    for (int64_t j = 0; j < d_v; ++j) {
                        row[j] *= decay;
                        u[static_cast<size_t>(j)] += row[j] * kt[i];
                    }
                }
                for (int64_t j = 0; j < d_v; ++j) u[static_cast<size_t>(j)] = b * (vt[j] - u[static_cast<size_t>(j)]);
                // S += k u^T, and the output reads the updated state: out = S^T q.
                float* out = c.node.f32() + (t * n_v + h) * d_v;
                std::fill(out, out + d_v, 0.0f);
                for (int64_t i = 0; i < d_k; ++i) {
                    float* row = s + i * d_v;
                    for (int64_t j = 0; j < d_v; ++j) {
                        row[j] += kt[i] * u[static_cast<size_t>(j)];
                        out[j] += row[j] * qt[i];
                    }
                }
            }
        }
    }
}

}  // namespace

void expand_i8(const Node& pool, const Node& scales, int64_t slot, int64_t offset, int64_t n, float* out) {
    const int8_t* codes = reinterpret_cast<const int8_t*>(pool.data) + slot * pool.ne[0];
    const float* row_scales = scales.f32() + slot * scales.ne[0];
    const int64_t width = pool.ne[0] / scales.ne[0];
    for (int64_t i = offset; i < offset + n; ++i) out[i - offset] = row_scales[i / width] * static_cast<float>(codes[i]);
}

void expand_slot(const Node& pool, const Node& scales, int64_t slot, int64_t offset, int64_t n, float* out) {
    const int64_t row_bytes = pool.ne[0] / cellm_dtype_block_size(pool.type) * cellm_dtype_type_size(pool.type);
    expand_coded(pool.type, reinterpret_cast<const uint8_t*>(pool.data) + slot * row_bytes, reinterpret_cast<const uint16_t*>(scales.data) + slot * scales.ne[0],
                 pool.ne[0] / scales.ne[0], offset, n, out);
}

void attention_weights(const AttentionShape& a, float* scores, int64_t n) {
    float best = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
        float s = a.scale * scores[j];
        if (a.softcap > 0.0f) s = a.softcap * std::tanh(s / a.softcap);
        scores[j] = s;
        best = std::max(best, s);
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
        scores[j] = std::exp(scores[j] - best);
        sum += scores[j];
    }
    for (int64_t j = 0; j < n; ++j) scores[j] /= sum;
}

AttentionShape check_attention(Plan& plan, int32_t index) {
    const Context c{plan, index, plan.nodes[static_cast<size_t>(index)]};
    const Node& table = c.src(3);
    AttentionShape a;
    a.n_tokens = c.src(0).ne[2];
    a.n_head = c.node.iparams[0];
    a.group = a.n_head / c.node.iparams[1];
    a.head_dim = c.node.iparams[2];
    a.block_size = c.node.iparams[3];
    a.window = c.node.iparams[4];
    a.max_blocks = table.ne[0];
    a.scale = c.node.fparams[0];
    a.softcap = c.node.fparams[1];
    a.block_table = table.i32();
    a.seq_of = c.src(4).i32();
    a.pos_of = c.src(5).i32();
    graph::check_attention_inputs(error_prefix(), plan.nodes, index, a.block_table, a.seq_of, a.pos_of);
    return a;
}

int64_t reference_parts(const Plan& plan, int32_t index) {
    const Node& node = plan.nodes[static_cast<size_t>(index)];
    switch (node.op) {
    case CELLM_OP_ADD: case CELLM_OP_MUL: case CELLM_OP_SCALE: case CELLM_OP_RMS_NORM: case CELLM_OP_SILU:
    case CELLM_OP_GELU: case CELLM_OP_TANH: case CELLM_OP_GLU: case CELLM_OP_VIEW:
        return node.rows();
    case CELLM_OP_GET_ROWS: return node.ne[1];
    case CELLM_OP_ROPE: return node.ne[2];
    case CELLM_OP_SIGMOID: case CELLM_OP_SOFTPLUS: return node.rows();
    // Channels and value heads are independent; each part checks the whole step's rows before writing any state.
    case CELLM_OP_SSM_CONV: return node.ne[0];
    case CELLM_OP_DELTA_NET: return node.ne[1];
    case CELLM_OP_LAYER_NORM: return node.rows();
    case CELLM_OP_PATCHES: case CELLM_OP_SET_ROWS: return node.ne[1];
    case CELLM_OP_SELF_ATTENTION: return node.ne[1] * node.iparams[0];  // (token, head) pairs
    case CELLM_OP_HADAMARD: return node.nelements() / node.iparams[0];  // runs
    default: return 0;  // MATMUL and ATTENTION use the plan's scratch; KV_STORE checks every slot before writing
    }
}

void rope_angles(const Node& rope, int32_t position, const float* factors, float* cos_sin) {
    const int64_t half = rope.iparams[0] / 2;
    const double base = rope.fparams[0], scale = rope.fparams[1];
    for (int64_t i = 0; i < half; ++i) {
        double theta = position * scale * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(2 * half));
        if (factors != nullptr) theta /= factors[i];
        cos_sin[i] = static_cast<float>(std::cos(theta));
        cos_sin[half + i] = static_cast<float>(std::sin(theta));
    }
}

void rope_rotate(const Node& rope, const Node& x, int64_t t, const float* cos_sin) {
    const int64_t head_dim = x.ne[0], n_heads = x.ne[1], half = rope.iparams[0] / 2;
    const bool adjacent = rope.iparams[1] == CELLM_ROPE_ADJACENT;
    for (int64_t h = 0; h < n_heads; ++h) {
        const float* in = x.f32() + (t * n_heads + h) * head_dim;
        float* out = rope.f32() + (t * n_heads + h) * head_dim;
        std::copy(in, in + head_dim, out);
        for (int64_t i = 0; i < half; ++i) {
            const int64_t a = adjacent ? 2 * i : i, b = adjacent ? 2 * i + 1 : i + half;
            const float cs = cos_sin[i], sn = cos_sin[half + i];
            out[a] = in[a] * cs - in[b] * sn;
            out[b] = in[a] * sn + in[b] * cs;
        }
    }
}

void run_reference_part(Plan& plan, int32_t index, int64_t begin, int64_t end) {
    const Context c{plan, index, plan.nodes[static_cast<size_t>(index)], begin, end};
    switch (c.node.op) {
    case CELLM_OP_GET_ROWS: get_rows(c); break;
    case CELLM_OP_MATMUL: matmul(c); break;
    case CELLM_OP_ADD:
        broadcast_apply(c.node, c.src(0).f32(), c.src(1), begin, end, [](float a, float b) { return a + b; });
        break;
    case CELLM_OP_MUL:
        broadcast_apply(c.node, c.src(0).f32(), c.src(1), begin, end, [](float a, float b) { return a * b; });
        break;
    case CELLM_OP_SCALE: map(c, [s = c.node.fparams[0]](float x) { return x * s; }); break;
    case CELLM_OP_RMS_NORM: rms_norm(c); break;
    case CELLM_OP_SILU: map(c, silu); break;
    case CELLM_OP_GELU: map(c, gelu); break;
    case CELLM_OP_TANH: map(c, [](float x) { return std::tanh(x); }); break;
    case CELLM_OP_GLU: glu(c); break;
    case CELLM_OP_ROPE: rope(c); break;
    case CELLM_OP_KV_STORE: kv_store(c); break;
    case CELLM_OP_ATTENTION: attention(c); break;
    case CELLM_OP_VIEW: view(c); break;
    case CELLM_OP_SIGMOID: map(c, sigmoid); break;
    case CELLM_OP_SOFTPLUS: map(c, softplus); break;
    case CELLM_OP_SSM_CONV: ssm_conv(c); break;
    case CELLM_OP_DELTA_NET: delta_net(c); break;
    case CELLM_OP_LAYER_NORM: layer_norm(c); break;
    case CELLM_OP_PATCHES: patches(c); break;
    case CELLM_OP_SELF_ATTENTION: self_attention(c); break;
    case CELLM_OP_SET_ROWS: set_rows(c); break;
    case CELLM_OP_HADAMARD:
        for (int64_t r = begin; r < end; ++r) {
            const int64_t d = c.node.iparams[0];
            hadamard(c.src(0).f32() + r * d, c.node.f32() + r * d, d, c.src(1).f32(), c.node.fparams[0], c.node.iparams[1] == 1);
        }
        break;
    default: break;  // leaves, inputs (copied in by execute) and RESHAPE (an alias) do no work
    }
}

void run_reference(Plan& plan, int32_t index) {
    run_reference_part(plan, index, 0, reference_parts(plan, index));
}

}  // namespace cellm::cpu
