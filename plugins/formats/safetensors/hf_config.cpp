#include "hf_config.h"

#include "gemma4.h"
#include "idefics3.h"
#include "config_reader.h"
#include "plugin_host.hpp"
#include "qwen35.h"

#include <fstream>
#include <iterator>

namespace cellm::safetensors_plugin {
namespace {

using nlohmann::json;

// model_type -> cellm arch, for the archs whose Hugging Face weights map one to one onto the GGUF ones.
std::optional<std::string> arch_of(const std::string& model_type) {
    if (model_type == "llama" || model_type == "qwen2" || model_type == "qwen3") return model_type;
    return std::nullopt;
}

std::optional<std::string> arch_of_class(const std::string& cls) {
    if (cls == "LlamaForCausalLM") return "llama";
    if (cls == "Qwen2ForCausalLM") return "qwen2";
    if (cls == "Qwen3ForCausalLM") return "qwen3";
    return std::nullopt;
}

}  // namespace

json read_json_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        std::error_code ec;
        const bool exists = std::filesystem::exists(path, ec);
        throw plugin::Failure(exists ? CELLM_ERR_IO : CELLM_ERR_NOT_FOUND,
                              path.string() + (exists ? ": cannot be read" : ": missing"));
    }
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    try {
        return json::parse(text);
    } catch (const json::exception& e) {  // parse_error, and out_of_range for a number such as 1e605
        throw plugin::Failure(CELLM_ERR_CORRUPT, path.string() + ": not valid JSON: " + e.what());
    }
}

HfConfig read_config(const json& config, const std::string& file, MetaTable& meta, std::string_view as_arch) {
    if (!config.is_object()) throw plugin::Failure(CELLM_ERR_CORRUPT, file + ": not a JSON object");
    if (as_arch.empty() && is_idefics3(config)) return read_idefics3_config(config, file, meta);
    if (is_gemma4(config)) return read_gemma4_config(config, file, meta);
    if (is_qwen35(config)) return read_qwen35_config(config, file, meta);
    const ConfigReader c(config, file);

    HfConfig out;
    const json* model_type = c.find("model_type");
    const json* classes = c.find("architectures");
    std::optional<std::string> arch;
    if (model_type != nullptr && model_type->is_string()) arch = arch_of(model_type->get<std::string>());
    if (!arch && classes != nullptr && classes->is_array() && !classes->empty() && (*classes)[0].is_string()) {
        arch = arch_of_class((*classes)[0].get<std::string>());
    }
    if (!arch) {
        const std::string named = model_type != nullptr ? model_type->dump() : classes != nullptr ? classes->dump() : "none";
        c.fail(CELLM_ERR_UNSUPPORTED, "model_type " + named + " is not supported (llama, qwen2, qwen3, gemma4_text, gemma4, qwen3_5_text, smolvlm, idefics3)");
    }
    if (!as_arch.empty() && *arch != "llama") c.fail(CELLM_ERR_UNSUPPORTED, "the text model of " + std::string(as_arch) + " must be llama, not " + *arch);
    out.arch = as_arch.empty() ? *arch : std::string(as_arch);
    const std::string k = out.arch + ".";

    meta.add_string("general.architecture", out.arch);
    meta.add_u32(k + "embedding_length", c.dimension("hidden_size"));
    meta.add_u32(k + "block_count", c.dimension("num_hidden_layers"));
    meta.add_u32(k + "feed_forward_length", c.dimension("intermediate_size"));
    out.n_head = c.dimension("num_attention_heads");
    out.n_head_kv = c.optional_dimension("num_key_value_heads").value_or(out.n_head);
    meta.add_u32(k + "attention.head_count", out.n_head);
    meta.add_u32(k + "attention.head_count_kv", out.n_head_kv);
    meta.add_u32(k + "context_length", c.dimension("max_position_embeddings"));
    meta.add_u32(k + "vocab_size", c.dimension("vocab_size"));
    if (const auto head_dim = c.optional_dimension("head_dim")) {
        meta.add_u32(k + "attention.key_length", *head_dim);
        meta.add_u32(k + "attention.value_length", *head_dim);
    }
    const auto eps = c.optional_number("rms_norm_eps");
    if (!eps) c.fail(CELLM_ERR_NOT_FOUND, "missing 'rms_norm_eps'");
    meta.add_f32(k + "attention.layer_norm_rms_epsilon", *eps);
    // transformers 5 writes the RoPE settings as one rope_parameters object (rope_theta and the scaling type
    // together); earlier versions wrote rope_theta and rope_scaling at the top level.
    const json* rope = c.find("rope_parameters");
    if (rope != nullptr && !rope->is_object()) c.fail(CELLM_ERR_CORRUPT, "'rope_parameters' is not an object");
    const ConfigReader rope_reader(rope != nullptr ? *rope : config, file);
    if (const auto theta = rope_reader.optional_number("rope_theta")) meta.add_f32(k + "rope.freq_base", *theta);

    const json* scaling = c.find("rope_scaling");
    if (rope != nullptr) {
        const json* type = rope_reader.find("rope_type");
        scaling = type != nullptr && *type == "default" ? nullptr : rope;
    }
    if (scaling != nullptr) {
        const json* type = scaling->is_object() && scaling->contains("rope_type") ? &(*scaling)["rope_type"]
                           : scaling->is_object() && scaling->contains("type")    ? &(*scaling)["type"]
                                                                                   : nullptr;
        const std::string name = type != nullptr && type->is_string() ? type->get<std::string>() : "";
        const json* factor = scaling->is_object() && scaling->contains("factor") ? &(*scaling)["factor"] : nullptr;
        if (name != "linear" || factor == nullptr || !factor->is_number()) {
            c.fail(CELLM_ERR_UNSUPPORTED, "rope_scaling " + scaling->dump() + " is not supported (linear with a factor)");
        }
        meta.add_string(k + "rope.scaling.type", "linear");
        meta.add_f32(k + "rope.scaling.factor", factor->get<float>());
    }
    out.bos_token_id = c.token_id("bos_token_id");
    out.eos_token_id = c.token_id("eos_token_id");
    return out;
}

}  // namespace cellm::safetensors_plugin
