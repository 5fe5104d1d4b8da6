// A plugin that breaks the ABI's rule that no exception crosses it: its entry point throws. Discovery must skip
// it with the reason and go on.
#include <cellm/abi.h>

#include <stdexcept>

extern "C" CELLM_EXPORT const cellm_plugin_desc* cellm_plugin_entry(const cellm_host_api*, uint32_t, uint32_t) {
    throw std::runtime_error("this plugin fails to start");
}
