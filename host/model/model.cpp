#include "model/model.h"

#include "error.h"
#include "model/mmproj.h"
#include "plugin/host_api.h"

#include <cstddef>

namespace cellm {

std::unique_ptr<Model> Model::load(const PluginRegistry& registry, const std::filesystem::path& path,
                                   std::string_view format, std::string_view arch, const std::filesystem::path& mmproj) {
    std::unique_ptr<Model> model(new Model());
    model->file_ = ModelFile::open(registry, path, format);
    const std::string where =
        "model '" + path.string() + "'" + (mmproj.empty() ? "" : " with mmproj '" + mmproj.string() + "'");

    model->architecture_ = model->file_->get_string("general.architecture").value_or("");
    if (!mmproj.empty()) {
        WithMmproj combined = attach_mmproj(registry, std::move(model->file_), mmproj);
        model->file_ = std::move(combined.file);
        model->architecture_ = std::move(combined.architecture);
    }
    if (!arch.empty()) {
        model->arch_plugin_ = registry.find(CELLM_PLUGIN_ARCH, arch);
        if (model->arch_plugin_ == nullptr) {
            throw Error("unknown arch '" + std::string(arch) + "' (arch plugins: " + registry.names(CELLM_PLUGIN_ARCH) + ")");
        }
    } else {
        if (model->architecture_.empty()) throw Error(where + " has no general.architecture; name an arch in the manifest");
        model->arch_plugin_ = registry.find_arch_for(model->architecture_);
        if (model->arch_plugin_ == nullptr) {
            throw Error(where + ": no arch plugin serves architecture '" + model->architecture_ +
                        "' (arch plugins: " + registry.names(CELLM_PLUGIN_ARCH) + ")");
        }
    }
    const cellm_arch_iface* iface = model->arch_plugin_->arch();
    check(iface->load(&model->file_->view(), &model->arch_model_), where);
    model->info_.struct_size = sizeof(cellm_arch_info);
    check(iface->get_info(model->arch_model_, &model->info_), where);
    model->read_layers(where);
    model->read_vision(where);
    if (!mmproj.empty() && !model->vision_) {
        throw Error(where + ": arch '" + model->arch_plugin_->name() + "' takes no images, so it cannot use the mmproj");
    }
    model->tokenizer_ = Tokenizer::from_model(model->file_->view());
    if (model->tokenizer_->n_vocab() > model->info_.n_vocab) {
        throw Error(where + ": the tokenizer has " + std::to_string(model->tokenizer_->n_vocab()) +
                    " tokens but the model only " + std::to_string(model->info_.n_vocab) + " logits");
    }
    return model;
}

void Model::read_layers(const std::string& where) {
    if (info_.n_layer < 1 || info_.n_layer > (1 << 16)) {
        throw Error(where + ": the arch reports " + std::to_string(info_.n_layer) + " layers");
    }
    const cellm_plugin_desc& desc = *arch_plugin_->desc;
    const cellm_arch_iface* iface = arch_plugin_->arch();
    const bool per_layer = desc.abi_minor >= 2 &&
                           iface->struct_size >= offsetof(cellm_arch_iface, get_layer_info) + sizeof(iface->get_layer_info) &&
                           iface->get_layer_info != nullptr;
    layers_.assign(static_cast<size_t>(info_.n_layer), cellm_arch_layer_info{sizeof(cellm_arch_layer_info), info_.kv_dim, info_.n_head_kv, {0, 0}, 0});
    for (int32_t il = 0; per_layer && il < info_.n_layer; ++il) {
        cellm_arch_layer_info& layer = layers_[static_cast<size_t>(il)];
        check(iface->get_layer_info(arch_model_, il, &layer), where);
        if (layer.kv_dim < 0 || layer.kv_dim > (1 << 20) || layer.n_head_kv < 0 || layer.n_head_kv > layer.kv_dim) {
            throw Error(where + ": the arch reports layer " + std::to_string(il) + " with a K/V row of " +
                        std::to_string(layer.kv_dim) + " values in " + std::to_string(layer.n_head_kv) + " heads");
        }
        if (layer.window < 0) {
            throw Error(where + ": the arch reports layer " + std::to_string(il) + " with a sliding window of " +
                        std::to_string(layer.window) + " positions");
        }
        for (int32_t size : layer.state_size) {
            if (size < 0 || size > (1 << 26)) {
                throw Error(where + ": the arch reports layer " + std::to_string(il) + " with a recurrent state of " +
                            std::to_string(size) + " floats");
            }
        }
    }
}

void Model::read_vision(const std::string& where) {
    const cellm_plugin_desc& desc = *arch_plugin_->desc;
    const cellm_arch_iface* iface = arch_plugin_->arch();
    const bool vision = desc.abi_minor >= 3 &&
                        iface->struct_size >= offsetof(cellm_arch_iface, build_vision_graph) + sizeof(iface->build_vision_graph) &&
                        iface->get_vision_info != nullptr && iface->build_vision_graph != nullptr;
    if (!vision) return;
    cellm_arch_vision_info v{};
    v.struct_size = sizeof(v);
    StatusPtr status(iface->get_vision_info(arch_model_, &v));
    // UNSUPPORTED: an arch that takes images, a file without a vision encoder.
    if (status != nullptr && host_api()->status_code(status.get()) == CELLM_ERR_UNSUPPORTED) return;
    check(status.release(), where);
    if (v.image_size < 1 || v.image_size > 8192 || v.patch_size < 1 || v.patch_size > v.image_size ||
        v.tokens_per_image < 1 || v.tokens_per_image > (1 << 16) || v.n_embd != info_.n_embd) {
        throw Error(where + ": the arch reports a vision encoder of " + std::to_string(v.image_size) + "-pixel images, " +
                    std::to_string(v.patch_size) + "-pixel patches and " + std::to_string(v.tokens_per_image) +
                    " embeddings of " + std::to_string(v.n_embd) + " values per image (the text model's width is " +
                    std::to_string(info_.n_embd) + ")");
    }
    vision_ = v;
}

Model::~Model() {
    if (arch_model_ != nullptr) arch_plugin_->arch()->destroy(arch_model_);
}

}  // namespace cellm
