// Entry point of the safetensors format plugin: recognises Hugging Face model folders and serves their view.
#include "format_plugin.hpp"
#include "hf_folder.h"

namespace {

struct Safetensors {
    static constexpr const char* kName = "safetensors";
    static constexpr const char* kVersion = "0.1.0";
    static constexpr const char* kDescription =
        "Hugging Face model folders (config.json, safetensors or PyTorch zip checkpoints, F32/F16/BF16, "
        "tokenizer.json), memory-mapped";
    using File = cellm::safetensors_plugin::HfFolder;
    static int probe(const char* path, const uint8_t* /*head*/, size_t head_len) {
        return path != nullptr && head_len == 0 && cellm::safetensors_plugin::is_model_folder(path) ? 100 : 0;
    }
};

}  // namespace

extern "C" CELLM_EXPORT const cellm_plugin_desc* cellm_plugin_entry(const cellm_host_api* host, uint32_t host_abi_major,
                                                                    uint32_t /*host_abi_minor*/) {
    return cellm::plugin::FormatPlugin<Safetensors>::entry(host, host_abi_major);
}
