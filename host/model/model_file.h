// A model file opened through a format plugin, with typed access to its GGUF-vocabulary metadata.
#pragma once

#include "plugin/plugin_registry.h"

#include <cellm/format.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellm {

// Memory a format plugin mapped from a file, holding tensor data that a backend may use in place.
struct MappedRegion {
    const void* data;
    uint64_t size;
};

class ModelFile {
public:
    // Opens `path` with the format plugin named `format`, or, when empty, the one whose probe scores the
    // file's first bytes highest. Throws cellm::Error naming the file on every failure.
    static std::unique_ptr<ModelFile> open(const PluginRegistry& registry, const std::filesystem::path& path,
                                           std::string_view format = {});

    // The tables of a view the host composes; their keys, strings and tensor data point into the parts' views
    // (or static storage).
    struct Tables {
        std::vector<cellm_meta_kv> meta;
        std::vector<cellm_tensor_info> tensors;
    };
    // One view over `parts`, which it keeps open. Its path and format are the first part's; it has no single
    // mapping (see regions()).
    static std::unique_ptr<ModelFile> compose(std::vector<std::unique_ptr<ModelFile>> parts, Tables tables);

    ~ModelFile();
    ModelFile(const ModelFile&) = delete;
    ModelFile& operator=(const ModelFile&) = delete;

    const cellm_model_view& view() const { return view_; }
    const Plugin& format() const { return *format_; }
    const std::filesystem::path& path() const { return path_; }
    uint64_t file_size() const { return file_size_; }  // a folder's: the files directly in it

    const cellm_meta_value* find(std::string_view key) const;
    // Typed getters: nullopt when the key is absent; cellm::Error when it has another type.
    std::optional<std::string> get_string(std::string_view key) const;
    std::optional<int64_t> get_int(std::string_view key) const;
    std::optional<double> get_float(std::string_view key) const;
    std::optional<bool> get_bool(std::string_view key) const;

    // The tensor named `name`, or NULL.
    const cellm_tensor_info* tensor(std::string_view name) const;

    // The mapped files the view's tensors lie in (a composed view's parts'); a tensor outside every region (data
    // the host made) must be copied to a backend.
    std::vector<MappedRegion> regions() const;

    // Throws cellm::Error unless every tensor of `view` has a known type, a sane shape, a size that matches
    // it and data inside the mapping.
    static void validate(const cellm_model_view& view, const std::string& where);

private:
    ModelFile() = default;
    const Plugin* format_ = nullptr;
    cellm_model_file* file_ = nullptr;
    cellm_model_view view_{};
    std::filesystem::path path_;
    uint64_t file_size_ = 0;
    std::vector<std::unique_ptr<ModelFile>> parts_;  // a composed view's files
    Tables tables_;
};

std::string_view to_string_view(const cellm_string_ref& s);
const char* dtype_name(cellm_dtype type);

}  // namespace cellm
