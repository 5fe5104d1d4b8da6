#include "open_outcome.h"

#include "test_support.h"

#include "plugin/host_api.h"

#include <stdexcept>

namespace cellm::testing {

const cellm_format_iface& safetensors_format() {
    const Plugin* plugin = registry().find(CELLM_PLUGIN_FORMAT, "safetensors");
    if (plugin == nullptr) throw std::runtime_error("the safetensors plugin was not built");
    return *plugin->format();
}

Outcome try_open(const std::filesystem::path& folder) {
    cellm_model_file* file = nullptr;
    cellm_status* status = safetensors_format().open(folder.c_str(), &file);
    if (status == nullptr) {
        safetensors_format().close(file);
        return {CELLM_OK, ""};
    }
    Outcome outcome{host_api()->status_code(status), host_api()->status_message(status)};
    host_api()->status_free(status);
    return outcome;
}

}  // namespace cellm::testing
