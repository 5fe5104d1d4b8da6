#include "model.hpp"

#include "metadata.hpp"
#include "plugin_host.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

namespace cellm::gemma4 {
namespace {

using transformer::Metadata;

std::string key(const char* suffix) { return std::string("gemma4.") + suffix; }

[[noreturn]] void corrupt(const std::string& what) { throw plugin::Failure(CELLM_ERR_CORRUPT, what); }

// A per-layer integer key as llama.cpp writes them: one value for every layer, or an array of n_layer integers
// or booleans. nullopt when absent.
std::optional<std::vector<int64_t>> per_layer(const Metadata& meta, const std::string& name, int32_t n_layer) {
    const cellm_meta_value* v = meta.find(name);
    if (v == nullptr) return std::nullopt;
    if (v->type != CELLM_VALUE_ARRAY) {
        return std::vector<int64_t>(static_cast<size_t>(n_layer), static_cast<int64_t>(*meta.find_u32(name)));
    }
    if (v->v.arr.count != static_cast<uint64_t>(n_layer) || v->v.arr.data == nullptr) {
        corrupt("metadata key '" + name + "' has " + std::to_string(v->v.arr.count) + " entries, expected one per layer (" +
                std::to_string(n_layer) + ")");
    }
    // Numeric array elements are packed little endian and unaligned: read each with memcpy.
    const auto* bytes = static_cast<const uint8_t*>(v->v.arr.data);
    const auto element = [&]<class T>(T, size_t i) {
        T x;
        std::memcpy(&x, bytes + i * sizeof(T), sizeof(T));
        return static_cast<int64_t>(x);
    };
    std::vector<int64_t> out(static_cast<size_t>(n_layer));
    for (size_t i = 0; i < out.size(); ++i) {
        switch (v->v.arr.elem_type) {
        case CELLM_VALUE_BOOL: case CELLM_VALUE_U8: out[i] = element(uint8_t{}, i); break;
        case CELLM_VALUE_I8: out[i] = element(int8_t{}, i); break;
        case CELLM_VALUE_U16: out[i] = element(uint16_t{}, i); break;
        case CELLM_VALUE_I16: out[i] = element(int16_t{}, i); break;
        case CELLM_VALUE_U32: out[i] = element(uint32_t{}, i); break;
        case CELLM_VALUE_I32: out[i] = element(int32_t{}, i); break;
        default: corrupt("metadata key '" + name + "' is an array of a non-integer type");
        }
    }
    return out;
}

int32_t dimension_of(const std::string& name, int64_t value) {
    if (value < 1 || value > (1 << 24)) corrupt("metadata key '" + name + "' has value " + std::to_string(value) + ", expected 1..16777216");
    return static_cast<int32_t>(value);
}

float positive(const Metadata& meta, const std::string& name, float fallback) {
    const float value = meta.find_f32(name).value_or(fallback);
    if (!(value > 0.0f) || std::isinf(value)) corrupt("metadata key '" + name + "' must be positive and finite");
    return value;
}

// Reads every hyperparameter and the per-layer shapes (without tensors).
void read_hparams(const Metadata& meta, const transformer::Tensors& tensors, Model& m) {
    Hparams& hp = m.hp;
    hp.n_embd = meta.dimension(key("embedding_length"));
    hp.n_layer = meta.dimension(key("block_count"));
    hp.n_head = meta.dimension(key("attention.head_count"));
    hp.n_ctx_train = meta.dimension(key("context_length"));
    hp.rms_eps = meta.f32(key("attention.layer_norm_rms_epsilon"));
    if (!(hp.rms_eps >= 0.0f)) corrupt(key("attention.layer_norm_rms_epsilon") + " is negative or NaN");
    hp.rope_freq_base = positive(meta, key("rope.freq_base"), 10000.0f);
    hp.rope_mode = CELLM_ROPE_HALVES;  // Hugging Face's layout, which llama.cpp's converter keeps for Gemma
    if (const auto vocab = meta.find_u32(key("vocab_size"))) {
        hp.n_vocab = Metadata::checked_dimension(key("vocab_size"), *vocab);
    } else {
        const int64_t rows = tensors.rows("token_embd.weight");
        if (rows <= 0 || rows > (1 << 24)) {
            throw plugin::Failure(CELLM_ERR_NOT_FOUND, "missing " + key("vocab_size") + " and a usable 'token_embd.weight'");
        }
        hp.n_vocab = static_cast<int32_t>(rows);
    }
    if (meta.find_u32(key("expert_count")).value_or(0) > 0) {
        throw plugin::Failure(CELLM_ERR_UNSUPPORTED, "gemma4: Mixture-of-Experts layers (" + key("expert_count") +
                                                         ") are not supported");
    }
    m.sliding_window = meta.dimension(key("attention.sliding_window"));
    m.rope_base_local = positive(meta, key("rope.freq_base_swa"), 10000.0f);
    if (meta.find(key("final_logit_softcapping")) != nullptr) {
        m.final_softcap = positive(meta, key("final_logit_softcapping"), 0.0f);
    }
    m.n_embd_per_layer = static_cast<int32_t>(meta.find_u32(key("embedding_length_per_layer_input")).value_or(0));
    if (m.n_embd_per_layer > (1 << 16)) corrupt(key("embedding_length_per_layer_input") + " is implausibly large");

    const int32_t n_layer = hp.n_layer;
    const auto pattern = per_layer(meta, key("attention.sliding_window_pattern"), n_layer);
    if (!pattern) throw plugin::Failure(CELLM_ERR_NOT_FOUND, "missing metadata key '" + key("attention.sliding_window_pattern") + "'");
    const auto n_head_kv = per_layer(meta, key("attention.head_count_kv"), n_layer);
    if (!n_head_kv) throw plugin::Failure(CELLM_ERR_NOT_FOUND, "missing metadata key '" + key("attention.head_count_kv") + "'");
    const auto n_ff = per_layer(meta, key("feed_forward_length"), n_layer);
    if (!n_ff) throw plugin::Failure(CELLM_ERR_NOT_FOUND, "missing metadata key '" + key("feed_forward_length") + "'");
    const int32_t head_global = meta.dimension(key("attention.key_length"));
    const int32_t head_local = meta.dimension_or(key("attention.key_length_swa"), head_global);
    if (meta.dimension_or(key("attention.value_length"), head_global) != head_global ||
        meta.dimension_or(key("attention.value_length_swa"), head_local) != head_local) {
        throw plugin::Failure(CELLM_ERR_UNSUPPORTED, "gemma4: value heads of another size than the key heads are not supported");
    }
    const uint32_t shared = meta.find_u32(key("attention.shared_kv_layers")).value_or(0);
    if (shared >= static_cast<uint32_t>(n_layer)) {
        corrupt(key("attention.shared_kv_layers") + " (" + std::to_string(shared) + ") leaves no layer with K/V of its own");
    }
    const int32_t first_shared = n_layer - static_cast<int32_t>(shared);

    m.shape.resize(static_cast<size_t>(n_layer));
    for (int32_t il = 0; il < n_layer; ++il) {
        LayerShape& s = m.shape[static_cast<size_t>(il)];
        const auto i = static_cast<size_t>(il);
        s.sliding = (*pattern)[i] != 0;
        s.head_dim = s.sliding ? head_local : head_global;
        s.n_head_kv = dimension_of(key("attention.head_count_kv"), (*n_head_kv)[i]);
        s.n_ff = dimension_of(key("feed_forward_length"), (*n_ff)[i]);
        if (hp.n_head % s.n_head_kv != 0) {
            corrupt("layer " + std::to_string(il) + ": " + std::to_string(hp.n_head) + " query heads are not a multiple of " +
                    std::to_string(s.n_head_kv) + " KV heads");
        }
        if (static_cast<int64_t>(hp.n_head) * s.head_dim > (1 << 24)) corrupt("layer " + std::to_string(il) + ": heads x head size is implausibly large");
        // A sharing layer reads the pools of the last earlier layer of its kind that keeps its own, as
        // transformers' kv_sharing_modes picks it.
        s.kv_source = il;
        if (il >= first_shared) {
            s.kv_source = -1;
            for (int32_t j = first_shared - 1; j >= 0 && s.kv_source < 0; --j) {
                if (m.shape[static_cast<size_t>(j)].sliding == s.sliding) s.kv_source = j;
            }
            if (s.kv_source < 0) {
                corrupt("layer " + std::to_string(il) + " shares K/V but no earlier layer of its kind (" +
                        (s.sliding ? "sliding" : "global") + ") keeps any");
            }
            const LayerShape& src = m.shape[static_cast<size_t>(s.kv_source)];
            if (src.n_head_kv != s.n_head_kv || src.head_dim != s.head_dim) {
                corrupt("layer " + std::to_string(il) + " shares the K/V of layer " + std::to_string(s.kv_source) +
                        ", whose heads differ");
            }
        }
        hp.n_ff = std::max(hp.n_ff, s.n_ff);
        if (s.kv_dim() > hp.kv_dim()) {  // get_info reports the widest layer's row
            hp.head_dim = s.head_dim;
            hp.n_head_kv = s.n_head_kv;
        }
    }
    hp.n_rot = head_global;
}

}  // namespace

Model load_model(const cellm_model_view& view) {
    const Metadata meta(view);
    const transformer::Tensors tensors(view);
    const std::string arch = meta.string("general.architecture");
    if (arch != "gemma4") {
        throw plugin::Failure(CELLM_ERR_UNSUPPORTED, "general.architecture '" + arch + "' is not gemma4");
    }
    Model m;
    m.view = &view;
    read_hparams(meta, tensors, m);
    const Hparams& hp = m.hp;
    const int64_t embd = hp.n_embd;

    m.token_embd = tensors.required("token_embd.weight", {embd, hp.n_vocab});
    m.output = tensors.optional("output.weight", {embd, hp.n_vocab});
    m.output_norm = tensors.required("output_norm.weight", {embd}, true);
    const bool any_global = std::any_of(m.shape.begin(), m.shape.end(), [](const LayerShape& s) { return !s.sliding; });
    if (any_global) {
        const int32_t head_global = hp.n_rot;
        m.rope_freqs = tensors.optional("rope_freqs.weight", {head_global / 2}, true);
    }
    const int64_t ple = m.n_embd_per_layer;
    if (ple > 0) {
        const int64_t packed = ple * hp.n_layer;
        if (packed > (int64_t{1} << 30)) corrupt(key("embedding_length_per_layer_input") + " x layers is implausibly large");
        // The per-layer table is looked up with the same token ids as token_embd.
        m.per_layer_token_embd = tensors.required("per_layer_token_embd.weight", {packed, hp.n_vocab});
        m.per_layer_model_proj = tensors.required("per_layer_model_proj.weight", {embd, packed});
        m.per_layer_proj_norm = tensors.required("per_layer_proj_norm.weight", {ple}, true);
    }

    m.layers.resize(static_cast<size_t>(hp.n_layer));
    for (int32_t il = 0; il < hp.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        const LayerShape& s = m.shape[static_cast<size_t>(il)];
        Layer& l = m.layers[static_cast<size_t>(il)];
        const int64_t q_dim = int64_t{hp.n_head} * s.head_dim;
        l.attn_norm = tensors.required(p + "attn_norm.weight", {embd}, true);
        l.attn_q = tensors.required(p + "attn_q.weight", {embd, q_dim});
        l.attn_q_norm = tensors.required(p + "attn_q_norm.weight", {s.head_dim}, true);
        if (s.kv_source == il) {
            l.attn_k = tensors.required(p + "attn_k.weight", {embd, s.kv_dim()});
            l.attn_k_norm = tensors.required(p + "attn_k_norm.weight", {s.head_dim}, true);
            // Global layers of K = V models (attention_k_eq_v) have no V projection; llama.cpp reads it the same way.
            l.attn_v = s.sliding ? tensors.required(p + "attn_v.weight", {embd, s.kv_dim()})
                                 : tensors.optional(p + "attn_v.weight", {embd, s.kv_dim()});
            m.shape[static_cast<size_t>(il)].k_eq_v = l.attn_v == kAbsent;
        }
        l.attn_output = tensors.required(p + "attn_output.weight", {q_dim, embd});
        l.post_attention_norm = tensors.required(p + "post_attention_norm.weight", {embd}, true);
        l.ffn_norm = tensors.required(p + "ffn_norm.weight", {embd}, true);
        l.ffn_gate = tensors.required(p + "ffn_gate.weight", {embd, s.n_ff});
        l.ffn_up = tensors.required(p + "ffn_up.weight", {embd, s.n_ff});
        l.ffn_down = tensors.required(p + "ffn_down.weight", {s.n_ff, embd});
        l.post_ffw_norm = tensors.required(p + "post_ffw_norm.weight", {embd}, true);
        if (ple > 0) {
            l.inp_gate = tensors.required(p + "inp_gate.weight", {embd, ple});
            l.proj = tensors.required(p + "proj.weight", {ple, embd});
            l.post_norm = tensors.required(p + "post_norm.weight", {embd}, true);
        }
        l.layer_output_scale = tensors.optional(p + "layer_output_scale.weight", {1}, true);
        if (tensors.rows(p + "ffn_gate_inp.weight") > 0) {
            throw plugin::Failure(CELLM_ERR_UNSUPPORTED, "gemma4: Mixture-of-Experts layers ('" + p +
                                                             "ffn_gate_inp.weight') are not supported");
        }
    }
    return m;
}

}  // namespace cellm::gemma4
