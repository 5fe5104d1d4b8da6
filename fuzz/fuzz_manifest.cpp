// libFuzzer target: the TOML manifest parser (parse_manifest). The input is the manifest's text; every
// rejection must be a cellm::Error, anything else escaping is a finding.
#include "error.h"
#include "manifest.h"

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    // ${VAR} expansion reads the environment: give it something fixed to find.
    setenv("CELLM_FUZZ_DIR", "/tmp/cellm-fuzz", 1);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    try {
        const cellm::Manifest m = cellm::parse_manifest(text, "/tmp/cellm-fuzz/manifest.toml");
        (void)m.model.path.string();
    } catch (const cellm::Error&) {
    }
    return 0;
}
