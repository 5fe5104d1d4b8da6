// The safetensors plugin opening a folder (or checkpoint) as the host would, for tests that expect it to fail:
// the status code and message, or CELLM_OK.
#pragma once

#include <cellm/format.h>

#include <filesystem>
#include <string>

namespace cellm::testing {

// The safetensors format plugin of the test registry; throws when it was not built.
const cellm_format_iface& safetensors_format();

struct Outcome {
    cellm_status_code code;
    std::string message;
};

// Opens `folder` (and closes it again when that succeeds).
Outcome try_open(const std::filesystem::path& folder);

}  // namespace cellm::testing
