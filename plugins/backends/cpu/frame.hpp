// What every CPU backend plugin shares: host-memory buffers, graph validation and memory planning, input and
// output bindings. A backend supplies only its Executor, the part that runs a prepared plan's nodes.
#pragma once

#include "plan.hpp"

#include <cellm/plugin.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace cellm::cpu {

// Runs prepared plans for one backend instance (so it may keep scratch memory between steps; the ABI drives an
// instance from one thread at a time).
class Executor {
public:
    virtual ~Executor() = default;
    // Runs every node of `plan`, whose inputs are bound, in order. Throws plugin::Failure on bad runtime data
    // (a token id, slot or block table entry out of range).
    virtual void run(Plan& plan) = 0;
    // Threads it computes with, for get_info.
    virtual int threads() const = 0;
    // The host is about to free the buffer [begin, begin + size): whatever the executor derived from its
    // contents (repacked weights) must go, since the address may be reused for other data.
    virtual void forget(const std::byte* /*begin*/, uint64_t /*size*/) {}
};

// The [backend] options every CPU backend takes.
struct ExecutorOptions {
    int threads = 0;    // the manifest's value, 0 when it has none
    bool fast = false;  // precision = "fast": may leave the reference's order where a bound is written in docs
};

// A CPU backend plugin: its identity and how it makes an executor. A static object of the plugin.
struct BackendSpec {
    const char* name;         // plugin name; also prefixes every error message
    const char* version;
    const char* summary;      // one line for `cellm-host plugins`
    const char* device_name;  // cellm_backend_info.device_name
    // Throws plugin::Failure for an option it refuses.
    std::unique_ptr<Executor> (*make_executor)(const ExecutorOptions& options);
    // Device lines for `cellm-host plugins`.
    void (*describe)(void (*emit)(void* user, const char* line), void* user);
};

// The descriptor cellm_plugin_entry returns for `spec`, or nullptr when the host's ABI major differs.
const cellm_plugin_desc* plugin_descriptor(const BackendSpec& spec, const cellm_host_api* host, uint32_t host_abi_major);

}  // namespace cellm::cpu
