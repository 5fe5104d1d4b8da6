// Broken Gemma 4 folders, made from tests/data/hf/gemma4-tiny-ple by editing its config.json or dropping a tensor
// from model.safetensors' header: the safetensors format (config) or the gemma4 arch (tensors) refuses each with
// one status whose code and message say what is wrong. The multimodal layout (model_type "gemma4", text_config,
// model.language_model.*, towers the text model ignores) loads and gives the text model's logits.
#include "test_support.h"

#include "plugin/host_api.h"

#include <cellm/arch.h>
#include <cellm/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <functional>

namespace fs = std::filesystem;
using nlohmann::json;

namespace cellm::testing {
namespace {

const fs::path& source() {
    static const fs::path path = source_dir() / "tests/data/hf/gemma4-tiny-ple";
    return path;
}

json read_json(const fs::path& path) {
    std::ifstream in(path);
    return json::parse(in);
}

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// model.safetensors: an 8-byte header length, the JSON header, then the data its offsets point into.
struct Shard {
    json header;
    std::string data;
};
Shard read_shard(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    uint64_t len = 0;
    std::memcpy(&len, bytes.data(), 8);
    return {json::parse(bytes.substr(8, len)), bytes.substr(8 + len)};
}
void write_shard(const fs::path& path, const Shard& shard) {
    std::string header = shard.header.dump();
    header.resize((header.size() + 7) / 8 * 8, ' ');  // keeps the data aligned, as safetensors' writer pads
    const uint64_t len = header.size();
    std::string bytes(8, '\0');
    std::memcpy(bytes.data(), &len, 8);
    write_text(path, bytes + header + shard.data);
}

// A copy of the reference folder with `change` applied to it.
fs::path variant(const std::string& name, const std::function<void(const fs::path&)>& change) {
    const fs::path dir = temp_dir() / ("gemma4-" + name);
    fs::remove_all(dir);
    fs::copy(source(), dir);
    change(dir);
    return dir;
}
fs::path with_config(const std::string& name, const std::function<void(json&)>& edit) {
    return variant(name, [&](const fs::path& dir) {
        json config = read_json(dir / "config.json");
        edit(config);
        write_text(dir / "config.json", config.dump(2));
    });
}
fs::path without_tensor(const std::string& tensor) {
    return variant("no-" + tensor, [&](const fs::path& dir) {
        Shard shard = read_shard(dir / "model.safetensors");
        ASSERT_EQ(shard.header.erase(tensor), 1u) << tensor;
        write_shard(dir / "model.safetensors", shard);
    });
}

struct Outcome {
    cellm_status_code code = CELLM_OK;
    std::string message;
};
Outcome outcome_of(cellm_status* status) {
    if (status == nullptr) return {};
    Outcome o{host_api()->status_code(status), host_api()->status_message(status)};
    host_api()->status_free(status);
    return o;
}

// Opens `folder` with the safetensors format and binds it to the gemma4 arch, as the host does.
Outcome load(const fs::path& folder) {
    const cellm_format_iface& format = *registry().find(CELLM_PLUGIN_FORMAT, "safetensors")->format();
    const cellm_arch_iface& arch = *registry().find(CELLM_PLUGIN_ARCH, "gemma4")->arch();
    cellm_model_file* file = nullptr;
    Outcome o = outcome_of(format.open(folder.c_str(), &file));
    if (o.code != CELLM_OK) return o;
    cellm_model_view view{};
    view.struct_size = sizeof(view);
    o = outcome_of(format.get_view(file, &view));
    cellm_arch_model* model = nullptr;
    if (o.code == CELLM_OK) o = outcome_of(arch.load(&view, &model));
    if (model != nullptr) arch.destroy(model);
    format.close(file);
    return o;
}

void expect_refused(const fs::path& folder, cellm_status_code code, const std::string& needle) {
    const Outcome o = load(folder);
    EXPECT_EQ(o.code, code) << o.message;
    EXPECT_NE(o.message.find(needle), std::string::npos) << o.message;
}

TEST(Gemma4Folder, TheReferenceFolderLoads) {
    ASSERT_NE(registry().find(CELLM_PLUGIN_ARCH, "gemma4"), nullptr) << "cellm-gemma4.so was not built";
    EXPECT_EQ(load(source()).code, CELLM_OK) << load(source()).message;
}

TEST(Gemma4Folder, ConfigsItCannotRunAreRefused) {
    expect_refused(with_config("moe", [](json& c) { c["enable_moe_block"] = true; }), CELLM_ERR_UNSUPPORTED,
                   "enable_moe_block");
    expect_refused(with_config("bidirectional", [](json& c) { c["use_bidirectional_attention"] = "all"; }),
                   CELLM_ERR_UNSUPPORTED, "use_bidirectional_attention");
    expect_refused(with_config("yarn", [](json& c) { c["rope_parameters"]["full_attention"]["rope_type"] = "yarn"; }),
                   CELLM_ERR_UNSUPPORTED, "yarn");
    expect_refused(with_config("silu", [](json& c) { c["hidden_activation"] = "silu"; }), CELLM_ERR_UNSUPPORTED,
                   "hidden_activation");
}

TEST(Gemma4Folder, BadConfigsAreCorrupt) {
    expect_refused(with_config("types", [](json& c) { c["layer_types"].erase(0); }), CELLM_ERR_CORRUPT, "layer_types");
    expect_refused(with_config("shared", [](json& c) { c["num_kv_shared_layers"] = 5; }), CELLM_ERR_CORRUPT,
                   "num_kv_shared_layers");
    expect_refused(with_config("override", [](json& c) { c["per_layer_config"]["9"] = {{"head_dim", 16}}; }),
                   CELLM_ERR_CORRUPT, "per_layer_config");
    // A global head of another size no longer fits the tensors.
    expect_refused(with_config("head", [](json& c) { c["per_layer_config"]["1"]["head_dim"] = 8; }), CELLM_ERR_UNSUPPORTED,
                   "head sizes");
    expect_refused(with_config("heads",
                               [](json& c) {
                                   for (const char* layer : {"1", "4"}) c["per_layer_config"][layer]["num_key_value_heads"] = 2;
                               }),
                   CELLM_ERR_CORRUPT, "blk.1.attn_k.weight");
    expect_refused(with_config("sharing", [](json& c) { c["per_layer_config"]["4"]["num_key_value_heads"] = 2; }),
                   CELLM_ERR_CORRUPT, "shares the K/V of layer 1");
    expect_refused(with_config("eps", [](json& c) { c.erase("rms_norm_eps"); }), CELLM_ERR_NOT_FOUND, "rms_norm_eps");
}

TEST(Gemma4Folder, MissingTensorsAreNamed) {
    const std::pair<const char*, const char*> cases[] = {
        {"model.embed_tokens_per_layer.weight", "per_layer_token_embd.weight"},
        {"model.per_layer_projection_norm.weight", "per_layer_proj_norm.weight"},
        {"model.layers.0.self_attn.v_proj.weight", "blk.0.attn_v.weight"},  // a sliding layer always has V
        {"model.layers.2.self_attn.k_norm.weight", "blk.2.attn_k_norm.weight"},
        {"model.layers.4.post_per_layer_input_norm.weight", "blk.4.post_norm.weight"},
        {"model.layers.3.mlp.down_proj.weight", "blk.3.ffn_down.weight"},
    };
    for (const auto& [hf, gguf] : cases) expect_refused(without_tensor(hf), CELLM_ERR_NOT_FOUND, gguf);
}

TEST(Gemma4Folder, UnknownTensorsAreRefused) {
    const fs::path folder = variant("unknown", [](const fs::path& dir) {
        Shard shard = read_shard(dir / "model.safetensors");
        shard.header["model.layers.0.router.proj.weight"] = shard.header["model.norm.weight"];
        write_shard(dir / "model.safetensors", shard);
    });
    expect_refused(folder, CELLM_ERR_UNSUPPORTED, "model.layers.0.router.proj.weight");
}

// Gemma4ForConditionalGeneration's checkpoint: the text decoder under model.language_model and its settings in
// text_config, beside towers for images and audio.
TEST(Gemma4Folder, TheTextStackOfAMultimodalCheckpointRuns) {
    const fs::path folder = variant("multimodal", [](const fs::path& dir) {
        json config = read_json(dir / "config.json");
        const json text = config;
        config = {{"model_type", "gemma4"}, {"architectures", {"Gemma4ForConditionalGeneration"}}, {"text_config", text}};
        config["text_config"]["model_type"] = "gemma4_text";
        write_text(dir / "config.json", config.dump(2));
        Shard shard = read_shard(dir / "model.safetensors");
        json renamed = json::object();
        for (auto& [name, entry] : shard.header.items()) {
            renamed[name.starts_with("model.") ? "model.language_model." + name.substr(6) : name] = entry;
        }
        renamed["model.vision_tower.encoder.layers.0.mlp.up_proj.weight"] = shard.header["model.norm.weight"];
        shard.header = renamed;
        write_shard(dir / "model.safetensors", shard);
    });
    const json reference = read_json(source() / "reference.json");
    const auto tokens = reference.at("tokens").get<std::vector<int32_t>>();
    std::vector<float> expected;
    for (const auto& row : reference.at("logits")) {
        for (const auto& v : row) expected.push_back(v.get<float>());
    }
    EngineOptions options;
    options.context_length = 64;
    Stack s = make_stack(folder, "scalar", options);
    std::vector<float> logits;
    const Engine::Work work{s.engine->create_sequence(), tokens, LogitsWanted::All};
    s.engine->step({&work, 1}, logits);
    ASSERT_EQ(logits.size(), expected.size());
    const size_t n_vocab = reference.at("n_vocab").get<size_t>();
    for (size_t row = 0; row < tokens.size(); ++row) {
        EXPECT_GE(cosine(logits.data() + row * n_vocab, expected.data() + row * n_vocab, n_vocab), 0.9999) << row;
    }
}

}  // namespace
}  // namespace cellm::testing
