#include "forward.hpp"

#include <cmath>
#include <string>

namespace cellm::llama {

void build_forward(const Model& model, const cellm_batch_shape& shape, GraphBuilder& g) {
    const GraphBuilder::StepInputs in = g.step_inputs(shape);
    const int32_t x = g.get_rows(g.weight(model.token_embd), in.tokens, "inp_embd");  // [n_embd, n_tokens]
    build_decoder(model, shape, in, x, g);
}

void build_decoder(const Model& model, const cellm_batch_shape& shape, const GraphBuilder::StepInputs& in,
                   int32_t x, GraphBuilder& g) {
    const auto [tokens, positions, token_seq, slots, block_table, output_rows] = in;
    const Hparams& hp = model.hp;
    const int64_t n_tokens = shape.n_tokens;

    const int32_t rope_freqs = model.rope_freqs == kAbsent ? -1 : g.weight(model.rope_freqs);
    const float attention_scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));

    for (int32_t il = 0; il < hp.n_layer; ++il) {
        const Layer& layer = model.layers[static_cast<size_t>(il)];
        const std::string blk = "blk." + std::to_string(il) + ".";

        // Attention: rmsnorm, QKV projections, RoPE, cache the new K/V, attend, project back, residual.
        int32_t h = g.rms_norm(x, g.weight(layer.attn_norm), hp.rms_eps, blk + "attn_norm");
        int32_t q = g.linear(layer.attn_q, layer.attn_q_bias, h, blk + "attn_q");
        int32_t k = g.linear(layer.attn_k, layer.attn_k_bias, h, blk + "attn_k");
        const int32_t v = g.linear(layer.attn_v, layer.attn_v_bias, h, blk + "attn_v");

        q = g.reshape(q, {hp.head_dim, hp.n_head, n_tokens, 1}, blk + "q_heads");
        k = g.reshape(k, {hp.head_dim, hp.n_head_kv, n_tokens, 1}, blk + "k_heads");
        q = g.rope(q, positions, rope_freqs, hp.n_rot, hp.rope_mode, hp.rope_freq_base, hp.rope_freq_scale,
                   blk + "q_rope");
        k = g.rope(k, positions, rope_freqs, hp.n_rot, hp.rope_mode, hp.rope_freq_base, hp.rope_freq_scale,
                   blk + "k_rope");
        k = g.reshape(k, {hp.kv_dim(), n_tokens, 1, 1}, blk + "k_rows");

        const int32_t k_pool = g.kv_store(g.kv_cache(il, 0, hp.kv_dim(), blk + "k_cache"), k, slots, blk + "k_store");
        const int32_t v_pool = g.kv_store(g.kv_cache(il, 1, hp.kv_dim(), blk + "v_cache"), v, slots, blk + "v_store");
        const int32_t attn = g.attention({q, k_pool, v_pool, block_table, token_seq, positions, hp.n_head,
                                          hp.n_head_kv, hp.head_dim, shape.block_size, attention_scale},
                                         blk + "attn");
        x = g.add(x, g.linear(layer.attn_output, layer.attn_output_bias, attn, blk + "attn_output"),
                  blk + "attn_residual");

        // Feed-forward: rmsnorm, SwiGLU, down projection, residual.
        h = g.rms_norm(x, g.weight(layer.ffn_norm), hp.rms_eps, blk + "ffn_norm");
        const int32_t gate = g.matmul(g.weight(layer.ffn_gate), h, blk + "ffn_gate");
        const int32_t up = g.matmul(g.weight(layer.ffn_up), h, blk + "ffn_up");
        const int32_t ff = g.swiglu(gate, up, blk + "ffn_swiglu");
        x = g.add(x, g.matmul(g.weight(layer.ffn_down), ff, blk + "ffn_down"), blk + "ffn_residual");
    }

    // Classifier over the rows whose logits are wanted.
    x = g.get_rows(x, output_rows, "output_rows");
    x = g.rms_norm(x, g.weight(model.output_norm), hp.rms_eps, "output_norm");
    g.output(g.matmul(g.weight(model.output), x, "logits"));
}

}  // namespace cellm::llama
