// cellm-host as a client of libcellm: the run, chat and serve commands open their engine through the C SDK
// (include/cellm/cellm.h), the same path an embedding application takes.
#pragma once

#include "manifest.h"
#include "manifest_overrides.h"
#include "sdk_handles.h"

#include <memory>
#include <string>
#include <vector>

namespace cellm::cli {

// The manifest named by the flags, with the flags' overrides, as an SDK engine of `max_sessions` sessions.
EnginePtr open_engine(const ManifestOverrides& flags, int32_t max_sessions);

// Session options from a manifest's generation settings. The stop pointers point into `generation`, which must
// outlive the call that passes them to the SDK (which copies them).
struct SessionSettings {
    cellm_session_options options;
    std::vector<const char*> stop;
};
std::unique_ptr<SessionSettings> session_settings(const GenerationConfig& generation, int32_t priority);
// Session options for a model run without a manifest: the engine's defaults (the model file's own sampling keys
// among them, which only the engine reads), then the flags.
std::unique_ptr<SessionSettings> engine_session_settings(cellm_engine* engine, const ManifestOverrides& flags,
                                                         int32_t priority);

}  // namespace cellm::cli
