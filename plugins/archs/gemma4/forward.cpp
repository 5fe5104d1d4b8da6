// One step of Gemma 4, top to bottom:
//
//   x = token_embd[tokens] * sqrt(n_embd)
//   with per-layer embeddings (PLE), for every layer l at once, [ple, n_layer, n_tokens]:
//       pli = (rmsnorm(W_model_proj x / sqrt(n_embd)) * proj_norm + per_layer_token_embd[tokens] * sqrt(ple)) / sqrt(2)
//   for each layer (local: sliding window, own head size and RoPE base; global: all positions, wider heads,
//   RoPE on the leading pairs only, through rope_freqs):
//       h = rmsnorm(x) * attn_norm
//       q = rope(rmsnorm(each head of Wq h) * q_norm)
//       unless the layer shares an earlier layer's K/V:
//           k = Wk h;  v = Wv h, or k itself on K = V layers
//           k = rope(rmsnorm(each head of k) * k_norm);  v = rmsnorm(each head of v)      (no gain)
//       x = x + rmsnorm(Wo attention(q, cached k, cached v)) * post_attention_norm   q.k unscaled
//       h = rmsnorm(x) * ffn_norm
//       x = x + rmsnorm(Wdown (gelu(Wgate h) * Wup h)) * post_ffw_norm
//       with PLE: x = x + rmsnorm(Wproj (gelu(Winp_gate x) * pli[l])) * post_norm
//       x = x * layer_output_scale
//   logits = output (rmsnorm(x) * output_norm)      output = token_embd when tied; soft-capped when the file says so
#include "forward.hpp"

#include <cmath>
#include <string>
#include <vector>

namespace cellm::gemma4 {

void build_forward(const Model& model, const cellm_batch_shape& shape, GraphBuilder& g) {
    const auto [tokens, positions, token_seq, slots, block_table, output_rows] = g.step_inputs(shape);
    const Hparams& hp = model.hp;
    const int64_t n_tokens = shape.n_tokens;
    const auto inv_sqrt = [](int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };

    int32_t x = g.get_rows(g.weight(model.token_embd), tokens, "inp_embd");  // [n_embd, n_tokens]
    x = g.scale(x, std::sqrt(static_cast<float>(hp.n_embd)), "inp_scaled");

    // Per-layer inputs, every layer's packed in one [ple, n_layer, n_tokens] tensor; each layer views its slice.
    const int32_t ple = model.n_embd_per_layer;
    int32_t per_layer_inputs = -1;
    if (ple > 0) {
        const GraphBuilder::Shape packed{ple, hp.n_layer, n_tokens, 1};
        int32_t tok = g.get_rows(g.weight(model.per_layer_token_embd), tokens, "per_layer_token_embd");
        tok = g.scale(g.reshape(tok, packed, "per_layer_tokens"), std::sqrt(static_cast<float>(ple)), "per_layer_tokens_scaled");
        int32_t proj = g.matmul(g.weight(model.per_layer_model_proj), x, "per_layer_model_proj");
        proj = g.scale(g.reshape(proj, packed, "per_layer_proj"), inv_sqrt(hp.n_embd), "per_layer_proj_scaled");
        proj = g.rms_norm(proj, g.weight(model.per_layer_proj_norm), hp.rms_eps, "per_layer_proj_norm");
        per_layer_inputs = g.scale(g.add(proj, tok, "per_layer_sum"), inv_sqrt(2), "per_layer_inputs");
    }

    const int32_t rope_freqs = model.rope_freqs != kAbsent ? g.weight(model.rope_freqs) : -1;
    struct Pools {
        int32_t k = -1, v = -1;
    };
    std::vector<Pools> pools(static_cast<size_t>(hp.n_layer));

    for (int32_t il = 0; il < hp.n_layer; ++il) {
        const Layer& layer = model.layers[static_cast<size_t>(il)];
        const LayerShape& s = model.shape[static_cast<size_t>(il)];
        const std::string blk = "blk." + std::to_string(il) + ".";
        const auto rope = [&](int32_t heads, const std::string& name) {
            if (s.sliding) {
                return g.rope(heads, positions, -1, s.head_dim, hp.rope_mode, model.rope_base_local, 1.0f, name);
            }
            return g.rope(heads, positions, rope_freqs, s.head_dim, hp.rope_mode, hp.rope_freq_base, 1.0f, name);
        };

        // Attention.
        int32_t h = g.rms_norm(x, g.weight(layer.attn_norm), hp.rms_eps, blk + "attn_norm");
        int32_t q = g.reshape(g.matmul(g.weight(layer.attn_q), h, blk + "attn_q"), {s.head_dim, hp.n_head, n_tokens, 1},
                              blk + "q_heads");
        q = rope(g.rms_norm(q, g.weight(layer.attn_q_norm), hp.rms_eps, blk + "attn_q_norm"), blk + "q_rope");
        if (s.kv_source == il) {
            const GraphBuilder::Shape heads{s.head_dim, s.n_head_kv, n_tokens, 1};
            const GraphBuilder::Shape rows{s.kv_dim(), n_tokens, 1, 1};
            const int32_t k_proj = g.reshape(g.matmul(g.weight(layer.attn_k), h, blk + "attn_k"), heads, blk + "k_heads");
            const int32_t v_proj =
                s.k_eq_v ? k_proj : g.reshape(g.matmul(g.weight(layer.attn_v), h, blk + "attn_v"), heads, blk + "v_heads");
            int32_t k = rope(g.rms_norm(k_proj, g.weight(layer.attn_k_norm), hp.rms_eps, blk + "attn_k_norm"), blk + "k_rope");
            int32_t v = g.rms_norm(v_proj, -1, hp.rms_eps, blk + "attn_v_norm");
            k = g.reshape(k, rows, blk + "k_rows");
            v = g.reshape(v, rows, blk + "v_rows");
            Pools& own = pools[static_cast<size_t>(il)];
            own.k = g.kv_store(g.kv_cache(il, 0, s.kv_dim(), blk + "k_cache"), k, slots, blk + "k_store");
            own.v = g.kv_store(g.kv_cache(il, 1, s.kv_dim(), blk + "v_cache"), v, slots, blk + "v_store");
        }
        // A sharing layer attends over its source's pools as this step's stores left them.
        const Pools& kv = pools[static_cast<size_t>(s.kv_source)];
        const float unscaled = 1.0f;  // the Q and K norms stand in for 1/sqrt(head_dim)
        const int32_t attn = g.attention({q, kv.k, kv.v, block_table, token_seq, positions, hp.n_head, s.n_head_kv,
                                          s.head_dim, shape.block_size, unscaled, s.sliding ? model.sliding_window : 0,
                                          0.0f},
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

        // Per-layer input, gated by the residual stream.
        if (ple > 0) {
            const int32_t pli = g.view(per_layer_inputs, {ple, n_tokens, 1, 1}, il * ple, {hp.n_layer * ple, 0, 0},
                                       blk + "per_layer_input");
            h = g.geglu(g.matmul(g.weight(layer.inp_gate), x, blk + "inp_gate"), pli, blk + "inp_geglu");
            h = g.rms_norm(g.matmul(g.weight(layer.proj), h, blk + "proj"), g.weight(layer.post_norm), hp.rms_eps,
                           blk + "post_norm");
            x = g.add(x, h, blk + "per_layer_residual");
        }
        if (layer.layer_output_scale != kAbsent) x = g.mul(x, g.weight(layer.layer_output_scale), blk + "layer_output_scale");
    }

    // Classifier over the rows whose logits are wanted.
    x = g.get_rows(x, output_rows, "output_rows");
    x = g.rms_norm(x, g.weight(model.output_norm), hp.rms_eps, "output_norm");
    int32_t logits = g.matmul(g.weight(model.output != kAbsent ? model.output : model.token_embd), x, "logits");
    if (model.final_softcap > 0.0f) {
        const float cap = model.final_softcap;
        logits = g.scale(g.tanh(g.scale(logits, 1.0f / cap, "logits_softcap_in"), "logits_softcap_tanh"), cap, "logits_softcap");
    }
    g.output(logits);
}

}  // namespace cellm::gemma4
