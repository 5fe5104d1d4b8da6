#include "model.hpp"

#include "metadata.hpp"
#include "plugin_host.hpp"

#include <string>

namespace cellm::idefics3 {
namespace {

Vision load_vision(const transformer::Metadata& meta, const transformer::Tensors& tensors, int32_t text_embd) {
    Vision v;
    v.image_size = meta.dimension("clip.vision.image_size");
    v.patch_size = meta.dimension("clip.vision.patch_size");
    v.n_embd = meta.dimension("clip.vision.embedding_length");
    v.n_head = meta.dimension("clip.vision.attention.head_count");
    v.n_ff = meta.dimension("clip.vision.feed_forward_length");
    v.scale_factor = meta.dimension("clip.vision.projector.scale_factor");
    v.eps = meta.f32("clip.vision.attention.layer_norm_epsilon");
    const int32_t n_layer = meta.dimension("clip.vision.block_count");
    if (!(v.eps >= 0.0f)) throw plugin::Failure(CELLM_ERR_CORRUPT, "clip.vision.attention.layer_norm_epsilon is negative or NaN");
    if (v.n_embd % v.n_head != 0) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, "clip.vision.embedding_length (" + std::to_string(v.n_embd) +
                                                     ") is not a multiple of clip.vision.attention.head_count (" +
                                                     std::to_string(v.n_head) + ")");
    }
    if (v.image_size > 8192 || v.patch_size > v.image_size || v.patches_per_side() % v.scale_factor != 0) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, "clip.vision: " + std::to_string(v.image_size / v.patch_size) +
                                                     " patches per side of image_size " + std::to_string(v.image_size) +
                                                     " and patch_size " + std::to_string(v.patch_size) +
                                                     " are not a multiple of projector.scale_factor " +
                                                     std::to_string(v.scale_factor));
    }
    const int64_t d = v.n_embd;
    const int64_t p = v.patch_size;
    v.patch_embd = tensors.required("v.patch_embd.weight", {3 * p * p, d});
    v.patch_embd_b = tensors.optional("v.patch_embd.bias", {d}, true);
    // Added to the patches as they are: one row per patch position of a whole tile.
    v.position_embd = tensors.required("v.position_embd.weight", {d, v.n_patches()}, true);
    v.layers.resize(static_cast<size_t>(n_layer));
    for (int32_t il = 0; il < n_layer; ++il) {
        const std::string b = "v.blk." + std::to_string(il) + ".";
        VisionLayer& l = v.layers[static_cast<size_t>(il)];
        l.ln1_w = tensors.required(b + "ln1.weight", {d}, true);
        l.ln1_b = tensors.required(b + "ln1.bias", {d}, true);
        l.attn_q = tensors.required(b + "attn_q.weight", {d, d});
        l.attn_q_b = tensors.optional(b + "attn_q.bias", {d}, true);
        l.attn_k = tensors.required(b + "attn_k.weight", {d, d});
        l.attn_k_b = tensors.optional(b + "attn_k.bias", {d}, true);
        l.attn_v = tensors.required(b + "attn_v.weight", {d, d});
        l.attn_v_b = tensors.optional(b + "attn_v.bias", {d}, true);
        l.attn_out = tensors.required(b + "attn_out.weight", {d, d});
        l.attn_out_b = tensors.optional(b + "attn_out.bias", {d}, true);
        l.ln2_w = tensors.required(b + "ln2.weight", {d}, true);
        l.ln2_b = tensors.required(b + "ln2.bias", {d}, true);
        l.ffn_up = tensors.required(b + "ffn_up.weight", {d, v.n_ff});
        l.ffn_up_b = tensors.optional(b + "ffn_up.bias", {v.n_ff}, true);
        l.ffn_down = tensors.required(b + "ffn_down.weight", {v.n_ff, d});
        l.ffn_down_b = tensors.optional(b + "ffn_down.bias", {d}, true);
    }
    v.post_ln_w = tensors.required("v.post_ln.weight", {d}, true);
    v.post_ln_b = tensors.required("v.post_ln.bias", {d}, true);
    const int64_t merged = d * v.scale_factor * v.scale_factor;
    v.projection = tensors.required("mm.model.fc.weight", {merged, text_embd});
    return v;
}

}  // namespace

Model load_model(const cellm_model_view& view) {
    const transformer::Metadata meta(view);
    const transformer::Tensors tensors(view);
    // The text model's keys: idefics3.* from a Hugging Face folder, llama.* from llama.cpp's text GGUF, which the
    // host presents together with its mmproj file.
    const std::string text = meta.find_string("general.architecture").value_or("idefics3");
    if (text != "idefics3" && text != "llama") {
        throw plugin::Failure(CELLM_ERR_UNSUPPORTED, "idefics3: the text model is '" + text + "', not llama");
    }
    Model m;
    static_cast<llama::Model&>(m) = llama::load_model(view, text);
    m.has_vision = meta.find("clip.vision.image_size") != nullptr;
    if (m.has_vision) m.vision = load_vision(meta, tensors, m.hp.n_embd);
    return m;
}

}  // namespace cellm::idefics3
