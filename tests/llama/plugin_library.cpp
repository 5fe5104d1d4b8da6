#include "plugin_library.hpp"

#include "plugin/host_api.h"

#include <dlfcn.h>

#include <stdexcept>

namespace cellm::testing {

PluginLibrary::PluginLibrary(const std::string& name) {
    const std::string path = std::string(CELLM_PLUGIN_DIR) + "/cellm-" + name + ".so";
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) throw std::runtime_error("dlopen " + path + ": " + dlerror());
    entry_ = reinterpret_cast<cellm_plugin_entry_fn>(dlsym(handle_, CELLM_PLUGIN_ENTRY_SYMBOL));
    if (entry_ == nullptr) throw std::runtime_error(path + " has no entry point");
    desc_ = entry_(cellm::host_api(), CELLM_ABI_MAJOR, CELLM_ABI_MINOR);
    if (desc_ == nullptr) throw std::runtime_error(path + " refused ABI major " + std::to_string(CELLM_ABI_MAJOR));
}

PluginLibrary::~PluginLibrary() {
    if (handle_ != nullptr) dlclose(handle_);
}

Outcome outcome(cellm_status* status) {
    if (status == nullptr) return {};
    Outcome o{cellm::host_api()->status_code(status), cellm::host_api()->status_message(status)};
    cellm::host_api()->status_free(status);
    return o;
}

cellm_graph_builder RecordingBuilder::table() {
    return cellm_graph_builder{sizeof(cellm_graph_builder), this, add_node, add_output};
}

int32_t RecordingBuilder::find(const std::string& name) const {
    for (size_t i = 0; i < nodes.size(); ++i) {
        if (nodes[i].name != nullptr && name == nodes[i].name) return static_cast<int32_t>(i);
    }
    return -1;
}

int32_t RecordingBuilder::add_node(void* ctx, const cellm_node* node, size_t node_size) {
    if (node_size != sizeof(cellm_node)) return -1;
    auto* self = static_cast<RecordingBuilder*>(ctx);
    const auto index = static_cast<int32_t>(self->nodes.size());
    for (int32_t s : node->src) {
        if (s < -1 || s >= index) return -1;
    }
    cellm_node copy = *node;
    if (node->name != nullptr) copy.name = self->names_.emplace_back(node->name).c_str();
    self->nodes.push_back(copy);
    return index;
}

void RecordingBuilder::add_output(void* ctx, int32_t node) {
    static_cast<RecordingBuilder*>(ctx)->outputs.push_back(node);
}

}  // namespace cellm::testing
