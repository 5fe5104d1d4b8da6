#include "gguf_plugin.h"

#include "plugin/host_api.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <fstream>
#include <stdexcept>

namespace cellm::test {

const cellm_format_iface& gguf_format() {
    // Loaded once and never closed, like the host keeps plugins loaded.
    static const cellm_format_iface* iface = [] {
        const std::string path = std::string(CELLM_PLUGIN_DIR) + "/cellm-gguf.so";
        void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (lib == nullptr) throw std::runtime_error(std::string("dlopen: ") + dlerror());
        auto entry = reinterpret_cast<cellm_plugin_entry_fn>(dlsym(lib, CELLM_PLUGIN_ENTRY_SYMBOL));
        if (entry == nullptr) throw std::runtime_error(path + ": no " CELLM_PLUGIN_ENTRY_SYMBOL);
        const cellm_plugin_desc* desc = entry(host_api(), CELLM_ABI_MAJOR, CELLM_ABI_MINOR);
        if (desc == nullptr || desc->kind != CELLM_PLUGIN_FORMAT) {
            throw std::runtime_error(path + ": not a format plugin");
        }
        return static_cast<const cellm_format_iface*>(desc->iface);
    }();
    return *iface;
}

std::string write_temp_file(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = ::testing::TempDir() + "cellm_gguf_" + name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) throw std::runtime_error("cannot write " + path);
    return path;
}

OpenOutcome try_open(const std::string& path) {
    cellm_model_file* file = nullptr;
    cellm_status* status = gguf_format().open(path.c_str(), &file);
    if (status == nullptr) {
        gguf_format().close(file);
        return {CELLM_OK, ""};
    }
    OpenOutcome outcome{host_api()->status_code(status), host_api()->status_message(status)};
    host_api()->status_free(status);
    return outcome;
}

OpenedModel::OpenedModel(const std::string& path) {
    cellm_status* status = gguf_format().open(path.c_str(), &file_);
    if (status != nullptr) {
        ADD_FAILURE() << "open " << path << ": " << host_api()->status_message(status);
        host_api()->status_free(status);
        file_ = nullptr;
        return;
    }
    view_.struct_size = sizeof(view_);
    status = gguf_format().get_view(file_, &view_);
    if (status != nullptr) {
        ADD_FAILURE() << "get_view " << path << ": " << host_api()->status_message(status);
        host_api()->status_free(status);
    }
}

OpenedModel::~OpenedModel() {
    if (file_ != nullptr) gguf_format().close(file_);
}

const cellm_meta_kv* OpenedModel::meta(const std::string& key) const {
    for (uint64_t i = 0; i < view_.n_meta; ++i) {
        if (str(view_.meta[i].key) == key) return &view_.meta[i];
    }
    return nullptr;
}

const cellm_tensor_info* OpenedModel::tensor(const std::string& name) const {
    for (uint64_t i = 0; i < view_.n_tensors; ++i) {
        const cellm_tensor_info* t = cellm_model_tensor(&view_, i);
        if (str(t->name) == name) return t;
    }
    return nullptr;
}

}  // namespace cellm::test
