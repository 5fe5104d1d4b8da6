#include "model/model.h"

#include "error.h"
#include "plugin/host_api.h"

namespace cellm {

std::unique_ptr<Model> Model::load(const PluginRegistry& registry, const std::filesystem::path& path,
                                   std::string_view format, std::string_view arch) {
    std::unique_ptr<Model> model(new Model());
    model->file_ = ModelFile::open(registry, path, format);
    const std::string where = "model '" + path.string() + "'";

    model->architecture_ = model->file_->get_string("general.architecture").value_or("");
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
    model->tokenizer_ = Tokenizer::from_model(model->file_->view());
    if (model->tokenizer_->n_vocab() > model->info_.n_vocab) {
        throw Error(where + ": the tokenizer has " + std::to_string(model->tokenizer_->n_vocab()) +
                    " tokens but the model only " + std::to_string(model->info_.n_vocab) + " logits");
    }
    return model;
}

Model::~Model() {
    if (arch_model_ != nullptr) arch_plugin_->arch()->destroy(arch_model_);
}

}  // namespace cellm
