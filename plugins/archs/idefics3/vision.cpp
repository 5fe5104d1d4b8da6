#include "vision.hpp"

#include <cmath>
#include <string>

namespace cellm::idefics3 {

void build_vision(const Model& model, int32_t n_images, GraphBuilder& g) {
    const Vision& v = model.vision;
    const int64_t d = v.n_embd;
    const int64_t n_patches = v.n_patches();
    const int64_t n_tokens = n_patches * n_images;  // the encoder's sequence: every patch of every tile
    const int32_t head_dim = v.n_embd / v.n_head;

    // Patch embedding: a convolution of stride = kernel = patch_size, i.e. a product over each patch's pixels;
    // then each patch's learned position (a whole tile always has every patch, so positions run 0..n_patches-1).
    const int32_t pixels = g.input_f32(CELLM_INPUT_PIXELS, {v.image_size, v.image_size, 3, n_images}, "pixels");
    int32_t x = g.linear(v.patch_embd, v.patch_embd_b, g.patches(pixels, v.patch_size, "patches"), "v.patch_embd");
    x = g.reshape(x, {d, n_patches, n_images, 1}, "v.patch_grid");
    x = g.add(x, g.weight(v.position_embd), "v.position_embd");
    x = g.reshape(x, {d, n_tokens, 1, 1}, "v.inp_embd");

    for (size_t il = 0; il < v.layers.size(); ++il) {
        const VisionLayer& l = v.layers[il];
        const std::string blk = "v.blk." + std::to_string(il) + ".";

        // Attention: pre-LayerNorm, biased Q/K/V, every patch of a tile attending to every other, out projection.
        int32_t h = g.layer_norm(x, g.weight(l.ln1_w), g.weight(l.ln1_b), v.eps, blk + "ln1");
        int32_t q = g.linear(l.attn_q, l.attn_q_b, h, blk + "attn_q");
        int32_t k = g.linear(l.attn_k, l.attn_k_b, h, blk + "attn_k");
        int32_t val = g.linear(l.attn_v, l.attn_v_b, h, blk + "attn_v");
        q = g.reshape(q, {head_dim, v.n_head, n_tokens, 1}, blk + "q_heads");
        k = g.reshape(k, {head_dim, v.n_head, n_tokens, 1}, blk + "k_heads");
        val = g.reshape(val, {head_dim, v.n_head, n_tokens, 1}, blk + "v_heads");
        const int32_t attn = g.self_attention(q, k, val, v.n_head, v.n_head, head_dim, static_cast<int32_t>(n_patches),
                                              1.0f / std::sqrt(static_cast<float>(head_dim)), blk + "attn");
        x = g.add(x, g.linear(l.attn_out, l.attn_out_b, attn, blk + "attn_out"), blk + "attn_residual");

        // MLP: pre-LayerNorm, fc1, GELU (tanh), fc2.
        h = g.layer_norm(x, g.weight(l.ln2_w), g.weight(l.ln2_b), v.eps, blk + "ln2");
        h = g.gelu(g.linear(l.ffn_up, l.ffn_up_b, h, blk + "ffn_up"), blk + "ffn_gelu");
        x = g.add(x, g.linear(l.ffn_down, l.ffn_down_b, h, blk + "ffn_down"), blk + "ffn_residual");
    }
    x = g.layer_norm(x, g.weight(v.post_ln_w), g.weight(v.post_ln_b), v.eps, "v.post_ln");

    // Pixel shuffle: each s x s square of patches becomes one token whose features are the square's patches row
    // by row. With side = patches per side, patch (row, col) of image n is x's column (n * side + row) * side + col,
    // so one strided view gathers every square: features (dx, feature) contiguous, then dy, then the square's
    // column, then its row and image together (one stride, since each image holds side / s rows of squares).
    const int64_t s = v.scale_factor;
    const int64_t side = v.patches_per_side();
    x = g.view(x, {s * d, s, side / s, side / s * n_images}, 0,
               {static_cast<int32_t>(side * d), static_cast<int32_t>(s * d), static_cast<int32_t>(s * side * d)},
               "mm.pixel_shuffle");
    x = g.reshape(x, {s * s * d, v.tokens_per_image() * int64_t{n_images}, 1, 1}, "mm.merged");
    g.output(g.matmul(g.weight(v.projection), x, "mm.model.fc"));
}

}  // namespace cellm::idefics3
