#include "model.hpp"

#include "metadata.hpp"
#include "plugin_host.hpp"

#include <string>

namespace cellm::llama {

Model load_model(const cellm_model_view& view, std::string_view arch) {
    const transformer::Metadata meta(view);
    const transformer::Tensors tensors(view);

    Model m;
    m.view = &view;
    m.hp = transformer::read_hparams(meta, tensors, arch);
    // GGUF's converter permutes Llama's Q and K rows so that rotated pairs are adjacent (2i, 2i+1): that is the
    // layout of every GGUF llama file. A format plugin that exposes Hugging Face-layout weights unpermuted
    // says so with "cellm.rope.layout" = "halves". The layout comes from the file, never from a switch.
    const std::string layout = meta.find_string("cellm.rope.layout").value_or("adjacent");
    if (layout == "halves") {
        m.hp.rope_mode = CELLM_ROPE_HALVES;
    } else if (layout != "adjacent") {
        throw plugin::Failure(CELLM_ERR_CORRUPT, "cellm.rope.layout '" + layout + "' is not adjacent or halves");
    }
    const Hparams& hp = m.hp;
    const int64_t embd = hp.n_embd;

    m.token_embd = tensors.required("token_embd.weight", {embd, hp.n_vocab});
    m.output_norm = tensors.required("output_norm.weight", {embd}, true);
    m.output = tensors.optional("output.weight", {embd, hp.n_vocab});
    if (m.output == kAbsent) m.output = m.token_embd;
    m.rope_freqs = tensors.optional("rope_freqs.weight", {hp.n_rot / 2}, true);

    m.layers.resize(static_cast<size_t>(hp.n_layer));
    for (int32_t il = 0; il < hp.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        Layer& l = m.layers[static_cast<size_t>(il)];
        l.attn_norm = tensors.required(p + "attn_norm.weight", {embd}, true);
        l.attn_q = tensors.required(p + "attn_q.weight", {embd, hp.q_dim()});
        l.attn_k = tensors.required(p + "attn_k.weight", {embd, hp.kv_dim()});
        l.attn_v = tensors.required(p + "attn_v.weight", {embd, hp.kv_dim()});
        l.attn_output = tensors.required(p + "attn_output.weight", {hp.q_dim(), embd});
        l.attn_q_bias = tensors.optional(p + "attn_q.bias", {hp.q_dim()}, true);
        l.attn_k_bias = tensors.optional(p + "attn_k.bias", {hp.kv_dim()}, true);
        l.attn_v_bias = tensors.optional(p + "attn_v.bias", {hp.kv_dim()}, true);
        l.attn_output_bias = tensors.optional(p + "attn_output.bias", {embd}, true);
        l.ffn_norm = tensors.required(p + "ffn_norm.weight", {embd}, true);
        l.ffn_gate = tensors.required(p + "ffn_gate.weight", {embd, hp.n_ff});
        l.ffn_up = tensors.required(p + "ffn_up.weight", {embd, hp.n_ff});
        l.ffn_down = tensors.required(p + "ffn_down.weight", {hp.n_ff, embd});
    }
    return m;
}

}  // namespace cellm::llama
