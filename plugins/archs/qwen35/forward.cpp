// One step of Qwen3.5 (text), top to bottom:
//
//   x = token_embd[tokens]
//   for each layer:
//       h = rmsnorm(x) * attn_norm
//       gated DeltaNet layer (linear attention):
//           qkv = silu(causal_conv(Wqkv h))                     kernel taps over the sequence, state carried
//           q, k, v = split(qkv);  q, k = l2norm(q) / sqrt(d_k), l2norm(k)
//           beta = sigmoid(Wbeta h);  g = ssm_a * softplus(Walpha h + dt_bias)      ssm_a = -exp(A_log)
//           o = delta_rule(q, k, v, g, beta)                    per value head, state carried
//           x = x + Wout (rmsnorm(o) * ssm_norm * silu(Wgate h))
//       gated full-attention layer:
//           q, gate = split(Wq h) per head;  k, v = Wk h, Wv h
//           q, k = rmsnorm(each head) * q_norm, ... * k_norm;  q, k = rope(q), rope(k)   leading n_rot dims
//           x = x + Wo (attention(q, cached k, cached v) * sigmoid(gate))
//       h = rmsnorm(x) * post_attention_norm
//       x = x + Wdown (silu(Wgate h) * Wup h)
//   logits = Wout (rmsnorm(x) * output_norm)                   Wout = token_embd when tied
#include "forward.hpp"

#include <cmath>
#include <string>

namespace cellm::qwen35 {
namespace {

struct Step {
    const Model& model;
    const cellm_batch_shape& shape;
    GraphBuilder& g;
    GraphBuilder::StepInputs in;
    int32_t state_slots;

    int64_t n_tokens() const { return shape.n_tokens; }

    int32_t delta_net(int32_t il, const Layer& layer, int32_t h, const std::string& blk) {
        const DeltaNetShape& s = model.ssm;
        const float eps = model.hp.rms_eps;
        const int64_t T = n_tokens(), channels = s.conv_channels();

        int32_t qkv = g.matmul(g.weight(layer.attn_qkv), h, blk + "attn_qkv");
        const int32_t conv_state = g.state(il, 0, s.conv_state(), blk + "conv_state");
        qkv = g.ssm_conv(qkv, g.weight(layer.ssm_conv1d), conv_state, in.token_seq, state_slots, blk + "ssm_conv");
        qkv = g.silu(qkv, blk + "ssm_conv_silu");
        // Each token's channels are q (n_k heads), k (n_k heads), then v (n_v heads).
        const auto heads = [&](int64_t offset, int64_t dim, int64_t n, const std::string& name) {
            return g.view(qkv, {dim, n, T, 1}, static_cast<int32_t>(offset),
                          {static_cast<int32_t>(dim), static_cast<int32_t>(channels), 0}, blk + name);
        };
        int32_t q = heads(0, s.d_k, s.n_k, "ssm_q");
        int32_t k = heads(s.key_dim(), s.d_k, s.n_k, "ssm_k");
        const int32_t v = heads(2 * int64_t{s.key_dim()}, s.d_v, s.n_v, "ssm_v");
        // l2norm(x) = rmsnorm(x) / sqrt(n) when rmsnorm's eps is l2norm's divided by n; the query also takes
        // the 1/sqrt(d_k) attention scale.
        const float l2_eps = 1e-6f / static_cast<float>(s.d_k);
        const auto d_k = static_cast<float>(s.d_k);
        q = g.scale(g.rms_norm(q, -1, l2_eps, blk + "ssm_q_norm"), 1.0f / d_k, blk + "ssm_q_scaled");
        k = g.scale(g.rms_norm(k, -1, l2_eps, blk + "ssm_k_norm"), 1.0f / std::sqrt(d_k), blk + "ssm_k_scaled");

        const int32_t beta = g.sigmoid(g.matmul(g.weight(layer.ssm_beta), h, blk + "ssm_beta"), blk + "ssm_beta_sigmoid");
        int32_t decay = g.add(g.matmul(g.weight(layer.ssm_alpha), h, blk + "ssm_alpha"), g.weight(layer.ssm_dt_bias),
                              blk + "ssm_alpha_biased");
        decay = g.mul(g.softplus(decay, blk + "ssm_softplus"), g.weight(layer.ssm_a), blk + "ssm_decay");

        const int32_t state = g.state(il, 1, s.recurrent_state(), blk + "recurrent_state");
        int32_t o = g.delta_net({q, k, v, decay, beta, state, in.token_seq, state_slots, s.head_order}, blk + "delta_net");
        // Gated RMSNorm per value head: rmsnorm(o) * ssm_norm * silu(z).
        o = g.rms_norm(o, g.weight(layer.ssm_norm), eps, blk + "ssm_norm");
        const int32_t z = g.reshape(g.matmul(g.weight(layer.attn_gate), h, blk + "attn_gate"), {s.d_v, s.n_v, T, 1},
                                    blk + "z_heads");
        o = g.reshape(g.swiglu(z, o, blk + "ssm_gated"), {s.value_dim(), T, 1, 1}, blk + "ssm_rows");
        return g.matmul(g.weight(layer.ssm_out), o, blk + "ssm_out");
    }

    int32_t attention(int32_t il, const Layer& layer, int32_t h, const std::string& blk) {
        const Hparams& hp = model.hp;
        const int64_t T = n_tokens(), hd = hp.head_dim;
        const auto rope = [&](int32_t heads, const std::string& name) {
            const int32_t no_freq_factors = -1;
            return g.rope(heads, in.positions, no_freq_factors, hp.n_rot, hp.rope_mode, hp.rope_freq_base,
                          hp.rope_freq_scale, name);
        };
        // Each head's 2 * head_dim outputs are its query, then its output gate.
        const int32_t q_gate = g.matmul(g.weight(layer.attn_q), h, blk + "attn_q");
        const std::array<int32_t, 3> per_head = {static_cast<int32_t>(2 * hd), static_cast<int32_t>(2 * hd * hp.n_head), 0};
        int32_t q = g.view(q_gate, {hd, hp.n_head, T, 1}, 0, per_head, blk + "q_heads");
        const int32_t gate = g.reshape(g.view(q_gate, {hd, hp.n_head, T, 1}, static_cast<int32_t>(hd), per_head,
                                              blk + "gate_heads"),
                                       {hp.q_dim(), T, 1, 1}, blk + "attn_gate");
        int32_t k = g.reshape(g.matmul(g.weight(layer.attn_k), h, blk + "attn_k"), {hd, hp.n_head_kv, T, 1}, blk + "k_heads");
        const int32_t v = g.matmul(g.weight(layer.attn_v), h, blk + "attn_v");

        q = rope(g.rms_norm(q, g.weight(layer.attn_q_norm), hp.rms_eps, blk + "attn_q_norm"), blk + "q_rope");
        k = rope(g.rms_norm(k, g.weight(layer.attn_k_norm), hp.rms_eps, blk + "attn_k_norm"), blk + "k_rope");
        k = g.reshape(k, {hp.kv_dim(), T, 1, 1}, blk + "k_rows");

        const int32_t k_pool = g.kv_store(g.kv_cache(il, 0, hp.kv_dim(), blk + "k_cache"), k, in.slots, blk + "k_store");
        const int32_t v_pool = g.kv_store(g.kv_cache(il, 1, hp.kv_dim(), blk + "v_cache"), v, in.slots, blk + "v_store");
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        int32_t attn = g.attention({q, k_pool, v_pool, in.block_table, in.token_seq, in.positions, hp.n_head,
                                    hp.n_head_kv, hp.head_dim, shape.block_size, scale},
                                   blk + "attn");
        attn = g.mul(attn, g.sigmoid(gate, blk + "attn_gate_sigmoid"), blk + "attn_gated");
        return g.matmul(g.weight(layer.attn_output), attn, blk + "attn_output");
    }
};

}  // namespace

void build_forward(const Model& model, const cellm_batch_shape& shape, GraphBuilder& g) {
    const Hparams& hp = model.hp;
    Step step{model, shape, g, g.step_inputs(shape), -1};
    step.state_slots = g.input(CELLM_INPUT_STATE_SLOTS, shape.n_seqs, 1, "state_slots");

    int32_t x = g.get_rows(g.weight(model.token_embd), step.in.tokens, "inp_embd");  // [n_embd, n_tokens]

    for (int32_t il = 0; il < hp.n_layer; ++il) {
        const Layer& layer = model.layers[static_cast<size_t>(il)];
        const std::string blk = "blk." + std::to_string(il) + ".";

        const int32_t h = g.rms_norm(x, g.weight(layer.attn_norm), hp.rms_eps, blk + "attn_norm");
        const int32_t mixed = layer.recurrent ? step.delta_net(il, layer, h, blk) : step.attention(il, layer, h, blk);
        x = g.add(x, mixed, blk + "attn_residual");

        // Feed-forward (SwiGLU).
        const int32_t f = g.rms_norm(x, g.weight(layer.post_attention_norm), hp.rms_eps, blk + "post_attention_norm");
        const int32_t gate = g.matmul(g.weight(layer.ffn_gate), f, blk + "ffn_gate");
        const int32_t up = g.matmul(g.weight(layer.ffn_up), f, blk + "ffn_up");
        x = g.add(x, g.matmul(g.weight(layer.ffn_down), g.swiglu(gate, up, blk + "ffn_swiglu"), blk + "ffn_down"),
                  blk + "ffn_residual");
    }

    // Classifier over the rows whose logits are wanted.
    x = g.get_rows(x, step.in.output_rows, "output_rows");
    x = g.rms_norm(x, g.weight(model.output_norm), hp.rms_eps, "output_norm");
    g.output(g.matmul(g.weight(model.output), x, "logits"));
}

}  // namespace cellm::qwen35
