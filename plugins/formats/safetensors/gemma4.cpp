#include "gemma4.h"

#include "config_reader.h"
#include "plugin_host.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace cellm::safetensors_plugin {
namespace {

using nlohmann::json;

// llama.cpp's gemma4 converter writes the same divisor for the rotary pairs that do not turn.
constexpr float kStillPair = 1e30f;

// layer_types, or transformers' default: every sixth layer global, and the last one always.
std::vector<bool> sliding_layers(const ConfigReader& c, uint32_t n_layer) {
    std::vector<bool> sliding(n_layer);
    const json* types = c.find("layer_types");
    if (types != nullptr && (!types->is_array() || types->size() != n_layer)) {
        c.fail(CELLM_ERR_CORRUPT, "'layer_types' is not a list of num_hidden_layers (" + std::to_string(n_layer) + ") entries");
    }
    for (uint32_t i = 0; i < n_layer; ++i) {
        if (types == nullptr) {
            sliding[i] = (i + 1) % 6 != 0;
            continue;
        }
        const json& t = (*types)[i];
        if (t != "sliding_attention" && t != "full_attention") {
            c.fail(CELLM_ERR_UNSUPPORTED, "layer_types[" + std::to_string(i) + "] " + t.dump() +
                                              " is not supported (sliding_attention, full_attention)");
        }
        sliding[i] = t == "sliding_attention";
    }
    sliding[n_layer - 1] = false;  // transformers forces the last layer global, with a warning
    return sliding;
}

struct Rope {
    float theta;
    bool proportional;
    float partial;  // share of the head that rotates, for proportional RoPE
};

// rope_parameters[layer_type], or transformers' default for it.
Rope rope_of(const ConfigReader& c, const char* type, Rope fallback) {
    const json* all = c.find("rope_parameters");
    if (all == nullptr) return fallback;
    const json* p = all->is_object() ? c.find(*all, type) : nullptr;
    if (p == nullptr || !p->is_object()) c.fail(CELLM_ERR_CORRUPT, std::string("'rope_parameters' has no object for ") + type);
    const std::string where = std::string("rope_parameters.") + type + ".";
    const std::string kind = c.text(*p, "rope_type", where, "default");
    if (kind != "default" && kind != "proportional") {
        c.fail(CELLM_ERR_UNSUPPORTED, where + "rope_type '" + kind + "' is not supported (default, proportional)");
    }
    if (c.number(*p, "factor", where, 1.0f) != 1.0f) c.fail(CELLM_ERR_UNSUPPORTED, where + "factor other than 1 is not supported");
    Rope r{c.number(*p, "rope_theta", where, 10000.0f), kind == "proportional", c.number(*p, "partial_rotary_factor", where, 1.0f)};
    if (!(r.theta > 0.0f) || std::isinf(r.theta)) c.fail(CELLM_ERR_CORRUPT, where + "rope_theta must be positive");
    if (!(r.partial > 0.0f && r.partial <= 1.0f)) c.fail(CELLM_ERR_CORRUPT, where + "partial_rotary_factor must be in (0, 1]");
    return r;
}

void refuse(const ConfigReader& c, bool what, const std::string& message) {
    if (what) c.fail(CELLM_ERR_UNSUPPORTED, message);
}

}  // namespace

bool is_gemma4(const json& config) {
    if (!config.is_object()) return false;
    const auto type = config.find("model_type");
    if (type != config.end() && (*type == "gemma4_text" || *type == "gemma4")) return true;
    const auto classes = config.find("architectures");
    return classes != config.end() && classes->is_array() && !classes->empty() &&
           ((*classes)[0] == "Gemma4ForCausalLM" || (*classes)[0] == "Gemma4ForConditionalGeneration");
}

HfConfig read_gemma4_config(const json& config, const std::string& file, MetaTable& meta) {
    // A multimodal checkpoint keeps the text decoder's settings in text_config.
    const auto nested = config.find("text_config");
    const bool multimodal = nested != config.end() && nested->is_object();
    const json& text = multimodal ? *nested : config;
    const ConfigReader c(text, file);

    refuse(c, c.flag("enable_moe_block"), "enable_moe_block: Gemma 4's Mixture-of-Experts layers are not supported");
    refuse(c, c.flag("attention_bias"), "attention_bias: attention biases are not supported for gemma4");
    refuse(c, c.text(text, "use_bidirectional_attention", "", "") == "all",
           "use_bidirectional_attention \"all\" (attention without a causal mask) is not supported");
    HfConfig out;
    out.arch = "gemma4";
    const uint32_t n_layer = c.dimension("num_hidden_layers");
    const uint32_t n_embd = c.dimension("hidden_size");
    const uint32_t n_head = c.dimension("num_attention_heads");
    const uint32_t n_vocab = c.dimension("vocab_size");
    out.n_head = n_head;
    out.n_head_kv = c.dimension("num_key_value_heads");
    const std::string activation = c.text(text, "hidden_activation", "", "gelu_pytorch_tanh");
    refuse(c, activation != "gelu_pytorch_tanh", "hidden_activation '" + activation + "' is not supported (gelu_pytorch_tanh)");

    // Per-layer geometry: global layers take per_layer_config's overrides, or (older files) global_head_dim and,
    // when K = V, num_global_key_value_heads.
    const std::vector<bool> sliding = sliding_layers(c, n_layer);
    const uint32_t head_dim = c.dimension("head_dim");
    std::vector<uint32_t> heads(n_layer, head_dim), kv_heads(n_layer, out.n_head_kv);
    const bool k_eq_v = c.flag("attention_k_eq_v");
    if (const json* overrides = c.find("per_layer_config")) {
        if (!overrides->is_object()) c.fail(CELLM_ERR_CORRUPT, "'per_layer_config' is not an object");
        for (const auto& [index, layer] : overrides->items()) {
            const std::string where = "per_layer_config." + index + ".";
            const bool numeric = !index.empty() && index.size() <= 6 &&
                                 std::all_of(index.begin(), index.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
            if (!numeric || std::stoul(index) >= n_layer || !layer.is_object()) {
                c.fail(CELLM_ERR_CORRUPT, "'per_layer_config' entry '" + index + "' is not a layer's object");
            }
            const auto il = std::stoul(index);
            for (const auto& [name, value] : layer.items()) {
                if (name == "head_dim") {
                    heads[il] = c.dimension_of(value, where + name);
                } else if (name == "num_key_value_heads") {
                    kv_heads[il] = c.dimension_of(value, where + name);
                } else {
                    c.fail(CELLM_ERR_UNSUPPORTED, "'" + where + name + "' is not supported (head_dim, num_key_value_heads)");
                }
            }
        }
    } else {
        const json* global_head = c.find("global_head_dim");
        const json* global_kv = k_eq_v ? c.find("num_global_key_value_heads") : nullptr;
        for (uint32_t il = 0; il < n_layer; ++il) {
            if (sliding[il]) continue;
            heads[il] = global_head != nullptr ? c.dimension_of(*global_head, "global_head_dim") : 512;  // transformers' default
            if (global_kv != nullptr) kv_heads[il] = c.dimension_of(*global_kv, "num_global_key_value_heads");
        }
    }
    uint32_t head_local = 0, head_global = 0;
    for (uint32_t il = 0; il < n_layer; ++il) {
        uint32_t& kind = sliding[il] ? head_local : head_global;
        if (kind != 0 && kind != heads[il]) {
            c.fail(CELLM_ERR_UNSUPPORTED, std::string(sliding[il] ? "sliding" : "full") +
                                              "_attention layers of different head sizes are not supported");
        }
        kind = heads[il];
    }
    if (head_local == 0) head_local = head_global;

    // The last num_kv_shared_layers layers reuse earlier K/V; with use_double_wide_mlp their MLPs are twice as wide.
    const uint32_t shared = c.count("num_kv_shared_layers", 0);
    if (shared >= n_layer) c.fail(CELLM_ERR_CORRUPT, "'num_kv_shared_layers' leaves no layer with K/V of its own");
    const uint32_t n_ff = c.dimension("intermediate_size");
    const bool double_wide = c.flag("use_double_wide_mlp");
    std::vector<int32_t> ff(n_layer), kv(n_layer), pattern(n_layer);
    for (uint32_t il = 0; il < n_layer; ++il) {
        ff[il] = static_cast<int32_t>(double_wide && il >= n_layer - shared ? 2 * n_ff : n_ff);
        kv[il] = static_cast<int32_t>(kv_heads[il]);
        pattern[il] = sliding[il] ? 1 : 0;
    }

    const uint32_t ple = c.count("hidden_size_per_layer_input", 256);
    if (ple > 0 && c.count("vocab_size_per_layer_input", 262144) != n_vocab) {
        c.fail(CELLM_ERR_UNSUPPORTED, "vocab_size_per_layer_input differs from vocab_size");
    }
    const Rope local = rope_of(c, "sliding_attention", {10000.0f, false, 1.0f});
    const Rope global = rope_of(c, "full_attention", {1000000.0f, true, 0.25f});
    refuse(c, local.proportional, "rope_parameters.sliding_attention: proportional RoPE on sliding layers is not supported");
    if (global.proportional) {
        // transformers turns int(partial * head_dim // 2) leading pairs of each half; the others stand still.
        const auto turning = static_cast<uint32_t>(std::floor(global.partial * static_cast<float>(head_global) / 2.0f));
        out.rope_freqs.assign(head_global / 2, kStillPair);
        std::fill_n(out.rope_freqs.begin(), std::min<size_t>(turning, out.rope_freqs.size()), 1.0f);
    }

    const std::string k = "gemma4.";
    meta.add_string("general.architecture", out.arch);
    meta.add_u32(k + "embedding_length", n_embd);
    meta.add_u32(k + "block_count", n_layer);
    meta.add_u32(k + "context_length", c.dimension("max_position_embeddings"));
    meta.add_u32(k + "vocab_size", n_vocab);
    meta.add_i32s(k + "feed_forward_length", std::move(ff));
    meta.add_u32(k + "attention.head_count", n_head);
    meta.add_i32s(k + "attention.head_count_kv", std::move(kv));
    meta.add_u32(k + "attention.key_length", head_global);
    meta.add_u32(k + "attention.value_length", head_global);
    meta.add_u32(k + "attention.key_length_swa", head_local);
    meta.add_u32(k + "attention.value_length_swa", head_local);
    meta.add_i32s(k + "attention.sliding_window_pattern", std::move(pattern));
    meta.add_u32(k + "attention.sliding_window", c.dimension("sliding_window"));
    meta.add_u32(k + "attention.shared_kv_layers", shared);
    meta.add_u32(k + "embedding_length_per_layer_input", ple);
    const json* eps = c.find("rms_norm_eps");
    if (eps == nullptr || !eps->is_number()) c.fail(CELLM_ERR_NOT_FOUND, "missing 'rms_norm_eps'");
    meta.add_f32(k + "attention.layer_norm_rms_epsilon", eps->get<float>());
    meta.add_f32(k + "rope.freq_base", global.theta);
    meta.add_f32(k + "rope.freq_base_swa", local.theta);
    if (const json* cap = c.find("final_logit_softcapping")) {
        if (!cap->is_number()) c.fail(CELLM_ERR_CORRUPT, "'final_logit_softcapping' is not a number");
        meta.add_f32(k + "final_logit_softcapping", cap->get<float>());
    }
    for (const json* in : {&config, &text}) {
        for (auto [key, id] : {std::pair{"bos_token_id", &out.bos_token_id}, std::pair{"eos_token_id", &out.eos_token_id}}) {
            const json* v = c.find(*in, key);
            if (v != nullptr && v->is_array() && !v->empty()) v = &(*v)[0];
            if (v != nullptr && v->is_number_integer()) *id = v->get<int64_t>();
        }
    }
    return out;
}

std::optional<std::string> gemma4_tensor_name(const std::string& hf, const std::string& file) {
    static constexpr std::pair<std::string_view, std::string_view> top[] = {
        {"embed_tokens.weight", "token_embd.weight"},
        {"embed_tokens_per_layer.weight", "per_layer_token_embd.weight"},
        {"per_layer_model_projection.weight", "per_layer_model_proj.weight"},
        {"per_layer_projection_norm.weight", "per_layer_proj_norm.weight"},
        {"norm.weight", "output_norm.weight"},
    };
    static constexpr std::pair<std::string_view, std::string_view> per_layer[] = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},
        {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.q_norm.weight", "attn_q_norm.weight"},
        {"self_attn.k_norm.weight", "attn_k_norm.weight"},
        {"post_attention_layernorm.weight", "post_attention_norm.weight"},
        {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},
        {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
        {"per_layer_input_gate.weight", "inp_gate.weight"},
        {"per_layer_projection.weight", "proj.weight"},
        {"post_per_layer_input_norm.weight", "post_norm.weight"},
        {"layer_scalar", "layer_output_scale.weight"},
    };
    if (hf == "lm_head.weight") return "output.weight";
    std::string_view rest = hf;
    for (std::string_view prefix : {"model.vision_tower.", "model.audio_tower.", "model.embed_vision.", "model.embed_audio."}) {
        if (rest.starts_with(prefix)) return std::nullopt;
    }
    for (std::string_view prefix : {"model.language_model.", "model."}) {
        if (rest.starts_with(prefix)) {
            rest.remove_prefix(prefix.size());
            break;
        }
    }
    for (const auto& [from, to] : top) {
        if (rest == from) return std::string(to);
    }
    constexpr std::string_view layers = "layers.";
    if (rest.size() < hf.size() && rest.starts_with(layers)) {
        rest.remove_prefix(layers.size());
        const size_t dot = rest.find('.');
        const std::string_view index = rest.substr(0, dot == std::string_view::npos ? 0 : dot);
        const bool numeric = !index.empty() && index.size() <= 6 &&
                             std::all_of(index.begin(), index.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
        if (numeric) {
            const std::string_view name = rest.substr(dot + 1);
            for (const auto& [from, to] : per_layer) {
                if (name == from) return "blk." + std::to_string(std::stoi(std::string(index))) + "." + std::string(to);
            }
        }
    }
    throw plugin::Failure(CELLM_ERR_UNSUPPORTED, file + ": tensor '" + hf + "' has no counterpart in cellm's gemma4 arch");
}

}  // namespace cellm::safetensors_plugin
