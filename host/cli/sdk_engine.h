// cellm-host as a client of libcellm: the run, chat and serve commands open their engine through the C SDK
// (include/cellm/cellm.h), the same path an embedding application takes.
#pragma once

#include "manifest.h"
#include "manifest_overrides.h"

#include <cellm/cellm.h>

#include <memory>
#include <string>
#include <vector>

namespace cellm::cli {

// Throws cellm::Error with the SDK's message when `result` is a failure.
void check(cellm_result result);

struct EngineCloser {
    void operator()(cellm_engine* e) const { cellm_engine_close(e); }
};
struct SessionDestroyer {
    void operator()(cellm_session* s) const { cellm_session_destroy(s); }
};
using EnginePtr = std::unique_ptr<cellm_engine, EngineCloser>;
using SessionPtr = std::unique_ptr<cellm_session, SessionDestroyer>;

// The manifest named by the flags, with the flags' overrides, as an SDK engine of `max_sessions` sessions.
EnginePtr open_engine(const ManifestOverrides& flags, int32_t max_sessions);

// Session options from a manifest's generation settings. The stop pointers point into `generation`, which must
// outlive the call that passes them to the SDK (which copies them).
struct SessionSettings {
    cellm_session_options options;
    std::vector<const char*> stop;
};
std::unique_ptr<SessionSettings> session_settings(const GenerationConfig& generation, int32_t priority);

}  // namespace cellm::cli
