// A model ready to run: its file (through a format plugin), its arch binding and its tokenizer.
#pragma once

#include "model/model_file.h"
#include "plugin/plugin_registry.h"
#include "tokenize/tokenizer.h"

#include <cellm/arch.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellm {

class Model {
public:
    // `format` and `arch` may be empty: then the file's magic and its general.architecture decide. `mmproj`, when
    // not empty, is llama.cpp's mmproj file of the model's vision tower (model/mmproj.h): the arch then reads both
    // files as one, and by default is the one its projector type needs.
    static std::unique_ptr<Model> load(const PluginRegistry& registry, const std::filesystem::path& path,
                                       std::string_view format = {}, std::string_view arch = {},
                                       const std::filesystem::path& mmproj = {});
    ~Model();
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    const ModelFile& file() const { return *file_; }
    const Plugin& arch_plugin() const { return *arch_plugin_; }
    const cellm_arch_model* arch_model() const { return arch_model_; }
    const cellm_arch_info& info() const { return info_; }
    // Every layer's KV row (ABI 1.2's get_layer_info, or info()'s kv_dim and n_head_kv for each layer).
    const std::vector<cellm_arch_layer_info>& layers() const { return layers_; }
    // The vision encoder's geometry (ABI 1.3's get_vision_info), when the model takes images.
    const std::optional<cellm_arch_vision_info>& vision() const { return vision_; }
    const Tokenizer& tokenizer() const { return *tokenizer_; }
    // The architecture the arch was chosen for: general.architecture, or an mmproj's ("idefics3").
    const std::string& architecture() const { return architecture_; }

private:
    Model() = default;
    void read_layers(const std::string& where);
    void read_vision(const std::string& where);
    std::unique_ptr<ModelFile> file_;
    const Plugin* arch_plugin_ = nullptr;
    cellm_arch_model* arch_model_ = nullptr;
    cellm_arch_info info_{};
    std::vector<cellm_arch_layer_info> layers_;
    std::optional<cellm_arch_vision_info> vision_;
    std::unique_ptr<Tokenizer> tokenizer_;
    std::string architecture_;
};

}  // namespace cellm
