#include "hparams.hpp"

#include "plugin_host.hpp"

#include <cmath>
#include <string>

namespace cellm::transformer {

Hparams read_hparams(const Metadata& meta, const Tensors& tensors, std::string_view arch) {
    const auto key = [arch](std::string_view name) { return std::string(arch) + "." + std::string(name); };
    Hparams hp;
    hp.n_embd = meta.dimension(key("embedding_length"));
    hp.n_layer = meta.dimension(key("block_count"));
    hp.n_ff = meta.dimension(key("feed_forward_length"));
    hp.n_head = meta.dimension(key("attention.head_count"));
    hp.n_head_kv = meta.dimension_or(key("attention.head_count_kv"), hp.n_head);
    if (hp.n_head % hp.n_head_kv != 0) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, key("attention.head_count") + " (" + std::to_string(hp.n_head) +
                                                     ") is not a multiple of " + key("attention.head_count_kv") +
                                                     " (" + std::to_string(hp.n_head_kv) + ")");
    }
    if (hp.n_embd % hp.n_head != 0 && !meta.find(key("attention.key_length"))) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, key("embedding_length") + " (" + std::to_string(hp.n_embd) +
                                                     ") is not a multiple of " + key("attention.head_count") + " (" +
                                                     std::to_string(hp.n_head) + ")");
    }
    hp.head_dim = meta.dimension_or(key("attention.key_length"), hp.n_embd / hp.n_head);
    if (static_cast<int64_t>(hp.n_head) * hp.head_dim > (1 << 24)) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, key("attention.head_count") + " x head size (" +
                                                     std::to_string(hp.n_head) + " x " + std::to_string(hp.head_dim) +
                                                     ") is implausibly large");
    }
    const int32_t value_length = meta.dimension_or(key("attention.value_length"), hp.head_dim);
    if (value_length != hp.head_dim) {
        throw plugin::Failure(CELLM_ERR_UNSUPPORTED, key("attention.value_length") + " (" +
                                                         std::to_string(value_length) + ") differs from the key length (" +
                                                         std::to_string(hp.head_dim) + ")");
    }
    hp.rms_eps = meta.f32(key("attention.layer_norm_rms_epsilon"));
    if (!(hp.rms_eps >= 0.0f)) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, key("attention.layer_norm_rms_epsilon") + " is negative or NaN");
    }

    hp.rope_freq_base = meta.find_f32(key("rope.freq_base")).value_or(10000.0f);
    if (!(hp.rope_freq_base > 0.0f)) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, key("rope.freq_base") + " must be positive");
    }
    hp.n_rot = meta.dimension_or(key("rope.dimension_count"), hp.head_dim);
    if (hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, key("rope.dimension_count") + " (" + std::to_string(hp.n_rot) +
                                                     ") must be even and at most the head size (" +
                                                     std::to_string(hp.head_dim) + ")");
    }
    const std::string scaling = meta.find_string(key("rope.scaling.type")).value_or("none");
    if (scaling == "linear") {
        // Linear scaling stretches positions by `factor`; llama.cpp treats a factor of 0 as none.
        const float factor = meta.find_f32(key("rope.scaling.factor")).value_or(0.0f);
        if (factor < 0.0f || std::isnan(factor)) {
            throw plugin::Failure(CELLM_ERR_CORRUPT, key("rope.scaling.factor") + " must not be negative");
        }
        hp.rope_freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
    } else if (scaling != "none") {
        throw plugin::Failure(CELLM_ERR_UNSUPPORTED, key("rope.scaling.type") + " '" + scaling +
                                                         "' is not supported (none, linear)");
    }

    hp.n_ctx_train = meta.dimension(key("context_length"));
    if (const auto vocab = meta.find_u32(key("vocab_size"))) {
        hp.n_vocab = Metadata::checked_dimension(key("vocab_size"), *vocab);
    } else {
        // Without the key the vocabulary is the embedding's row count; its shape is checked at load.
        const int64_t rows = tensors.rows("token_embd.weight");
        if (rows <= 0 || rows > (1 << 24)) {
            throw plugin::Failure(CELLM_ERR_NOT_FOUND, "missing " + key("vocab_size") + " and a usable 'token_embd.weight'");
        }
        hp.n_vocab = static_cast<int32_t>(rows);
    }
    return hp;
}

}  // namespace cellm::transformer
