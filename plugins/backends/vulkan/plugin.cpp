// The "vulkan" backend: weights and KV pools in device memory in their stored (quantized) form, every op a
// GLSL compute shader (shaders/), each prepared step recorded once into one command buffer and submitted once
// per execute. Options: device (index or part of the name), precision ("exact": the reference's order, bit for bit;
// "fast": docs/vulkan.md; default fast on GPUs), profile (1: GPU time per op kind when a plan is freed),
// threads (accepted for manifests shared with CPU backends; a GPU does not use it).
#include "device.hpp"
#include "plan.hpp"

#include "plugin_host.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_set>

using cellm::plugin::error;
using cellm::plugin::Failure;
using cellm::plugin::guard;

struct cellm_backend {
    std::unique_ptr<cellm::vulkan::Device> device;
    std::unordered_set<const cellm_buffer*> buffers;
    bool profile = false;
};

namespace cellm::vulkan {
namespace {

const std::string prefix = "vulkan: ";

// The weight types the shaders dequantize (shaders/weights.glsl).
bool weight_type(cellm_dtype type) {
    switch (type) {
    case CELLM_TYPE_F32: case CELLM_TYPE_F16: case CELLM_TYPE_BF16: case CELLM_TYPE_Q4_0: case CELLM_TYPE_Q4_1:
    case CELLM_TYPE_Q5_0: case CELLM_TYPE_Q5_1: case CELLM_TYPE_Q8_0: case CELLM_TYPE_Q4_K: case CELLM_TYPE_Q5_K:
    case CELLM_TYPE_Q6_K: return true;
    default: return false;
    }
}

bool accepts(cellm_op op, cellm_dtype type) { return graph::op_accepts(op, type, weight_type); }

cellm_status* create(const cellm_option* options, size_t n_options, cellm_backend** out) {
    return guard([&]() -> cellm_status* {
        if (out == nullptr || (n_options > 0 && options == nullptr))
            return error(CELLM_ERR_INVALID_ARGUMENT, prefix + "create needs an output pointer and options");
        std::string selector, precision;
        bool profile = false;
        for (size_t i = 0; i < n_options; ++i) {
            const std::string key = options[i].key != nullptr ? options[i].key : "";
            const std::string value = options[i].value != nullptr ? options[i].value : "";
            if (key == "device") {
                selector = value;
            } else if (key == "precision") {
                if (value != "exact" && value != "fast")
                    return error(CELLM_ERR_INVALID_ARGUMENT, prefix + "option 'precision' must be \"exact\" or \"fast\", got '" + value + "'");
                precision = value;
            } else if (key == "profile") {
                if (value != "0" && value != "1" && value != "true" && value != "false")
                    return error(CELLM_ERR_INVALID_ARGUMENT, prefix + "option 'profile' must be 0 or 1, got '" + value + "'");
                profile = value == "1" || value == "true";
            } else if (key == "threads") {
                int threads = 0;
                const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), threads);
                if (ec != std::errc() || end != value.data() + value.size() || threads <= 0)
                    return error(CELLM_ERR_INVALID_ARGUMENT,
                                 prefix + "option 'threads' must be a positive integer, got '" + value + "'");
            } else {
                return error(CELLM_ERR_INVALID_ARGUMENT, prefix + "unknown option '" + key + "'");
            }
        }
        auto backend = std::make_unique<cellm_backend>();
        backend->device = std::make_unique<Device>(selector, precision);
        backend->profile = profile;
        *out = backend.release();
        return nullptr;
    });
}

void destroy(cellm_backend* backend) { delete backend; }

cellm_status* get_info(const cellm_backend* backend, cellm_backend_info* out) {
    if (backend == nullptr || out == nullptr) return error(CELLM_ERR_INVALID_ARGUMENT, prefix + "get_info needs a backend and output");
    if (CELLM_HAS_FIELD(out, cellm_backend_info, device_name)) out->device_name = backend->device->name.c_str();
    if (CELLM_HAS_FIELD(out, cellm_backend_info, device_memory)) out->device_memory = backend->device->memory;
    if (CELLM_HAS_FIELD(out, cellm_backend_info, flags)) out->flags = 0;
    if (CELLM_HAS_FIELD(out, cellm_backend_info, threads)) out->threads = 0;
    return nullptr;
}

int supports_type(const cellm_backend*, cellm_dtype type) { return weight_type(type) ? 1 : 0; }
int supports_op(const cellm_backend*, cellm_op op, cellm_dtype type) { return accepts(op, type) ? 1 : 0; }

cellm_status* buffer_alloc(cellm_backend* backend, uint64_t size, cellm_buffer_usage, cellm_buffer** out) {
    return guard([&]() -> cellm_status* {
        if (backend == nullptr || out == nullptr) return error(CELLM_ERR_INVALID_ARGUMENT, prefix + "buffer_alloc needs a backend and output");
        auto buffer = std::make_unique<cellm_buffer>();
        buffer->memory = Allocation(*backend->device, size, false);
        backend->buffers.insert(buffer.get());
        *out = buffer.release();
        return nullptr;
    });
}

void buffer_free(cellm_backend* backend, cellm_buffer* buffer) {
    if (backend != nullptr) backend->buffers.erase(buffer);
    delete buffer;
}

// Checks that [offset, offset + size) lies inside a live buffer of this backend.
void check_range(const cellm_backend* backend, const cellm_buffer* buffer, uint64_t offset, const void* data, uint64_t size,
                 const char* what) {
    if (backend == nullptr || buffer == nullptr || backend->buffers.count(buffer) == 0)
        throw Failure(CELLM_ERR_INVALID_ARGUMENT, prefix + what + ": unknown buffer");
    if (data == nullptr && size > 0) throw Failure(CELLM_ERR_INVALID_ARGUMENT, prefix + what + ": no data");
    const uint64_t capacity = buffer->memory.size;
    if (offset > capacity || size > capacity - offset)
        throw Failure(CELLM_ERR_INVALID_ARGUMENT, prefix + what + " of " + std::to_string(size) + " bytes at offset " +
                                                      std::to_string(offset) + " exceeds buffer of " + std::to_string(capacity) + " bytes");
}

// Moves bytes between host memory and a device buffer through a host-visible staging buffer, in chunks.
template <bool ToDevice>
void transfer(cellm_backend* backend, const cellm_buffer* buffer, uint64_t offset, std::byte* host, uint64_t size) {
    constexpr uint64_t chunk = 64ull << 20;
    Device& device = *backend->device;
    Allocation staging(device, std::min(size, chunk), true);
    for (uint64_t done = 0; done < size; done += chunk) {
        const uint64_t n = std::min(chunk, size - done);
        if (ToDevice) std::memcpy(staging.mapped, host + done, n);
        device.run_once([&](VkCommandBuffer cmd) {
            const VkBufferCopy region = ToDevice ? VkBufferCopy{0, offset + done, n} : VkBufferCopy{offset + done, 0, n};
            if (ToDevice) device.vk.vkCmdCopyBuffer(cmd, staging.buffer, buffer->memory.buffer, 1, &region);
            else device.vk.vkCmdCopyBuffer(cmd, buffer->memory.buffer, staging.buffer, 1, &region);
            VkMemoryBarrier b{};
            b.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
            b.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
            b.dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_SHADER_READ_BIT;
            device.vk.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT,
                                           VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &b, 0,
                                           nullptr, 0, nullptr);
        });
        if (!ToDevice) std::memcpy(host + done, staging.mapped, n);
    }
}

cellm_status* buffer_write(cellm_backend* backend, cellm_buffer* buffer, uint64_t offset, const void* data, uint64_t size) {
    return guard([&]() -> cellm_status* {
        check_range(backend, buffer, offset, data, size, "buffer_write");
        if (size > 0) transfer<true>(backend, buffer, offset, static_cast<std::byte*>(const_cast<void*>(data)), size);
        return nullptr;
    });
}

cellm_status* buffer_read(cellm_backend* backend, const cellm_buffer* buffer, uint64_t offset, void* data, uint64_t size) {
    return guard([&]() -> cellm_status* {
        check_range(backend, buffer, offset, data, size, "buffer_read");
        if (size > 0) transfer<false>(backend, buffer, offset, static_cast<std::byte*>(data), size);
        return nullptr;
    });
}

cellm_status* graph_prepare(cellm_backend* backend, const cellm_graph* graph, cellm_plan** out) {
    return guard([&]() -> cellm_status* {
        if (backend == nullptr || graph == nullptr || out == nullptr)
            return error(CELLM_ERR_INVALID_ARGUMENT, prefix + "graph_prepare needs a backend, graph and output");
        const graph::Rules rules{prefix, accepts, [&](const cellm_buffer* b) -> std::optional<graph::BufferFacts> {
                                     if (backend->buffers.count(b) == 0) return std::nullopt;
                                     return graph::BufferFacts{b->memory.size, true, nullptr};
                                 }};
        auto plan = std::make_unique<cellm_plan>();
        plan->plan = std::make_unique<Plan>(*backend->device, graph::check(*graph, rules), backend->profile);
        *out = plan.release();
        return nullptr;
    });
}

cellm_status* graph_execute(cellm_backend* backend, cellm_plan* plan, const cellm_execute_args* args) {
    return guard([&]() -> cellm_status* {
        if (backend == nullptr || plan == nullptr || args == nullptr)
            return error(CELLM_ERR_INVALID_ARGUMENT, prefix + "graph_execute needs a backend, plan and arguments");
        plan->plan->execute(*args);
        return nullptr;
    });
}

// With profile = 1, a freed plan that ran reports where its steps spent their time.
void report(const Plan& plan) {
    const Plan::Profile& p = plan.profile();
    if (p.steps == 0) return;
    const auto steps = static_cast<double>(p.steps);
    std::ostringstream s;
    s.precision(1);
    s << std::fixed << "vulkan profile, " << p.steps << " steps of " << plan.graph().nodes.size() << " nodes: "
      << p.dispatches << " dispatches and " << p.barriers << " barriers per step; per step " << p.wall_ns / steps / 1e3
      << " us on the host clock, " << p.gpu_ns / steps / 1e3 << " us between the first and last GPU timestamp;";
    for (const auto& [kind, v] : p.kinds)
        s << " " << kind << " " << v.first / p.steps << "x " << v.second / steps / 1e3 << " us;";
    plugin::log(CELLM_LOG_INFO, "vulkan", s.str());
}

void plan_free(cellm_backend*, cellm_plan* plan) {
    if (plan != nullptr && plan->plan != nullptr) report(*plan->plan);
    delete plan;
}

void describe(void (*emit)(void* user, const char* line), void* user) {
    if (emit == nullptr) return;
    std::vector<DeviceSummary> devices;
    try {
        devices = list_devices();
    } catch (const Failure& f) {
        emit(user, f.message.c_str());
        return;
    }
    if (devices.empty()) emit(user, "vulkan: no Vulkan device found");
    for (size_t i = 0; i < devices.size(); ++i) {
        const DeviceSummary& d = devices[i];
        std::ostringstream s;
        s << "device " << i << ": " << d.name << " (" << d.type << ", Vulkan " << VK_API_VERSION_MAJOR(d.api) << "."
          << VK_API_VERSION_MINOR(d.api) << "." << VK_API_VERSION_PATCH(d.api) << ", " << (d.memory >> 20)
          << " MiB device memory, " << d.max_shared / 1024 << " KiB shared memory, " << d.max_push
          << " B push constants, " << (d.float64 ? "float64: the reference's arithmetic" : "no float64: approximate division and exp")
          << ", precision " << (d.shuffle && !d.cpu ? "fast by default" : d.shuffle ? "exact by default, fast possible" : "exact only")
          << ")" << (d.unusable.empty() ? "" : " unusable: " + d.unusable);
        emit(user, s.str().c_str());
    }
}

const cellm_backend_iface iface = {
    sizeof(cellm_backend_iface), create, destroy, get_info, supports_type, supports_op, buffer_alloc,
    nullptr,  // buffer_wrap_host: device memory only
    buffer_free, buffer_write, buffer_read, graph_prepare, graph_execute, plan_free, describe,
    nullptr,  // buffer_commit: device memory is allocated whole
};

}  // namespace
}  // namespace cellm::vulkan

extern "C" CELLM_EXPORT const cellm_plugin_desc* cellm_plugin_entry(const cellm_host_api* host, uint32_t host_abi_major,
                                                                    uint32_t) {
    if (host == nullptr || host_abi_major != CELLM_ABI_MAJOR) return nullptr;
    cellm::plugin::host() = host;
    static const cellm_plugin_desc descriptor = {
        sizeof(cellm_plugin_desc), CELLM_ABI_MAJOR, CELLM_ABI_MINOR, CELLM_PLUGIN_BACKEND, "vulkan", "0.1.0",
        "GPU backend: Vulkan compute shaders, quantized weights in device memory, one command buffer per step",
        &cellm::vulkan::iface,
    };
    return &descriptor;
}
