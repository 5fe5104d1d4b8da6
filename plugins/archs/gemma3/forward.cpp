// One step of Gemma 3, top to bottom:
//
//   x = token_embd[tokens] * sqrt(n_embd)
//   for each layer (local: sliding window, RoPE base 10000; every sixth global: all positions, the file's base):
//       h = rmsnorm(x) * attn_norm
//       q, k, v = Wq h, Wk h, Wv h
//       q, k = rmsnorm(each head of q) * q_norm, ... * k_norm      before RoPE
//       q, k = rope(q), rope(k)                                     NEOX pairs (i, i + head_dim/2)
//       x = x + rmsnorm(Wo attention(q, cached k, cached v)) * post_attention_norm
//       h = rmsnorm(x) * ffn_norm
//       x = x + rmsnorm(Wdown (gelu(Wgate h) * Wup h)) * post_ffw_norm
//   logits = token_embd (rmsnorm(x) * output_norm)                  soft-capped when the file says so
#include "forward.hpp"

#include <cmath>
#include <string>

namespace cellm::gemma3 {

void build_forward(const Model& model, const cellm_batch_shape& shape, GraphBuilder& g) {
    const auto [tokens, positions, token_seq, slots, block_table, output_rows] = g.step_inputs(shape);
    const Hparams& hp = model.hp;
    const int64_t n_tokens = shape.n_tokens;
    const auto softcap = [&](int32_t x, float cap, const std::string& name) {
        return g.scale(g.tanh(g.scale(x, 1.0f / cap, name + "_in"), name + "_tanh"), cap, name);
    };

    int32_t x = g.get_rows(g.weight(model.token_embd), tokens, "inp_embd");  // [n_embd, n_tokens]
    x = g.scale(x, std::sqrt(static_cast<float>(hp.n_embd)), "inp_scaled");

    for (int32_t il = 0; il < hp.n_layer; ++il) {
        const Layer& layer = model.layers[static_cast<size_t>(il)];
        const LayerAttention span = model.attention(il);
        const std::string blk = "blk." + std::to_string(il) + ".";
        const auto rope = [&](int32_t heads, const std::string& name) {
            const int32_t no_freq_factors = -1;  // Gemma has no rope_freqs tensor
            return g.rope(heads, positions, no_freq_factors, hp.n_rot, hp.rope_mode, span.rope_freq_base,
                          span.rope_freq_scale, name);
        };

        // Attention.
        int32_t h = g.rms_norm(x, g.weight(layer.attn_norm), hp.rms_eps, blk + "attn_norm");
        int32_t q = g.matmul(g.weight(layer.attn_q), h, blk + "attn_q");
        int32_t k = g.matmul(g.weight(layer.attn_k), h, blk + "attn_k");
        const int32_t v = g.matmul(g.weight(layer.attn_v), h, blk + "attn_v");

        // RMS_NORM works over ne[0], here each head's head_dim values.
        q = g.reshape(q, {hp.head_dim, hp.n_head, n_tokens, 1}, blk + "q_heads");
        k = g.reshape(k, {hp.head_dim, hp.n_head_kv, n_tokens, 1}, blk + "k_heads");
        q = rope(g.rms_norm(q, g.weight(layer.attn_q_norm), hp.rms_eps, blk + "attn_q_norm"), blk + "q_rope");
        k = rope(g.rms_norm(k, g.weight(layer.attn_k_norm), hp.rms_eps, blk + "attn_k_norm"), blk + "k_rope");
        k = g.reshape(k, {hp.kv_dim(), n_tokens, 1, 1}, blk + "k_rows");

        const int32_t k_pool = g.kv_store(g.kv_cache(il, 0, hp.kv_dim(), blk + "k_cache"), k, slots, blk + "k_store");
        const int32_t v_pool = g.kv_store(g.kv_cache(il, 1, hp.kv_dim(), blk + "v_cache"), v, slots, blk + "v_store");
        const int32_t attn = g.attention({q, k_pool, v_pool, block_table, token_seq, positions, hp.n_head,
                                          hp.n_head_kv, hp.head_dim, shape.block_size, model.attention_scale,
                                          span.window, model.attn_softcap},
                                         blk + "attn");
        h = g.matmul(g.weight(layer.attn_output), attn, blk + "attn_output");
        h = g.rms_norm(h, g.weight(layer.post_attention_norm), hp.rms_eps, blk + "post_attention_norm");
        x = g.add(x, h, blk + "attn_residual");

        // Feed-forward (GeGLU).
        h = g.rms_norm(x, g.weight(layer.ffn_norm), hp.rms_eps, blk + "ffn_norm");
        const int32_t gate = g.matmul(g.weight(layer.ffn_gate), h, blk + "ffn_gate");
        const int32_t up = g.matmul(g.weight(layer.ffn_up), h, blk + "ffn_up");
        h = g.matmul(g.weight(layer.ffn_down), g.geglu(gate, up, blk + "ffn_geglu"), blk + "ffn_down");
        h = g.rms_norm(h, g.weight(layer.post_ffw_norm), hp.rms_eps, blk + "post_ffw_norm");
        x = g.add(x, h, blk + "ffn_residual");
    }

    // Classifier over the rows whose logits are wanted; Gemma's embeddings are tied.
    x = g.get_rows(x, output_rows, "output_rows");
    x = g.rms_norm(x, g.weight(model.output_norm), hp.rms_eps, "output_norm");
    int32_t logits = g.matmul(g.weight(model.token_embd), x, "logits");
    if (model.final_softcap > 0.0f) logits = softcap(logits, model.final_softcap, "logits_softcap");
    g.output(logits);
}

}  // namespace cellm::gemma3
