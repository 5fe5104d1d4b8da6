// A backend plugin instance (one device context) and the device buffers it owns.
#pragma once

#include "plugin/plugin_registry.h"

#include <cellm/backend.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cellm {

using OptionList = std::vector<std::pair<std::string, std::string>>;

class Backend {
public:
    // Creates a context on `plugin` with manifest/command-line options. Throws cellm::Error.
    Backend(const Plugin& plugin, const OptionList& options);
    ~Backend();
    Backend(const Backend&) = delete;
    Backend& operator=(const Backend&) = delete;

    const cellm_backend_iface& iface() const { return *iface_; }
    cellm_backend* handle() const { return handle_; }
    const cellm_backend_info& info() const { return info_; }
    const char* name() const { return plugin_->name(); }
    const Plugin& plugin() const { return *plugin_; }
    // cellm_backend_info.scratch_bytes now (it grows as plans are prepared); 0 when the plugin does not say.
    uint64_t scratch_bytes() const;
    // The plugin's buffer_commit (ABI 1.4), or nullptr when its table has none.
    decltype(cellm_backend_iface::buffer_commit) buffer_commit() const;

private:
    const Plugin* plugin_;
    const cellm_backend_iface* iface_;
    cellm_backend* handle_ = nullptr;
    cellm_backend_info info_{};
};

// Owns one cellm_buffer of a backend.
class DeviceBuffer {
public:
    DeviceBuffer(Backend& backend, cellm_buffer* buffer, uint64_t size) : backend_(&backend), buffer_(buffer), size_(size) {}
    ~DeviceBuffer();
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    static std::unique_ptr<DeviceBuffer> allocate(Backend& backend, uint64_t size, cellm_buffer_usage usage);
    cellm_buffer* get() const { return buffer_; }
    uint64_t size() const { return size_; }

private:
    Backend* backend_;
    cellm_buffer* buffer_;
    uint64_t size_;
};

}  // namespace cellm
