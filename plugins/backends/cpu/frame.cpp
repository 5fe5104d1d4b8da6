// The ABI functions every CPU backend shares: instance, buffers, graph preparation and execution.
#include "frame.hpp"

#include "blocks.h"
#include "plugin_host.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

namespace cellm::cpu {
namespace {

using plugin::error;
using plugin::Failure;
using plugin::guard;

const BackendSpec* spec = nullptr;  // set by plugin_descriptor

}  // namespace
}  // namespace cellm::cpu

// The ABI's opaque instance handle.
struct cellm_backend {
    std::unordered_set<const cellm_buffer*> buffers;  // live buffers of this instance; leaves must use one
    std::unique_ptr<cellm::cpu::Executor> executor;
    // Every plan's intermediate nodes, grown to the largest plan run so far.
    cellm::cpu::AlignedBytes arena;
    uint64_t arena_size = 0;
    uint64_t largest_plan = 0;  // arena bytes the largest plan prepared needs
};

namespace cellm::cpu {

std::string error_prefix() { return std::string(spec != nullptr ? spec->name : "cpu") + ": "; }

bool owns(const cellm_backend& backend, const cellm_buffer* buffer) { return backend.buffers.count(buffer) == 1; }

namespace {

cellm_status* create(const cellm_option* options, size_t n_options, cellm_backend** out) {
    return guard([&]() -> cellm_status* {
        if (out == nullptr || (n_options > 0 && options == nullptr))
            return error(CELLM_ERR_INVALID_ARGUMENT, error_prefix() + "create needs an output pointer and options");
        ExecutorOptions settings;
        for (size_t i = 0; i < n_options; ++i) {
            const std::string key = options[i].key != nullptr ? options[i].key : "";
            const std::string value = options[i].value != nullptr ? options[i].value : "";
            if (key == "threads") {
                const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), settings.threads);
                if (ec != std::errc() || end != value.data() + value.size() || settings.threads <= 0)
                    return error(CELLM_ERR_INVALID_ARGUMENT,
                                 error_prefix() + "option 'threads' must be a positive integer, got '" + value + "'");
            } else if (key == "precision") {
                if (value != "exact" && value != "fast")
                    return error(CELLM_ERR_INVALID_ARGUMENT,
                                 error_prefix() + "option 'precision' must be \"exact\" or \"fast\", got '" + value + "'");
                settings.fast = value == "fast";
            } else {
                return error(CELLM_ERR_INVALID_ARGUMENT, error_prefix() + "unknown option '" + key + "'");
            }
        }
        auto backend = std::make_unique<cellm_backend>();
        backend->executor = spec->make_executor(settings);
        *out = backend.release();
        return nullptr;
    });
}

void destroy(cellm_backend* backend) { delete backend; }

cellm_status* get_info(const cellm_backend* backend, cellm_backend_info* out) {
    if (backend == nullptr || out == nullptr) return error(CELLM_ERR_INVALID_ARGUMENT, error_prefix() + "get_info needs a backend and output");
    if (CELLM_HAS_FIELD(out, cellm_backend_info, device_name)) out->device_name = spec->device_name;
    if (CELLM_HAS_FIELD(out, cellm_backend_info, device_memory)) out->device_memory = 0;
    if (CELLM_HAS_FIELD(out, cellm_backend_info, flags)) out->flags = CELLM_BACKEND_HOST_MEMORY;
    if (CELLM_HAS_FIELD(out, cellm_backend_info, threads)) out->threads = backend->executor->threads();
    if (CELLM_HAS_FIELD(out, cellm_backend_info, scratch_bytes)) out->scratch_bytes = backend->largest_plan;
    return nullptr;
}

int supports_type(const cellm_backend*, cellm_dtype type) { return blocks::supported(type) ? 1 : 0; }
int supports_op(const cellm_backend*, cellm_op op, cellm_dtype src0_type) { return op_accepts(op, src0_type) ? 1 : 0; }

cellm_status* buffer_alloc(cellm_backend* backend, uint64_t size, cellm_buffer_usage usage, cellm_buffer** out) {
    return guard([&]() -> cellm_status* {
        if (backend == nullptr || out == nullptr) return error(CELLM_ERR_INVALID_ARGUMENT, error_prefix() + "buffer_alloc needs a backend and output");
        auto buffer = std::make_unique<cellm_buffer>();
        // A KV pool's memory comes as the host commits its ranges (buffer_commit).
        buffer->owned = usage == CELLM_BUFFER_KV_CACHE ? AlignedBytes::by_range(size)
                                                       : AlignedBytes::huge(size, AlignedBytes::Commit::now);
        buffer->data = buffer->owned.data();
        buffer->size = size;
        backend->buffers.insert(buffer.get());
        *out = buffer.release();
        return nullptr;
    });
}

cellm_status* buffer_wrap_host(cellm_backend* backend, const void* data, uint64_t size, cellm_buffer** out) {
    return guard([&]() -> cellm_status* {
        if (backend == nullptr || out == nullptr || (data == nullptr && size > 0))
            return error(CELLM_ERR_INVALID_ARGUMENT, error_prefix() + "buffer_wrap_host needs a backend, memory and output");
        auto buffer = std::make_unique<cellm_buffer>();
        // Never written through: the only writers (buffer_write, KV_STORE) refuse read-only buffers.
        buffer->data = static_cast<std::byte*>(const_cast<void*>(data));
        buffer->size = size;
        buffer->writable = false;
        backend->buffers.insert(buffer.get());
        *out = buffer.release();
        return nullptr;
    });
}

void buffer_free(cellm_backend* backend, cellm_buffer* buffer) {
    if (backend != nullptr && buffer != nullptr && backend->buffers.erase(buffer) == 1)
        backend->executor->forget(buffer->data, buffer->size);
    delete buffer;
}

// Checks that [offset, offset + size) lies inside a live buffer of this backend.
cellm_status* check_range(const cellm_backend* backend, const cellm_buffer* buffer, uint64_t offset, const void* data,
                          uint64_t size, const char* what) {
    if (backend == nullptr || buffer == nullptr || backend->buffers.count(buffer) == 0)
        return error(CELLM_ERR_INVALID_ARGUMENT, error_prefix() + what + ": unknown buffer");
    if (data == nullptr && size > 0) return error(CELLM_ERR_INVALID_ARGUMENT, error_prefix() + what + ": no data");
    if (offset > buffer->size || size > buffer->size - offset)
        return error(CELLM_ERR_INVALID_ARGUMENT, error_prefix() + what + " of " + std::to_string(size) +
                                                     " bytes at offset " + std::to_string(offset) + " exceeds buffer of " +
                                                     std::to_string(buffer->size) + " bytes");
    return nullptr;
}

cellm_status* buffer_write(cellm_backend* backend, cellm_buffer* buffer, uint64_t offset, const void* data, uint64_t size) {
    return guard([&]() -> cellm_status* {
        if (cellm_status* s = check_range(backend, buffer, offset, data, size, "buffer_write")) return s;
        if (!buffer->writable) return error(CELLM_ERR_INVALID_ARGUMENT, error_prefix() + "buffer_write: buffer wraps read-only host memory");
        if (size > 0) std::memcpy(buffer->data + offset, data, size);
        return nullptr;
    });
}

cellm_status* buffer_read(cellm_backend* backend, const cellm_buffer* buffer, uint64_t offset, void* data, uint64_t size) {
    return guard([&]() -> cellm_status* {
        if (cellm_status* s = check_range(backend, buffer, offset, data, size, "buffer_read")) return s;
        if (size > 0) std::memcpy(data, buffer->data + offset, size);
        return nullptr;
    });
}

cellm_status* graph_prepare(cellm_backend* backend, const cellm_graph* graph, cellm_plan** out) {
    return guard([&]() -> cellm_status* {
        if (backend == nullptr || graph == nullptr || out == nullptr)
            return error(CELLM_ERR_INVALID_ARGUMENT, error_prefix() + "graph_prepare needs a backend, graph and output");
        auto plan = std::make_unique<cellm_plan>();
        prepare(*backend, *graph, *plan);
        backend->largest_plan = std::max(backend->largest_plan, plan->arena_size);
        *out = plan.release();
        return nullptr;
    });
}

cellm_status* graph_execute(cellm_backend* backend, cellm_plan* plan, const cellm_execute_args* args) {
    return guard([&]() -> cellm_status* {
        if (backend == nullptr || plan == nullptr)
            return error(CELLM_ERR_INVALID_ARGUMENT, error_prefix() + "graph_execute needs a backend, plan and arguments");
        graph::check_bindings(*plan, args, error_prefix());
        const size_t n_inputs = args->n_inputs, n_outputs = args->n_outputs;
        auto input = [&](size_t k) -> const cellm_input_binding& { return *cellm_input_at(args, k); };
        auto output = [&](size_t k) -> const cellm_output_binding& { return *cellm_output_at(args, k); };
        if (backend->arena_size < plan->arena_size) {
            backend->arena = AlignedBytes(plan->arena_size);
            backend->arena_size = plan->arena_size;
        }
        place_in_arena(*plan, backend->arena.data());
        for (size_t k = 0; k < n_inputs; ++k)
            std::memcpy(plan->nodes[static_cast<size_t>(input(k).node)].data, input(k).data, input(k).size);
        backend->executor->run(*plan);
        for (size_t k = 0; k < n_outputs; ++k)
            std::memcpy(output(k).data, plan->nodes[static_cast<size_t>(output(k).node)].data, output(k).size);
        return nullptr;
    });
}

void plan_free(cellm_backend*, cellm_plan* plan) { delete plan; }

cellm_status* buffer_commit(cellm_backend* backend, cellm_buffer* buffer, uint64_t offset, uint64_t size, int resident) {
    return guard([&]() -> cellm_status* {
        if (cellm_status* s = check_range(backend, buffer, offset, buffer, size, "buffer_commit")) return s;
        if (!buffer->writable) return error(CELLM_ERR_INVALID_ARGUMENT, error_prefix() + "buffer_commit: buffer wraps host memory");
        buffer->owned.set_resident(offset, size, resident != 0);
        return nullptr;
    });
}

const cellm_backend_iface iface = {
    sizeof(cellm_backend_iface),
    create,
    destroy,
    get_info,
    supports_type,
    supports_op,
    buffer_alloc,
    buffer_wrap_host,
    buffer_free,
    buffer_write,
    buffer_read,
    graph_prepare,
    graph_execute,
    plan_free,
    nullptr,  // describe: the spec's, set in plugin_descriptor
    buffer_commit,
};

}  // namespace

const cellm_plugin_desc* plugin_descriptor(const BackendSpec& backend_spec, const cellm_host_api* host,
                                           uint32_t host_abi_major) {
    if (host == nullptr || host_abi_major != CELLM_ABI_MAJOR) return nullptr;
    plugin::host() = host;
    spec = &backend_spec;
    static cellm_backend_iface table = iface;
    table.describe = backend_spec.describe;
    static const cellm_plugin_desc descriptor = {
        sizeof(cellm_plugin_desc), CELLM_ABI_MAJOR, CELLM_ABI_MINOR, CELLM_PLUGIN_BACKEND,
        backend_spec.name,         backend_spec.version, backend_spec.summary,      &table,
    };
    return &descriptor;
}

}  // namespace cellm::cpu
