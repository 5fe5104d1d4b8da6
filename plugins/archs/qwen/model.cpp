#include "model.hpp"

#include "metadata.hpp"
#include "plugin_host.hpp"

#include <string>

namespace cellm::qwen {

Model load_model(const cellm_model_view& view) {
    const transformer::Metadata meta(view);
    const transformer::Tensors tensors(view);
    const std::string arch = meta.string("general.architecture");
    if (arch != "qwen2" && arch != "qwen3") {
        throw plugin::Failure(CELLM_ERR_UNSUPPORTED, "general.architecture '" + arch + "' is not qwen2 or qwen3");
    }
    const bool qwen3 = arch == "qwen3";

    Model m;
    m.view = &view;
    m.hp = transformer::read_hparams(meta, tensors, arch);
    // llama.cpp's converter stores Qwen's Q and K rows unpermuted (Hugging Face order), so rotated pairs are
    // (i, i + n_rot/2): LLAMA_ROPE_TYPE_NEOX for both archs.
    m.hp.rope_mode = CELLM_ROPE_HALVES;
    const Hparams& hp = m.hp;
    const int64_t embd = hp.n_embd;

    m.token_embd = tensors.required("token_embd.weight", {embd, hp.n_vocab});
    m.output_norm = tensors.required("output_norm.weight", {embd}, true);
    m.output = tensors.optional("output.weight", {embd, hp.n_vocab});
    if (m.output == kAbsent) m.output = m.token_embd;

    m.layers.resize(static_cast<size_t>(hp.n_layer));
    for (int32_t il = 0; il < hp.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        Layer& l = m.layers[static_cast<size_t>(il)];
        l.attn_norm = tensors.required(p + "attn_norm.weight", {embd}, true);
        l.attn_q = tensors.required(p + "attn_q.weight", {embd, hp.q_dim()});
        l.attn_k = tensors.required(p + "attn_k.weight", {embd, hp.kv_dim()});
        l.attn_v = tensors.required(p + "attn_v.weight", {embd, hp.kv_dim()});
        l.attn_output = tensors.required(p + "attn_output.weight", {hp.q_dim(), embd});
        if (qwen3) {
            l.attn_q_norm = tensors.required(p + "attn_q_norm.weight", {hp.head_dim}, true);
            l.attn_k_norm = tensors.required(p + "attn_k_norm.weight", {hp.head_dim}, true);
        } else {
            l.attn_q_bias = tensors.required(p + "attn_q.bias", {hp.q_dim()}, true);
            l.attn_k_bias = tensors.required(p + "attn_k.bias", {hp.kv_dim()}, true);
            l.attn_v_bias = tensors.required(p + "attn_v.bias", {hp.kv_dim()}, true);
        }
        l.ffn_norm = tensors.required(p + "ffn_norm.weight", {embd}, true);
        l.ffn_gate = tensors.required(p + "ffn_gate.weight", {embd, hp.n_ff});
        l.ffn_up = tensors.required(p + "ffn_up.weight", {embd, hp.n_ff});
        l.ffn_down = tensors.required(p + "ffn_down.weight", {hp.n_ff, embd});
    }
    return m;
}

}  // namespace cellm::qwen
