// cellm-host plugins: what discovery found, what each plugin supports, and which files it skipped and why.
#include "commands.h"

#include "plugin/backend.h"
#include "model/model_file.h"
#include "plugin/plugin_registry.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <string>
#include <vector>

namespace cellm::cli {

namespace {

std::string backend_capabilities(const Plugin& plugin) {
    std::string out;
    try {
        Backend backend(plugin, {});
        std::vector<int> types;
        for (int t = 0; t < CELLM_TYPE_COUNT_GGUF; ++t) types.push_back(t);
        for (int t = CELLM_TYPE_I8S_G32; t < CELLM_TYPE_COUNT_CELLM; ++t) types.push_back(t);  // cellm's own
        for (int t : types) {
            const auto type = static_cast<cellm_dtype>(t);
            if (cellm_dtype_block_size(type) == 0 || type == CELLM_TYPE_I32) continue;
            if (backend.iface().supports_type(backend.handle(), type)) out += (out.empty() ? "" : " ") + std::string(dtype_name(type));
        }
        const char* device = backend.info().device_name;
        out = "weights: " + out + "; device: " + (device != nullptr ? device : "unknown");
    } catch (const std::exception& e) {
        out = std::string("unavailable: ") + e.what();
    }
    const cellm_backend_iface* iface = plugin.backend();
    if (CELLM_HAS_FIELD(iface, cellm_backend_iface, describe) && iface->describe != nullptr) {
        // The callback runs inside the plugin's C frame: nothing may be thrown through it.
        iface->describe(
            [](void* user, const char* line) {
                try {
                    if (line != nullptr) *static_cast<std::string*>(user) += std::string("\n      ") + line;
                } catch (...) {
                }
            },
            &out);
    }
    return out;
}

std::string arch_capabilities(const Plugin& plugin) {
    std::string out = "architectures:";
    for (const char* const* a = plugin.arch()->architectures; *a != nullptr; ++a) out += std::string(" ") + *a;
    return out;
}

}  // namespace

Command add_plugins(CLI::App& app) {
    auto paths = std::make_shared<std::vector<std::string>>();
    app.add_option("--path", *paths, "Extra plugin folders to search");
    return [paths]() {
        PluginRegistry registry;
        registry.discover({paths->begin(), paths->end()});
        for (const Plugin* p : registry.all()) {
            std::printf("%-8s %-10s %-8s abi %u.%u  %s\n", plugin_kind_name(p->kind()), p->name(), p->desc->version,
                        p->desc->abi_major, p->desc->abi_minor, p->file.c_str());
            if (p->desc->description != nullptr) std::printf("      %s\n", p->desc->description);
            std::string caps;
            if (p->kind() == CELLM_PLUGIN_BACKEND) caps = backend_capabilities(*p);
            if (p->kind() == CELLM_PLUGIN_ARCH) caps = arch_capabilities(*p);
            if (!caps.empty()) std::printf("      %s\n", caps.c_str());
        }
        for (const SkippedFile& s : registry.skipped()) std::printf("skipped  %s: %s\n", s.file.c_str(), s.reason.c_str());
        if (registry.all().empty()) {
            std::string searched;
            for (const auto& dir : default_plugin_dirs()) searched += dir.string() + ", ";
            std::printf("no plugins found (searched %sCELLM_PLUGIN_PATH and --path)\n", searched.c_str());
        }
        return 0;
    };
}

}  // namespace cellm::cli
