// A built plugin loaded the way the host loads it (dlopen, entry point with the host's services), and a builder
// that records the nodes an arch appends.
#pragma once

#include <cellm/abi.h>

#include <deque>
#include <string>
#include <vector>

namespace cellm::testing {

class PluginLibrary {
public:
    // Loads CELLM_PLUGIN_DIR/cellm-<name>.so; throws std::runtime_error on failure.
    explicit PluginLibrary(const std::string& name);
    ~PluginLibrary();
    PluginLibrary(const PluginLibrary&) = delete;
    PluginLibrary& operator=(const PluginLibrary&) = delete;

    const cellm_plugin_desc& desc() const { return *desc_; }
    const cellm_arch_iface& arch() const { return *static_cast<const cellm_arch_iface*>(desc_->iface); }
    const cellm_format_iface& format() const { return *static_cast<const cellm_format_iface*>(desc_->iface); }
    cellm_plugin_entry_fn entry() const { return entry_; }

private:
    void* handle_ = nullptr;
    cellm_plugin_entry_fn entry_ = nullptr;
    const cellm_plugin_desc* desc_ = nullptr;
};

// The outcome of a plugin call: code and message (CELLM_OK and "" for success); frees the status.
struct Outcome {
    cellm_status_code code = CELLM_OK;
    std::string message;
};
Outcome outcome(cellm_status* status);

// A cellm_graph_builder that keeps every node (names copied) and rejects forward references like the host.
class RecordingBuilder {
public:
    cellm_graph_builder table();

    std::vector<cellm_node> nodes;
    std::vector<int32_t> outputs;

    // Index of the node with this name, -1 when none.
    int32_t find(const std::string& name) const;

private:
    static int32_t add_node(void* ctx, const cellm_node* node, size_t node_size);
    static void add_output(void* ctx, int32_t node);
    std::deque<std::string> names_;
};

}  // namespace cellm::testing
