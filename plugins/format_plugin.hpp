// The C side of one of cellm's format plugins: the cellm_format_iface functions, which keep exceptions from
// crossing the ABI, the descriptor, and the entry point's body. A format supplies a description type:
//
//   struct MyFormat {
//       static constexpr const char* kName = "myformat";  // plugin name, and the prefix of its messages
//       static constexpr const char* kVersion = "0.1.0";
//       static constexpr const char* kDescription = "...";
//       using File = ...;  // File(const char* path) opens it (throws plugin::Failure); view() serves it
//       static int probe(const char* path, const uint8_t* head, size_t head_len);
//   };
#pragma once

#include "plugin_host.hpp"

#include <cellm/abi.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace cellm::plugin {

template <class Format>
class FormatPlugin {
public:
    // Stores the host's services and answers the descriptor; NULL for a host of another major.
    static const cellm_plugin_desc* entry(const cellm_host_api* host, uint32_t host_abi_major) {
        if (host == nullptr || host_abi_major != CELLM_ABI_MAJOR) return nullptr;
        plugin::host() = host;
        return &kDesc;
    }

private:
    using File = typename Format::File;

    // The host holds an open file only as the opaque pointer open() returned.
    static const File& file_of(const cellm_model_file* f) { return *reinterpret_cast<const File*>(f); }

    static std::string where(const char* what) { return std::string(Format::kName) + " " + what; }

    static cellm_status* open(const char* path, cellm_model_file** out) {
        return guard([&]() -> cellm_status* {
            if (path == nullptr || out == nullptr) return error(CELLM_ERR_INVALID_ARGUMENT, where("open: NULL argument"));
            *out = reinterpret_cast<cellm_model_file*>(new File(path));
            return nullptr;
        });
    }

    static void close(cellm_model_file* file) { delete reinterpret_cast<File*>(file); }

    static cellm_status* get_view(const cellm_model_file* file, cellm_model_view* out) {
        if (file == nullptr || out == nullptr || out->struct_size < sizeof(size_t)) {
            return error(CELLM_ERR_INVALID_ARGUMENT, where("get_view: NULL file or view"));
        }
        // Fill only the fields the caller's struct has; struct_size stays what the caller set.
        const cellm_model_view& view = file_of(file).view();
        const size_t n = std::min(out->struct_size, sizeof(view)) - sizeof(size_t);
        std::memcpy(reinterpret_cast<char*>(out) + sizeof(size_t), reinterpret_cast<const char*>(&view) + sizeof(size_t), n);
        return nullptr;
    }

    static constexpr cellm_format_iface kIface = {sizeof(cellm_format_iface), Format::probe, open, close, get_view};
    static constexpr cellm_plugin_desc kDesc = {
        sizeof(cellm_plugin_desc), CELLM_ABI_MAJOR, CELLM_ABI_MINOR, CELLM_PLUGIN_FORMAT,
        Format::kName,             Format::kVersion, Format::kDescription, &kIface,
    };
};

}  // namespace cellm::plugin
