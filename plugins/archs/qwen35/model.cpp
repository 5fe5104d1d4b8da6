#include "model.hpp"

#include "metadata.hpp"
#include "plugin_host.hpp"

#include <string>

namespace cellm::qwen35 {

Model load_model(const cellm_model_view& view) {
    const transformer::Metadata meta(view);
    const transformer::Tensors tensors(view);
    const std::string arch = meta.string("general.architecture");
    if (arch != "qwen35") throw plugin::Failure(CELLM_ERR_UNSUPPORTED, "general.architecture '" + arch + "' is not qwen35");

    Model m;
    m.view = &view;
    m.hp = transformer::read_hparams(meta, tensors, arch);
    // Hugging Face order (i, i + n_rot/2) within the rotated leading dims; the multimodal RoPE sections all
    // carry the text position, so for text they reduce to this plain RoPE.
    m.hp.rope_mode = CELLM_ROPE_HALVES;
    const Hparams& hp = m.hp;
    const int64_t embd = hp.n_embd;

    DeltaNetShape& ssm = m.ssm;
    ssm.conv_kernel = meta.dimension("qwen35.ssm.conv_kernel");
    ssm.d_k = meta.dimension("qwen35.ssm.state_size");
    ssm.n_k = meta.dimension("qwen35.ssm.group_count");
    ssm.n_v = meta.dimension("qwen35.ssm.time_step_rank");
    const int32_t inner = meta.dimension("qwen35.ssm.inner_size");
    if (ssm.conv_kernel < 2 || ssm.n_v % ssm.n_k != 0 || inner % ssm.n_v != 0) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, "qwen35.ssm.*: conv_kernel " + std::to_string(ssm.conv_kernel) +
                                                     " must be at least 2, time_step_rank " + std::to_string(ssm.n_v) +
                                                     " a multiple of group_count " + std::to_string(ssm.n_k) +
                                                     " and a divisor of inner_size " + std::to_string(inner));
    }
    ssm.d_v = inner / ssm.n_v;
    const std::string order = meta.find_string("cellm.ssm.head_order").value_or("tiled");
    if (order != "tiled" && order != "grouped") {
        throw plugin::Failure(CELLM_ERR_CORRUPT, "cellm.ssm.head_order '" + order + "' is not tiled or grouped");
    }
    ssm.head_order = order == "grouped" ? 0 : 1;
    const int32_t interval = meta.dimension("qwen35.full_attention_interval");

    m.token_embd = tensors.required("token_embd.weight", {embd, hp.n_vocab});
    m.output_norm = tensors.required("output_norm.weight", {embd}, true);
    m.output = tensors.optional("output.weight", {embd, hp.n_vocab});
    if (m.output == kAbsent) m.output = m.token_embd;

    m.layers.resize(static_cast<size_t>(hp.n_layer));
    for (int32_t il = 0; il < hp.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        Layer& l = m.layers[static_cast<size_t>(il)];
        l.recurrent = (il + 1) % interval != 0;
        l.attn_norm = tensors.required(p + "attn_norm.weight", {embd}, true);
        l.post_attention_norm = tensors.required(p + "post_attention_norm.weight", {embd}, true);
        if (l.recurrent) {
            l.attn_qkv = tensors.required(p + "attn_qkv.weight", {embd, ssm.conv_channels()});
            l.attn_gate = tensors.required(p + "attn_gate.weight", {embd, ssm.value_dim()});
            l.ssm_beta = tensors.required(p + "ssm_beta.weight", {embd, ssm.n_v});
            l.ssm_alpha = tensors.required(p + "ssm_alpha.weight", {embd, ssm.n_v});
            l.ssm_conv1d = tensors.required(p + "ssm_conv1d.weight", {ssm.conv_kernel, ssm.conv_channels()}, true);
            l.ssm_dt_bias = tensors.required(p + "ssm_dt.bias", {ssm.n_v}, true);
            l.ssm_a = tensors.required(p + "ssm_a", {ssm.n_v}, true);
            l.ssm_norm = tensors.required(p + "ssm_norm.weight", {ssm.d_v}, true);
            l.ssm_out = tensors.required(p + "ssm_out.weight", {ssm.value_dim(), embd});
        } else {
            l.attn_q = tensors.required(p + "attn_q.weight", {embd, 2 * hp.q_dim()});
            l.attn_k = tensors.required(p + "attn_k.weight", {embd, hp.kv_dim()});
            l.attn_v = tensors.required(p + "attn_v.weight", {embd, hp.kv_dim()});
            l.attn_output = tensors.required(p + "attn_output.weight", {hp.q_dim(), embd});
            l.attn_q_norm = tensors.required(p + "attn_q_norm.weight", {hp.head_dim}, true);
            l.attn_k_norm = tensors.required(p + "attn_k_norm.weight", {hp.head_dim}, true);
        }
        l.ffn_gate = tensors.required(p + "ffn_gate.weight", {embd, hp.n_ff});
        l.ffn_up = tensors.required(p + "ffn_up.weight", {embd, hp.n_ff});
        l.ffn_down = tensors.required(p + "ffn_down.weight", {hp.n_ff, embd});
    }
    return m;
}

}  // namespace cellm::qwen35
