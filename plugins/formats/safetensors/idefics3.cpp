#include "idefics3.h"

#include "config_reader.h"
#include "plugin_host.hpp"

#include <string_view>
#include <utility>

namespace cellm::safetensors_plugin {
namespace {

using nlohmann::json;

constexpr std::pair<std::string_view, std::string_view> vision_layer_names[] = {
    {"layer_norm1.weight", "ln1.weight"},         {"layer_norm1.bias", "ln1.bias"},
    {"self_attn.q_proj.weight", "attn_q.weight"}, {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.weight", "attn_k.weight"}, {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.weight", "attn_v.weight"}, {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.out_proj.weight", "attn_out.weight"}, {"self_attn.out_proj.bias", "attn_out.bias"},
    {"layer_norm2.weight", "ln2.weight"},         {"layer_norm2.bias", "ln2.bias"},
    {"mlp.fc1.weight", "ffn_up.weight"},          {"mlp.fc1.bias", "ffn_up.bias"},
    {"mlp.fc2.weight", "ffn_down.weight"},        {"mlp.fc2.bias", "ffn_down.bias"},
};

constexpr std::pair<std::string_view, std::string_view> vision_names[] = {
    {"model.vision_model.embeddings.patch_embedding.weight", "v.patch_embd.weight"},
    {"model.vision_model.embeddings.patch_embedding.bias", "v.patch_embd.bias"},
    {"model.vision_model.embeddings.position_embedding.weight", "v.position_embd.weight"},
    {"model.vision_model.post_layernorm.weight", "v.post_ln.weight"},
    {"model.vision_model.post_layernorm.bias", "v.post_ln.bias"},
    {"model.connector.modality_projection.proj.weight", "mm.model.fc.weight"},
};

// A layer index of at most six digits at the start of `rest`, and what follows its dot.
std::optional<std::pair<int, std::string_view>> layer_of(std::string_view rest) {
    const size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string_view::npos || dot > 6) return std::nullopt;
    int index = 0;
    for (char c : rest.substr(0, dot)) {
        if (c < '0' || c > '9') return std::nullopt;
        index = index * 10 + (c - '0');
    }
    return std::pair{index, rest.substr(dot + 1)};
}

// A {"longest_edge": n} object such as the processor's size and max_image_size.
uint32_t longest_edge(const ConfigReader& c, const json& config, const char* key) {
    const json* v = ConfigReader::find(config, key);
    if (v == nullptr) c.fail(CELLM_ERR_NOT_FOUND, std::string("missing '") + key + "'");
    const json* edge = ConfigReader::find(*v, "longest_edge");
    if (edge == nullptr) c.fail(CELLM_ERR_UNSUPPORTED, std::string("'") + key + "' has no longest_edge (the only size Idefics3 uses)");
    return c.dimension_of(*edge, std::string(key) + ".longest_edge");
}

std::vector<float> three_numbers(const ConfigReader& c, const json& config, const char* key) {
    const json* v = ConfigReader::find(config, key);
    if (v == nullptr) return {0.5f, 0.5f, 0.5f};  // the processor class's default
    if (!v->is_array() || v->size() != 3 || !(*v)[0].is_number() || !(*v)[1].is_number() || !(*v)[2].is_number()) {
        c.fail(CELLM_ERR_CORRUPT, std::string("'") + key + "' is not a list of three numbers");
    }
    return {(*v)[0].get<float>(), (*v)[1].get<float>(), (*v)[2].get<float>()};
}

}  // namespace

bool is_idefics3(const json& config) {
    const json* type = ConfigReader::find(config, "model_type");
    return type != nullptr && type->is_string() && (*type == "idefics3" || *type == "smolvlm");
}

HfConfig read_idefics3_config(const json& config, const std::string& file, MetaTable& meta) {
    const ConfigReader c(config, file);
    const json* text = c.find("text_config");
    const json* vision = c.find("vision_config");
    if (text == nullptr || !text->is_object()) c.fail(CELLM_ERR_NOT_FOUND, "missing 'text_config'");
    if (vision == nullptr || !vision->is_object()) c.fail(CELLM_ERR_NOT_FOUND, "missing 'vision_config'");
    HfConfig out = read_config(*text, file + " (text_config)", meta, "idefics3");

    // Absent keys take Idefics3VisionConfig's defaults, as transformers does.
    const std::string vfile = file + " (vision_config)";
    const ConfigReader v(*vision, vfile);
    const std::string act = v.text(*vision, "hidden_act", "", "gelu_pytorch_tanh");
    if (act != "gelu_pytorch_tanh") v.fail(CELLM_ERR_UNSUPPORTED, "hidden_act '" + act + "' is not supported (gelu_pytorch_tanh)");
    if (v.dimension("num_channels", 3) != 3) v.fail(CELLM_ERR_UNSUPPORTED, "num_channels must be 3");
    meta.add_u32("clip.vision.embedding_length", v.dimension("hidden_size", 1152));
    meta.add_u32("clip.vision.feed_forward_length", v.dimension("intermediate_size", 3072));
    meta.add_u32("clip.vision.block_count", v.dimension("num_hidden_layers", 12));
    meta.add_u32("clip.vision.attention.head_count", v.dimension("num_attention_heads", 16));
    meta.add_u32("clip.vision.image_size", v.dimension("image_size", 224));
    meta.add_u32("clip.vision.patch_size", v.dimension("patch_size", 32));
    meta.add_f32("clip.vision.attention.layer_norm_epsilon", v.number(*vision, "layer_norm_eps", "", 1e-6f));
    meta.add_u32("clip.vision.projector.scale_factor", c.dimension("scale_factor", 2));
    meta.add_u32("cellm.vision.image_token_id", c.count("image_token_id", 128257));
    return out;
}

void read_idefics3_processor(const std::filesystem::path& folder, MetaTable& meta) {
    std::error_code ec;
    std::filesystem::path path = folder / "preprocessor_config.json";
    json root;
    const json* config = nullptr;
    if (std::filesystem::exists(path, ec)) {
        root = read_json_file(path);
        config = &root;
    }
    // transformers 5 may keep the image processor inside processor_config.json, beside image_seq_len.
    const std::filesystem::path processor_path = folder / "processor_config.json";
    json processor;
    if (std::filesystem::exists(processor_path, ec)) {
        processor = read_json_file(processor_path);
        const ConfigReader p(processor, processor_path.string());
        if (const json* seq = p.find("image_seq_len")) meta.add_u32("cellm.vision.image_seq_len", p.dimension_of(*seq, "image_seq_len"));
        if (config == nullptr) {
            config = p.find("image_processor");
            path = processor_path;
        }
    }
    if (config == nullptr) return;
    const ConfigReader c(*config, path.string());
    meta.add_u32("cellm.vision.longest_edge", longest_edge(c, *config, "size"));
    meta.add_u32("cellm.vision.tile_size", longest_edge(c, *config, "max_image_size"));
    const json* split = c.find("do_image_splitting");
    if (split != nullptr && !split->is_boolean()) c.fail(CELLM_ERR_CORRUPT, "'do_image_splitting' is not a boolean");
    meta.add_bool("cellm.vision.do_image_splitting", split == nullptr || split->get<bool>());
    const json* rescale = c.find("rescale_factor");
    if (rescale != nullptr && !rescale->is_number()) c.fail(CELLM_ERR_CORRUPT, "'rescale_factor' is not a number");
    meta.add_f64("cellm.vision.rescale_factor", rescale != nullptr ? rescale->get<double>() : 1.0 / 255.0);
    meta.add_f32s("cellm.vision.image_mean", three_numbers(c, *config, "image_mean"));
    meta.add_f32s("cellm.vision.image_std", three_numbers(c, *config, "image_std"));
}

std::optional<std::string> idefics3_tensor_name(const std::string& hf, const std::string& file,
                                                std::optional<std::string> (*text_name)(const std::string&,
                                                                                         const std::string&)) {
    constexpr std::string_view text = "model.text_model.";
    if (hf.starts_with(text)) return text_name("model." + hf.substr(text.size()), file);
    if (hf == "lm_head.weight") return "output.weight";
    for (const auto& [from, to] : vision_names) {
        if (hf == from) return std::string(to);
    }
    constexpr std::string_view layers = "model.vision_model.encoder.layers.";
    if (hf.starts_with(layers)) {
        if (const auto layer = layer_of(std::string_view(hf).substr(layers.size()))) {
            for (const auto& [from, to] : vision_layer_names) {
                if (layer->second == from) return "v.blk." + std::to_string(layer->first) + "." + std::string(to);
            }
        }
    }
    throw plugin::Failure(CELLM_ERR_UNSUPPORTED, file + ": tensor '" + hf + "' has no counterpart in cellm's idefics3 arch");
}

}  // namespace cellm::safetensors_plugin
