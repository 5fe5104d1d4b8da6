// Plugin discovery: finds shared objects, negotiates the ABI version, validates descriptors and keeps every
// accepted plugin by kind and name. Rejected files are remembered with their reason and logged, never fatal.
#pragma once

#include <cellm/arch.h>
#include <cellm/backend.h>
#include <cellm/format.h>

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace cellm {

struct Plugin {
    std::filesystem::path file;
    const cellm_plugin_desc* desc = nullptr;  // owned by the library, valid while it is loaded

    cellm_plugin_kind kind() const { return desc->kind; }
    const char* name() const { return desc->name; }
    const cellm_backend_iface* backend() const;  // NULL unless kind() is backend; likewise below
    const cellm_arch_iface* arch() const;
    const cellm_format_iface* format() const;
};

struct SkippedFile {
    std::filesystem::path file;
    std::string reason;
};

const char* plugin_kind_name(cellm_plugin_kind kind);

// Owns the loaded libraries. It must outlive every object a plugin created (models, backends, plans): the
// libraries are unloaded in the destructor.
class PluginRegistry {
public:
    PluginRegistry();
    ~PluginRegistry();
    PluginRegistry(const PluginRegistry&) = delete;
    PluginRegistry& operator=(const PluginRegistry&) = delete;

    // The documented search order: default_plugin_dirs(), then each entry of CELLM_PLUGIN_PATH
    // (colon-separated), then `extra` (e.g. the manifest's [plugins].paths).
    void discover(const std::vector<std::filesystem::path>& extra = {});

    // Loads every *.so in `dir` in name order (a missing folder is skipped quietly).
    void add_directory(const std::filesystem::path& dir);
    // Loads one file; returns false (and records why) when it was skipped.
    bool add_file(const std::filesystem::path& file);

    const Plugin* find(cellm_plugin_kind kind, std::string_view name) const;
    // The arch plugin that lists `architecture` (general.architecture), or NULL.
    const Plugin* find_arch_for(std::string_view architecture) const;
    std::vector<const Plugin*> plugins(cellm_plugin_kind kind) const;
    std::vector<const Plugin*> all() const;
    const std::vector<SkippedFile>& skipped() const { return skipped_; }
    // "gguf, safetensors": the names of one kind, for error messages.
    std::string names(cellm_plugin_kind kind) const;

private:
    struct Library;
    void skip(const std::filesystem::path& file, std::string reason);

    std::vector<std::unique_ptr<Library>> libraries_;
    std::vector<SkippedFile> skipped_;
    std::vector<std::filesystem::path> seen_;  // canonical paths already considered
};

// Folder of the binary that holds the host code: cellm-host itself, or libcellm.so inside an application.
std::filesystem::path host_dir();
// The folders searched first, in order: host_dir()/plugins (a build tree), host_dir()/cellm/plugins (libcellm.so
// installed in P/lib) and host_dir()/../lib/cellm/plugins (cellm-host installed in P/bin).
std::vector<std::filesystem::path> default_plugin_dirs();

}  // namespace cellm
