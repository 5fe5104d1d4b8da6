// Owning wrappers of libcellm's handles and its results as exceptions, for the commands that are SDK clients.
#pragma once

#include <cellm/cellm.h>

#include <memory>

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

}  // namespace cellm::cli
