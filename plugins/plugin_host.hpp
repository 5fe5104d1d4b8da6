// Access to the host's services from inside one of cellm's own plugins, and the guard that keeps C++
// exceptions from crossing the C ABI. Third-party plugins need not use this: it only wraps abi/.
#pragma once

#include <cellm/plugin.h>

#include <exception>
#include <new>
#include <string>

namespace cellm::plugin {

// The host table handed to this shared object's entry point. One per plugin library (symbols are hidden).
inline const cellm_host_api*& host() {
    static const cellm_host_api* api = nullptr;
    return api;
}

// The host copies the message; this side allocates nothing, so it is safe inside catch handlers.
inline cellm_status* error(cellm_status_code code, const char* message) { return host()->status_new(code, message); }
inline cellm_status* error(cellm_status_code code, const std::string& message) { return error(code, message.c_str()); }

inline void log(cellm_log_level level, const char* plugin, const std::string& message) {
    if (host() != nullptr) host()->log(level, plugin, message.c_str());
}

// Thrown inside a plugin to fail with a specific code; turned into a status by guard().
struct Failure : std::exception {
    Failure(cellm_status_code c, std::string m) : code(c), message(std::move(m)) {}
    const char* what() const noexcept override { return message.c_str(); }
    cellm_status_code code;
    std::string message;
};

// Runs `body` (returning cellm_status*) and converts any exception into a status.
template <class Body>
cellm_status* guard(Body&& body) noexcept {
    try {
        return body();
    } catch (const Failure& f) {
        return error(f.code, f.message.c_str());
    } catch (const std::bad_alloc&) {
        return error(CELLM_ERR_OUT_OF_MEMORY, "out of memory");
    } catch (const std::exception& e) {
        return error(CELLM_ERR_INTERNAL, e.what());
    } catch (...) {
        return error(CELLM_ERR_INTERNAL, "unknown error");
    }
}

}  // namespace cellm::plugin
