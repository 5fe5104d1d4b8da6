#include "plugin/plugin_registry.h"

#include "plugin/host_api.h"

#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <cstdlib>
#include <sstream>

namespace fs = std::filesystem;

namespace cellm {

struct PluginRegistry::Library {
    void* handle = nullptr;
    Plugin plugin;
    ~Library() {
        if (handle != nullptr) dlclose(handle);
    }
};

const cellm_backend_iface* Plugin::backend() const {
    return kind() == CELLM_PLUGIN_BACKEND ? static_cast<const cellm_backend_iface*>(desc->iface) : nullptr;
}
const cellm_arch_iface* Plugin::arch() const {
    return kind() == CELLM_PLUGIN_ARCH ? static_cast<const cellm_arch_iface*>(desc->iface) : nullptr;
}
const cellm_format_iface* Plugin::format() const {
    return kind() == CELLM_PLUGIN_FORMAT ? static_cast<const cellm_format_iface*>(desc->iface) : nullptr;
}

const char* plugin_kind_name(cellm_plugin_kind kind) {
    switch (kind) {
    case CELLM_PLUGIN_BACKEND: return "backend";
    case CELLM_PLUGIN_ARCH: return "arch";
    case CELLM_PLUGIN_FORMAT: return "format";
    }
    return "unknown";
}

namespace {

// Checks the function table of a plugin of ABI 1.0: its declared size covers the 1.0 table (up to its last
// 1.0 function, never the host's own sizeof, which grows with later minors) and every function that is not
// documented as optional is present. Returns an empty string when acceptable.
std::string check_iface(const cellm_plugin_desc& d) {
    const auto* size = static_cast<const size_t*>(d.iface);
    auto missing = [](const char* fn) { return std::string("function table lacks ") + fn; };
    switch (d.kind) {
    case CELLM_PLUGIN_BACKEND: {
        const auto* t = static_cast<const cellm_backend_iface*>(d.iface);
        if (*size < offsetof(cellm_backend_iface, describe)) return "backend function table is too small";
        if (!t->create || !t->destroy || !t->get_info || !t->supports_type || !t->supports_op) return missing("create/destroy/get_info/supports_*");
        if (!t->buffer_alloc || !t->buffer_free || !t->buffer_write || !t->buffer_read) return missing("buffer functions");
        if (!t->graph_prepare || !t->graph_execute || !t->plan_free) return missing("graph functions");
        return {};
    }
    case CELLM_PLUGIN_ARCH: {
        const auto* t = static_cast<const cellm_arch_iface*>(d.iface);
        if (*size < offsetof(cellm_arch_iface, build_graph) + sizeof(t->build_graph)) return "arch function table is too small";
        if (!t->architectures || !t->load || !t->destroy || !t->get_info || !t->build_graph) return missing("arch functions");
        return {};
    }
    case CELLM_PLUGIN_FORMAT: {
        const auto* t = static_cast<const cellm_format_iface*>(d.iface);
        if (*size < offsetof(cellm_format_iface, get_view) + sizeof(t->get_view)) return "format function table is too small";
        if (!t->probe || !t->open || !t->close || !t->get_view) return missing("format functions");
        return {};
    }
    }
    return "unknown plugin kind " + std::to_string(static_cast<int>(d.kind));
}

}  // namespace

PluginRegistry::PluginRegistry() = default;

PluginRegistry::~PluginRegistry() {
    // Unload in reverse order of loading.
    while (!libraries_.empty()) libraries_.pop_back();
}

void PluginRegistry::skip(const fs::path& file, std::string reason) {
    spdlog::warn("skipping plugin {}: {}", file.string(), reason);
    skipped_.push_back({file, std::move(reason)});
}

bool PluginRegistry::add_file(const fs::path& file) {
    std::error_code ec;
    fs::path canonical = fs::weakly_canonical(file, ec);
    if (ec) canonical = file;
    if (std::find(seen_.begin(), seen_.end(), canonical) != seen_.end()) return false;
    seen_.push_back(canonical);

    void* handle = dlopen(canonical.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        const char* why = dlerror();
        skip(file, std::string("cannot load: ") + (why != nullptr ? why : "unknown dlopen error"));
        return false;
    }
    auto library = std::make_unique<Library>();
    library->handle = handle;

    void* symbol = dlsym(handle, CELLM_PLUGIN_ENTRY_SYMBOL);
    if (symbol == nullptr) {
        skip(file, "not a cellm plugin (no " CELLM_PLUGIN_ENTRY_SYMBOL " symbol)");
        return false;
    }
    cellm_plugin_entry_fn entry = nullptr;
    static_assert(sizeof(entry) == sizeof(symbol));
    std::memcpy(&entry, &symbol, sizeof(entry));  // dlsym returns data pointers; POSIX allows this cast
    // The ABI forbids exceptions across it, but a C++ plugin that breaks the rule costs only its own file.
    const cellm_plugin_desc* d = nullptr;
    try {
        d = entry(host_api(), CELLM_ABI_MAJOR, CELLM_ABI_MINOR);
    } catch (const std::exception& e) {
        skip(file, std::string("the entry point threw: ") + e.what());
        return false;
    } catch (...) {
        skip(file, "the entry point threw");
        return false;
    }
    if (d == nullptr) {
        skip(file, "the plugin declined ABI " + std::to_string(CELLM_ABI_MAJOR) + "." + std::to_string(CELLM_ABI_MINOR));
        return false;
    }
    if (d->struct_size < offsetof(cellm_plugin_desc, iface) + sizeof(d->iface)) {
        skip(file, "plugin descriptor is too small (" + std::to_string(d->struct_size) + " bytes)");
        return false;
    }
    if (d->abi_major != CELLM_ABI_MAJOR) {
        skip(file, "built for ABI " + std::to_string(d->abi_major) + "." + std::to_string(d->abi_minor) + ", host speaks " +
                       std::to_string(CELLM_ABI_MAJOR) + "." + std::to_string(CELLM_ABI_MINOR));
        return false;
    }
    if (d->name == nullptr || d->name[0] == '\0' || d->version == nullptr || d->iface == nullptr) {
        skip(file, "plugin descriptor lacks a name, version or function table");
        return false;
    }
    if (std::string why = check_iface(*d); !why.empty()) {
        skip(file, why);
        return false;
    }
    if (const Plugin* other = find(d->kind, d->name)) {
        skip(file, std::string("duplicate ") + plugin_kind_name(d->kind) + " plugin '" + d->name + "' (already loaded from " +
                       other->file.string() + ")");
        return false;
    }
    library->plugin = Plugin{canonical, d};
    spdlog::debug("loaded {} plugin '{}' {} from {}", plugin_kind_name(d->kind), d->name, d->version, canonical.string());
    libraries_.push_back(std::move(library));
    return true;
}

void PluginRegistry::add_directory(const fs::path& dir) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return;
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        if (entry.path().extension() == ".so") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) add_file(f);
}

void PluginRegistry::discover(const std::vector<fs::path>& extra) {
    for (const fs::path& dir : default_plugin_dirs()) add_directory(dir);
    if (const char* env = std::getenv("CELLM_PLUGIN_PATH")) {
        std::stringstream list(env);
        std::string item;
        while (std::getline(list, item, ':')) {
            if (!item.empty()) add_directory(item);
        }
    }
    for (const auto& dir : extra) add_directory(dir);
}

const Plugin* PluginRegistry::find(cellm_plugin_kind kind, std::string_view name) const {
    for (const auto& lib : libraries_) {
        if (lib->plugin.kind() == kind && name == lib->plugin.name()) return &lib->plugin;
    }
    return nullptr;
}

const Plugin* PluginRegistry::find_arch_for(std::string_view architecture) const {
    for (const auto& lib : libraries_) {
        const cellm_arch_iface* arch = lib->plugin.arch();
        if (arch == nullptr) continue;
        for (const char* const* a = arch->architectures; *a != nullptr; ++a) {
            if (architecture == *a) return &lib->plugin;
        }
    }
    return nullptr;
}

std::vector<const Plugin*> PluginRegistry::plugins(cellm_plugin_kind kind) const {
    std::vector<const Plugin*> out;
    for (const auto& lib : libraries_) {
        if (lib->plugin.kind() == kind) out.push_back(&lib->plugin);
    }
    return out;
}

std::vector<const Plugin*> PluginRegistry::all() const {
    std::vector<const Plugin*> out;
    for (const auto& lib : libraries_) out.push_back(&lib->plugin);
    return out;
}

std::string PluginRegistry::names(cellm_plugin_kind kind) const {
    std::string out;
    for (const Plugin* p : plugins(kind)) out += (out.empty() ? "" : ", ") + std::string(p->name());
    return out.empty() ? "none" : out;
}

// Relative to the binary that holds the host code, so that neither a build tree nor an install prefix needs
// configuration: build/bin/plugins sits beside cellm-host and libcellm.so in a build tree; an install puts the
// plugins in P/lib/cellm/plugins, which libcellm.so (in P/lib) reaches as cellm/plugins and cellm-host (in P/bin)
// as ../lib/cellm/plugins. A missing folder is skipped and a file reached twice is loaded once.
std::vector<fs::path> default_plugin_dirs() {
    const fs::path dir = host_dir();
    return {dir / "plugins", dir / "cellm" / "plugins", (dir / ".." / "lib" / "cellm" / "plugins").lexically_normal()};
}

fs::path host_dir() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&host_dir), &info) != 0 && info.dli_fname != nullptr) {
        std::error_code ec;
        const fs::path binary = fs::canonical(info.dli_fname, ec);
        if (!ec) return binary.parent_path();
    }
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    return ec ? fs::current_path() : exe.parent_path();
}

}  // namespace cellm
