// Entry point of the safetensors format plugin: recognises Hugging Face model folders and serves their view.
#include "hf_folder.h"
#include "plugin_host.hpp"

#include <cellm/format.h>

#include <algorithm>
#include <cstring>

struct cellm_model_file {
    cellm::safetensors_plugin::HfFolder folder;
};

namespace cellm::safetensors_plugin {
namespace {

int probe(const char* path, const uint8_t* /*head*/, size_t head_len) {
    return path != nullptr && head_len == 0 && is_model_folder(path) ? 100 : 0;
}

cellm_status* open(const char* path, cellm_model_file** out) {
    return plugin::guard([&]() -> cellm_status* {
        if (path == nullptr || out == nullptr) {
            return plugin::error(CELLM_ERR_INVALID_ARGUMENT, "safetensors open: NULL argument");
        }
        std::error_code ec;
        if (!std::filesystem::is_directory(path, ec)) {
            return plugin::error(CELLM_ERR_INVALID_ARGUMENT,
                                 std::string(path) + ": not a folder (give the Hugging Face model folder)");
        }
        *out = new cellm_model_file{HfFolder(path)};
        return nullptr;
    });
}

void close(cellm_model_file* file) { delete file; }

cellm_status* get_view(const cellm_model_file* file, cellm_model_view* out) {
    if (file == nullptr || out == nullptr || out->struct_size < sizeof(size_t)) {
        return plugin::error(CELLM_ERR_INVALID_ARGUMENT, "safetensors get_view: NULL file or view");
    }
    // Fill only the fields the caller's struct has; struct_size stays what the caller set.
    const cellm_model_view& view = file->folder.view();
    const size_t n = std::min(out->struct_size, sizeof(view)) - sizeof(size_t);
    std::memcpy(reinterpret_cast<char*>(out) + sizeof(size_t), reinterpret_cast<const char*>(&view) + sizeof(size_t),
                n);
    return nullptr;
}

const cellm_format_iface iface = {sizeof(cellm_format_iface), probe, open, close, get_view};

const cellm_plugin_desc desc = {
    sizeof(cellm_plugin_desc), CELLM_ABI_MAJOR, CELLM_ABI_MINOR, CELLM_PLUGIN_FORMAT, "safetensors", "0.1.0",
    "Hugging Face model folders (config.json, safetensors F32/F16/BF16, tokenizer.json), memory-mapped", &iface,
};

}  // namespace
}  // namespace cellm::safetensors_plugin

extern "C" CELLM_EXPORT const cellm_plugin_desc* cellm_plugin_entry(const cellm_host_api* host, uint32_t host_abi_major,
                                                                    uint32_t /*host_abi_minor*/) {
    if (host == nullptr || host_abi_major != CELLM_ABI_MAJOR) return nullptr;
    cellm::plugin::host() = host;
    return &cellm::safetensors_plugin::desc;
}
