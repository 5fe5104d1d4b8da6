// The services table the host hands every plugin (logging into spdlog, status objects), and C++ helpers
// for the statuses that come back from plugins.
#pragma once

#include <cellm/plugin.h>

#include <memory>
#include <string>

namespace cellm {

// The one table given to every plugin; static storage, valid for the life of the process.
const cellm_host_api* host_api();

// Owns a status returned by a plugin.
struct StatusDeleter {
    void operator()(cellm_status* s) const { host_api()->status_free(s); }
};
using StatusPtr = std::unique_ptr<cellm_status, StatusDeleter>;

// Throws cellm::Error with `context: <plugin message>` when `status` is not NULL (and frees it).
void check(cellm_status* status, const std::string& context);

}  // namespace cellm
