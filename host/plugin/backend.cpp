#include "plugin/backend.h"

#include "error.h"
#include "plugin/host_api.h"

#include <cstddef>

namespace cellm {

Backend::Backend(const Plugin& plugin, const OptionList& options) : plugin_(&plugin), iface_(plugin.backend()) {
    if (iface_ == nullptr) throw Error(std::string("plugin '") + plugin.name() + "' is not a backend");
    std::vector<cellm_option> c_options;
    c_options.reserve(options.size());
    for (const auto& [key, value] : options) c_options.push_back({key.c_str(), value.c_str()});
    check(iface_->create(c_options.data(), c_options.size(), &handle_),
          std::string("backend '") + plugin.name() + "'");
    info_.struct_size = sizeof(info_);
    if (cellm_status* s = iface_->get_info(handle_, &info_)) {
        iface_->destroy(handle_);
        check(s, std::string("backend '") + plugin.name() + "'");
    }
}

Backend::~Backend() { iface_->destroy(handle_); }

uint64_t Backend::scratch_bytes() const {
    cellm_backend_info info{};
    info.struct_size = sizeof(info);
    check(iface_->get_info(handle_, &info), std::string("backend '") + plugin_->name() + "'");
    return info.scratch_bytes;  // a plugin of an older minor leaves it 0
}

decltype(cellm_backend_iface::buffer_commit) Backend::buffer_commit() const {
    if (iface_->struct_size < offsetof(cellm_backend_iface, buffer_commit) + sizeof(iface_->buffer_commit)) return nullptr;
    return iface_->buffer_commit;
}

DeviceBuffer::~DeviceBuffer() { backend_->iface().buffer_free(backend_->handle(), buffer_); }

std::unique_ptr<DeviceBuffer> DeviceBuffer::allocate(Backend& backend, uint64_t size, cellm_buffer_usage usage) {
    cellm_buffer* buffer = nullptr;
    check(backend.iface().buffer_alloc(backend.handle(), size, usage, &buffer),
          std::string("backend '") + backend.name() + "': cannot allocate " + std::to_string(size >> 20) + " MiB");
    return std::make_unique<DeviceBuffer>(backend, buffer, size);
}

}  // namespace cellm
