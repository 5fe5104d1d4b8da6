// Entry point of the .cellm format plugin: recognises .cellm files by their magic and serves their model view.
#include "cellm_file.h"
#include "format_plugin.hpp"

#include <cstring>

namespace {

struct Cellm {
    static constexpr const char* kName = "cellm";
    static constexpr const char* kVersion = "0.1.0";
    static constexpr const char* kDescription = "native .cellm model files (docs/format.md), memory-mapped";
    using File = cellm::cellm_plugin::CellmFile;
    static int probe(const char* /*path*/, const uint8_t* head, size_t head_len) {
        using cellm::cellm_plugin::magic;
        return head_len >= sizeof(magic) && std::memcmp(head, magic, sizeof(magic)) == 0 ? 100 : 0;
    }
};

}  // namespace

extern "C" CELLM_EXPORT const cellm_plugin_desc* cellm_plugin_entry(const cellm_host_api* host, uint32_t host_abi_major,
                                                                    uint32_t /*host_abi_minor*/) {
    return cellm::plugin::FormatPlugin<Cellm>::entry(host, host_abi_major);
}
