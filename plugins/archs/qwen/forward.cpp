// One step of Qwen2 / Qwen2.5 / Qwen3, top to bottom:
//
//   x = token_embd[tokens]
//   for each layer:
//       h = rmsnorm(x) * attn_norm
//       q, k, v = Wq h (+ bq), Wk h (+ bk), Wv h (+ bv)          biases: Qwen2 only
//       q, k = rmsnorm(each head of q) * q_norm, ... * k_norm    Qwen3 only, before RoPE
//       q, k = rope(q), rope(k)                                   NEOX pairs (i, i + head_dim/2)
//       x = x + Wo attention(q, cached k, cached v)
//       h = rmsnorm(x) * ffn_norm
//       x = x + Wdown (silu(Wgate h) * Wup h)
//   logits = Wout (rmsnorm(x) * output_norm)                      Wout = token_embd when tied
#include "forward.hpp"

#include <cmath>
#include <string>

namespace cellm::qwen {

void build_forward(const Model& model, const cellm_batch_shape& shape, GraphBuilder& g) {
    const auto [tokens, positions, token_seq, slots, block_table, output_rows] = g.step_inputs(shape);
    const Hparams& hp = model.hp;
    const int64_t n_tokens = shape.n_tokens;
    const float attention_scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
    const auto rope = [&](int32_t heads, const std::string& name) {
        const int32_t no_freq_factors = -1;  // Qwen has no rope_freqs tensor
        return g.rope(heads, positions, no_freq_factors, hp.n_rot, hp.rope_mode, hp.rope_freq_base,
                      hp.rope_freq_scale, name);
    };

    int32_t x = g.get_rows(g.weight(model.token_embd), tokens, "inp_embd");  // [n_embd, n_tokens]

    for (int32_t il = 0; il < hp.n_layer; ++il) {
        const Layer& layer = model.layers[static_cast<size_t>(il)];
        const std::string blk = "blk." + std::to_string(il) + ".";

        // Attention.
        int32_t h = g.rms_norm(x, g.weight(layer.attn_norm), hp.rms_eps, blk + "attn_norm");
        int32_t q = g.linear(layer.attn_q, layer.attn_q_bias, h, blk + "attn_q");
        int32_t k = g.linear(layer.attn_k, layer.attn_k_bias, h, blk + "attn_k");
        const int32_t v = g.linear(layer.attn_v, layer.attn_v_bias, h, blk + "attn_v");

        q = g.reshape(q, {hp.head_dim, hp.n_head, n_tokens, 1}, blk + "q_heads");
        k = g.reshape(k, {hp.head_dim, hp.n_head_kv, n_tokens, 1}, blk + "k_heads");
        if (layer.attn_q_norm != kAbsent) {
            // RMS_NORM works over ne[0], here each head's head_dim values.
            q = g.rms_norm(q, g.weight(layer.attn_q_norm), hp.rms_eps, blk + "attn_q_norm");
            k = g.rms_norm(k, g.weight(layer.attn_k_norm), hp.rms_eps, blk + "attn_k_norm");
        }
        q = rope(q, blk + "q_rope");
        k = g.reshape(rope(k, blk + "k_rope"), {hp.kv_dim(), n_tokens, 1, 1}, blk + "k_rows");

        const int32_t k_pool = g.kv_store(g.kv_cache(il, 0, hp.kv_dim(), blk + "k_cache"), k, slots, blk + "k_store");
        const int32_t v_pool = g.kv_store(g.kv_cache(il, 1, hp.kv_dim(), blk + "v_cache"), v, slots, blk + "v_store");
        const int32_t attn = g.attention({q, k_pool, v_pool, block_table, token_seq, positions, hp.n_head,
                                          hp.n_head_kv, hp.head_dim, shape.block_size, attention_scale},
                                         blk + "attn");
        x = g.add(x, g.matmul(g.weight(layer.attn_output), attn, blk + "attn_output"), blk + "attn_residual");

        // Feed-forward (SwiGLU).
        h = g.rms_norm(x, g.weight(layer.ffn_norm), hp.rms_eps, blk + "ffn_norm");
        const int32_t gate = g.matmul(g.weight(layer.ffn_gate), h, blk + "ffn_gate");
        const int32_t up = g.matmul(g.weight(layer.ffn_up), h, blk + "ffn_up");
        x = g.add(x, g.matmul(g.weight(layer.ffn_down), g.swiglu(gate, up, blk + "ffn_swiglu"), blk + "ffn_down"),
                  blk + "ffn_residual");
    }

    // Classifier over the rows whose logits are wanted.
    x = g.get_rows(x, output_rows, "output_rows");
    x = g.rms_norm(x, g.weight(model.output_norm), hp.rms_eps, "output_norm");
    g.output(g.matmul(g.weight(model.output), x, "logits"));
}

}  // namespace cellm::qwen
