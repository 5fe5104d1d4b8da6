#include "qwen35.h"

#include "config_reader.h"
#include "plugin_host.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

namespace cellm::safetensors_plugin {
namespace {

using nlohmann::json;

// llama.cpp keeps one number for the layer pattern: every interval-th layer is full attention. layer_types must
// follow it (it does in every Qwen3.5 checkpoint); without layer_types, transformers derives them from it.
uint32_t full_attention_interval(const ConfigReader& c, uint32_t n_layer) {
    const json* types = c.find("layer_types");
    if (types == nullptr) return c.dimension("full_attention_interval", 4);
    if (!types->is_array() || types->size() != n_layer) {
        c.fail(CELLM_ERR_CORRUPT, "'layer_types' is not a list of " + std::to_string(n_layer) + " entries");
    }
    std::vector<bool> full;
    for (const json& t : *types) {
        const std::string type = t.is_string() ? t.get<std::string>() : "";
        if (type != "full_attention" && type != "linear_attention") {
            c.fail(CELLM_ERR_UNSUPPORTED, "'layer_types' entry " + t.dump() + " is not full_attention or linear_attention");
        }
        full.push_back(type == "full_attention");
    }
    for (uint32_t interval = 1; interval <= n_layer; ++interval) {
        bool fits = true;
        for (uint32_t i = 0; i < n_layer; ++i) fits = fits && full[i] == ((i + 1) % interval == 0);
        if (fits) return interval;
    }
    c.fail(CELLM_ERR_UNSUPPORTED, "'layer_types' " + types->dump() +
                                      " is not every n-th layer full attention, the only pattern GGUF's qwen35 keys can say");
}

constexpr std::pair<std::string_view, std::string_view> layer_names[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight"},
    {"linear_attn.in_proj_z.weight", "attn_gate.weight"},
    {"linear_attn.in_proj_b.weight", "ssm_beta.weight"},
    {"linear_attn.in_proj_a.weight", "ssm_alpha.weight"},
    {"linear_attn.conv1d.weight", "ssm_conv1d.weight"},
    {"linear_attn.dt_bias", "ssm_dt.bias"},
    {"linear_attn.A_log", "ssm_a"},
    {"linear_attn.norm.weight", "ssm_norm.weight"},
    {"linear_attn.out_proj.weight", "ssm_out.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

}  // namespace

bool is_qwen35(const json& config) {
    const json* type = ConfigReader::find(config, "model_type");
    if (type != nullptr && type->is_string()) return type->get<std::string>() == "qwen3_5_text";
    const json* classes = ConfigReader::find(config, "architectures");
    return classes != nullptr && classes->is_array() && !classes->empty() && (*classes)[0] == "Qwen3_5ForCausalLM";
}

HfConfig read_qwen35_config(const json& config, const std::string& file, MetaTable& meta) {
    const ConfigReader c(config, file);
    if (const json* bias = c.find("attention_bias"); bias != nullptr && *bias != false) {
        c.fail(CELLM_ERR_UNSUPPORTED, "attention_bias " + bias->dump() + " is not supported (qwen35 has none)");
    }
    if (const json* act = c.find("hidden_act"); act != nullptr && *act != "silu") {
        c.fail(CELLM_ERR_UNSUPPORTED, "hidden_act " + act->dump() + " is not supported (silu)");
    }
    HfConfig out;
    out.arch = "qwen35";
    meta.add_string("general.architecture", out.arch);
    const uint32_t n_layer = c.dimension("num_hidden_layers");
    meta.add_u32("qwen35.embedding_length", c.dimension("hidden_size"));
    meta.add_u32("qwen35.block_count", n_layer);
    meta.add_u32("qwen35.feed_forward_length", c.dimension("intermediate_size"));
    out.n_head = c.dimension("num_attention_heads");
    out.n_head_kv = c.dimension("num_key_value_heads", out.n_head);
    meta.add_u32("qwen35.attention.head_count", out.n_head);
    meta.add_u32("qwen35.attention.head_count_kv", out.n_head_kv);
    meta.add_u32("qwen35.context_length", c.dimension("max_position_embeddings"));
    meta.add_u32("qwen35.vocab_size", c.dimension("vocab_size"));
    const uint32_t head_dim = c.dimension("head_dim", 256);
    meta.add_u32("qwen35.attention.key_length", head_dim);
    meta.add_u32("qwen35.attention.value_length", head_dim);
    const json* eps = c.find("rms_norm_eps");
    if (eps == nullptr) c.fail(CELLM_ERR_NOT_FOUND, "missing 'rms_norm_eps'");
    meta.add_f32("qwen35.attention.layer_norm_rms_epsilon", c.number(config, "rms_norm_eps", "", 0.0f));

    // transformers 5 keeps RoPE's settings in rope_parameters; older files have them at the top. The mrope
    // sections are ignored: text positions are equal in all three, so they reduce to plain RoPE.
    const json* rope = c.find("rope_parameters");
    const json& r = rope != nullptr && rope->is_object() ? *rope : config;
    const std::string where = rope != nullptr ? "rope_parameters." : "";
    if (const json* type = ConfigReader::find(r, "rope_type"); type != nullptr && *type != "default") {
        c.fail(CELLM_ERR_UNSUPPORTED, "'" + where + "rope_type' " + type->dump() + " is not supported (default)");
    }
    meta.add_f32("qwen35.rope.freq_base", c.number(r, "rope_theta", where, 10000.0f));
    const float partial = c.number(r, "partial_rotary_factor", where, 0.25f);
    const auto n_rot = static_cast<uint32_t>(static_cast<float>(head_dim) * partial);
    if (!(partial > 0.0f && partial <= 1.0f) || n_rot == 0 || n_rot % 2 != 0) {
        c.fail(CELLM_ERR_CORRUPT, "'" + where + "partial_rotary_factor' " + std::to_string(partial) +
                                      " does not give an even rotary width of head_dim " + std::to_string(head_dim));
    }
    meta.add_u32("qwen35.rope.dimension_count", n_rot);

    const uint32_t n_v = c.dimension("linear_num_value_heads", 32);
    meta.add_u32("qwen35.ssm.conv_kernel", c.dimension("linear_conv_kernel_dim", 4));
    meta.add_u32("qwen35.ssm.state_size", c.dimension("linear_key_head_dim", 128));
    meta.add_u32("qwen35.ssm.group_count", c.dimension("linear_num_key_heads", 16));
    meta.add_u32("qwen35.ssm.time_step_rank", n_v);
    meta.add_u32("qwen35.ssm.inner_size", c.dimension("linear_value_head_dim", 128) * n_v);
    meta.add_u32("qwen35.full_attention_interval", full_attention_interval(c, n_layer));
    meta.add_string("cellm.ssm.head_order", "grouped");
    out.bos_token_id = c.token_id("bos_token_id");
    out.eos_token_id = c.token_id("eos_token_id");
    return out;
}

std::optional<std::string> qwen35_tensor_name(const std::string& hf, const std::string& file) {
    if (hf == "model.embed_tokens.weight") return "token_embd.weight";
    if (hf == "model.norm.weight") return "output_norm.weight";
    if (hf == "lm_head.weight") return "output.weight";
    if (hf.starts_with("mtp.")) return std::nullopt;
    constexpr std::string_view layers = "model.layers.";
    if (hf.starts_with(layers)) {
        const size_t dot = hf.find('.', layers.size());
        const std::string index = hf.substr(layers.size(), dot == std::string::npos ? 0 : dot - layers.size());
        const bool numeric = !index.empty() && index.size() <= 6 &&
                             std::all_of(index.begin(), index.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
        if (numeric) {
            const std::string_view rest = std::string_view(hf).substr(dot + 1);
            for (const auto& [from, to] : layer_names) {
                if (rest == from) return "blk." + std::to_string(std::stoi(index)) + "." + std::string(to);
            }
        }
    }
    throw plugin::Failure(CELLM_ERR_UNSUPPORTED, file + ": tensor '" + hf + "' has no counterpart in cellm's qwen35 arch");
}

bool qwen35_rewrites(const std::string& gguf) {
    return gguf.ends_with(".ssm_a") || (gguf.ends_with("norm.weight") && !gguf.ends_with("ssm_norm.weight"));
}

void qwen35_rewrite(const std::string& gguf, const ShardTensor& t, uint8_t* out, const std::string& file) {
    if (t.type != CELLM_TYPE_F32) {
        throw plugin::Failure(CELLM_ERR_UNSUPPORTED, file + ": tensor '" + t.name +
                                                         "' is not F32; cellm rewrites Qwen3.5's norm gains and A_log from F32 only");
    }
    const bool a_log = gguf.ends_with(".ssm_a");
    for (uint64_t i = 0; i < t.size / sizeof(float); ++i) {
        float w;
        std::memcpy(&w, t.data + i * sizeof(float), sizeof w);
        w = a_log ? -std::exp(w) : 1.0f + w;
        std::memcpy(out + i * sizeof(float), &w, sizeof w);
    }
}

}  // namespace cellm::safetensors_plugin
