#include "plugin/host_api.h"

#include "error.h"

#include <spdlog/spdlog.h>

#include <new>
#include <string>

struct cellm_status {
    cellm_status_code code;
    std::string message;
};

namespace cellm {
namespace {

// Returned when allocating a status fails, so status_new never returns NULL; never freed.
cellm_status out_of_memory_status{CELLM_ERR_OUT_OF_MEMORY, "out of memory"};

void log_line(cellm_log_level level, const char* plugin, const char* message) {
    const char* who = plugin != nullptr ? plugin : "plugin";
    const char* what = message != nullptr ? message : "";
    switch (level) {
    case CELLM_LOG_DEBUG: spdlog::debug("[{}] {}", who, what); break;
    case CELLM_LOG_INFO: spdlog::info("[{}] {}", who, what); break;
    case CELLM_LOG_WARN: spdlog::warn("[{}] {}", who, what); break;
    default: spdlog::error("[{}] {}", who, what); break;
    }
}

cellm_status* status_new(cellm_status_code code, const char* message) {
    try {
        return new cellm_status{code, message != nullptr ? message : ""};
    } catch (...) {
        return &out_of_memory_status;
    }
}

cellm_status_code status_code(const cellm_status* s) { return s != nullptr ? s->code : CELLM_OK; }
const char* status_message(const cellm_status* s) { return s != nullptr ? s->message.c_str() : ""; }

void status_free(cellm_status* s) {
    if (s != &out_of_memory_status) delete s;
}

const cellm_host_api table = {
    sizeof(cellm_host_api), CELLM_ABI_MAJOR, CELLM_ABI_MINOR, log_line, status_new, status_code, status_message,
    status_free,
};

}  // namespace

const cellm_host_api* host_api() { return &table; }

void check(cellm_status* status, const std::string& context) {
    if (status == nullptr) return;
    StatusPtr owned(status);
    throw Error(context + ": " + status_message(status));
}

}  // namespace cellm
