// One Vulkan device opened for compute: instance, queue, command pool, the pipelines of cellm's shaders (made on
// first use), and memory: every allocation is one buffer with a device address, which is how shaders reach it.
#pragma once

#include "loader.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace cellm::vulkan {

// A Vulkan device as `cellm-host plugins` lists it.
struct DeviceSummary {
    std::string name, type;
    uint64_t memory = 0;            // bytes of device-local memory
    uint32_t api = 0;
    uint32_t max_shared = 0, max_push = 0;
    bool float64 = false;           // shaderFloat64: the shaders can follow the reference's arithmetic exactly
    bool shuffle = false;           // subgroup shuffles in compute shaders, which precision "fast" needs
    uint32_t subgroup = 0;          // invocations per subgroup
    bool cpu = false;               // a CPU implementation (lavapipe)
    std::string unusable;           // why cellm cannot use it, empty when it can
};

// Every device the loader sees, in the loader's order (the index the manifest's `device` option takes).
std::vector<DeviceSummary> list_devices();

class Device;

// A buffer and its memory. Host-visible allocations stay mapped.
class Allocation {
public:
    Allocation() = default;
    Allocation(Device& device, uint64_t size, bool host_visible);
    Allocation(Allocation&& other) noexcept { *this = std::move(other); }
    Allocation& operator=(Allocation&& other) noexcept;
    Allocation(const Allocation&) = delete;
    Allocation& operator=(const Allocation&) = delete;
    ~Allocation();

    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceAddress address = 0;
    uint64_t size = 0;
    std::byte* mapped = nullptr;  // null for device-local memory the host cannot see

private:
    Device* device_ = nullptr;
    VkDeviceMemory memory_ = VK_NULL_HANDLE;
};

class Device {
public:
    // `selector`: "" for the first usable device (a discrete GPU first), a decimal index into list_devices(), or a
    // part of a device's name. Throws plugin::Failure with one line naming what was found.
    // `precision`: "exact", "fast" or "" for the device's default (fast on a GPU that can, exact otherwise).
    Device(const std::string& selector, const std::string& precision);
    ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    Vk vk;
    VkDevice device = VK_NULL_HANDLE;
    VkQueue queue = VK_NULL_HANDLE;
    VkCommandPool pool = VK_NULL_HANDLE;
    VkPipelineLayout layout = VK_NULL_HANDLE;  // push constants only
    std::string name;
    uint64_t memory = 0;
    bool exact = false;          // shaders run with EXACT (common.glsl): the device has shaderFloat64
    bool fast = false;           // precision "fast": the fast kernels, and every other shader's ".f32" variant
    uint32_t subgroup = 0;       // invocations per subgroup
    float timestamp_period = 0;  // nanoseconds per timestamp tick; 0 when the queue has no timestamps

    uint32_t memory_type(uint32_t allowed, bool host_visible) const;
    // The pipeline of one of the embedded shaders (shaders.hpp), created on first use.
    VkPipeline pipeline(const std::string& shader);
    // Records commands into a fresh command buffer, submits it and waits.
    void run_once(const std::function<void(VkCommandBuffer)>& record);
    // Submits a recorded command buffer and waits for it.
    void submit(VkCommandBuffer cmd);

private:
    VkInstance instance_ = VK_NULL_HANDLE;
    VkPhysicalDevice physical_ = VK_NULL_HANDLE;
    VkPhysicalDeviceMemoryProperties memory_props_{};
    VkFence fence_ = VK_NULL_HANDLE;
    std::map<std::string, VkPipeline> pipelines_;
};

}  // namespace cellm::vulkan
