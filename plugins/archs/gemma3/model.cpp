#include "model.hpp"

#include "metadata.hpp"
#include "plugin_host.hpp"

#include <cmath>
#include <optional>
#include <string>

namespace cellm::gemma3 {
namespace {

// Every sixth layer is global, the others local: llama.cpp's set_swa_pattern(6) for gemma3, which the file
// does not state.
constexpr int32_t kSlidingWindowPattern = 6;
// Local layers rotate with this base whatever the file's rope.freq_base (Gemma 3's rope_local_base_freq).
constexpr float kLocalRopeFreqBase = 10000.0f;

// An optional soft-cap: absent means none, present must be positive.
float softcap(const transformer::Metadata& meta, const std::string& key) {
    const std::optional<float> cap = meta.find_f32(key);
    if (!cap) return 0.0f;
    if (!(*cap > 0.0f) || std::isinf(*cap)) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, key + " must be positive and finite");
    }
    return *cap;
}

}  // namespace

LayerAttention Model::attention(int32_t layer) const {
    if ((layer + 1) % kSlidingWindowPattern == 0) return {0, hp.rope_freq_base, hp.rope_freq_scale};
    return {sliding_window, kLocalRopeFreqBase, 1.0f};
}

Model load_model(const cellm_model_view& view) {
    const transformer::Metadata meta(view);
    const transformer::Tensors tensors(view);
    const std::string arch = meta.string("general.architecture");
    if (arch != "gemma3") {
        throw plugin::Failure(CELLM_ERR_UNSUPPORTED, "general.architecture '" + arch + "' is not gemma3");
    }

    Model m;
    m.view = &view;
    m.hp = transformer::read_hparams(meta, tensors, arch);
    // llama.cpp's converter keeps Gemma's Q and K rows in Hugging Face order: pairs (i, i + n_rot/2), NEOX.
    m.hp.rope_mode = CELLM_ROPE_HALVES;
    m.sliding_window = meta.dimension("gemma3.attention.sliding_window");
    m.attn_softcap = softcap(meta, "gemma3.attn_logit_softcapping");
    m.final_softcap = softcap(meta, "gemma3.final_logit_softcapping");
    const Hparams& hp = m.hp;
    // 1/sqrt(query_pre_attn_scalar), which is the head size in every Gemma 3 but the 27B (62 layers), whose
    // scalar is n_embd / n_head: llama.cpp tells them apart the same way.
    const int32_t kGemma3_27bLayers = 62;
    const int32_t query_pre_attn_scalar = hp.n_layer == kGemma3_27bLayers ? hp.n_embd / hp.n_head : hp.head_dim;
    m.attention_scale = 1.0f / std::sqrt(static_cast<float>(query_pre_attn_scalar));
    const int64_t embd = hp.n_embd;

    m.token_embd = tensors.required("token_embd.weight", {embd, hp.n_vocab});
    m.output_norm = tensors.required("output_norm.weight", {embd}, true);

    m.layers.resize(static_cast<size_t>(hp.n_layer));
    for (int32_t il = 0; il < hp.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        Layer& l = m.layers[static_cast<size_t>(il)];
        l.attn_norm = tensors.required(p + "attn_norm.weight", {embd}, true);
        l.attn_q = tensors.required(p + "attn_q.weight", {embd, hp.q_dim()});
        l.attn_k = tensors.required(p + "attn_k.weight", {embd, hp.kv_dim()});
        l.attn_v = tensors.required(p + "attn_v.weight", {embd, hp.kv_dim()});
        l.attn_q_norm = tensors.required(p + "attn_q_norm.weight", {hp.head_dim}, true);
        l.attn_k_norm = tensors.required(p + "attn_k_norm.weight", {hp.head_dim}, true);
        l.attn_output = tensors.required(p + "attn_output.weight", {hp.q_dim(), embd});
        l.post_attention_norm = tensors.required(p + "post_attention_norm.weight", {embd}, true);
        l.ffn_norm = tensors.required(p + "ffn_norm.weight", {embd}, true);
        l.ffn_gate = tensors.required(p + "ffn_gate.weight", {embd, hp.n_ff});
        l.ffn_up = tensors.required(p + "ffn_up.weight", {embd, hp.n_ff});
        l.ffn_down = tensors.required(p + "ffn_down.weight", {hp.n_ff, embd});
        l.post_ffw_norm = tensors.required(p + "post_ffw_norm.weight", {embd}, true);
    }
    return m;
}

}  // namespace cellm::gemma3
