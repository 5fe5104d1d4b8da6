// Entry point of the GGUF format plugin: recognises GGUF files and serves their model view.
#include "format_plugin.hpp"
#include "gguf_file.h"

#include <cstring>

namespace {

struct Gguf {
    static constexpr const char* kName = "gguf";
    static constexpr const char* kVersion = "0.1.0";
    static constexpr const char* kDescription = "GGUF v2/v3 model files, memory-mapped";
    using File = cellm::gguf_plugin::GgufFile;
    static int probe(const char* /*path*/, const uint8_t* head, size_t head_len) {
        return head_len >= 4 && std::memcmp(head, "GGUF", 4) == 0 ? 100 : 0;
    }
};

}  // namespace

extern "C" CELLM_EXPORT const cellm_plugin_desc* cellm_plugin_entry(const cellm_host_api* host, uint32_t host_abi_major,
                                                                    uint32_t /*host_abi_minor*/) {
    return cellm::plugin::FormatPlugin<Gguf>::entry(host, host_abi_major);
}
