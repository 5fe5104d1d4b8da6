#include "device.hpp"

#include "plugin_host.hpp"
#include "shaders.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <memory>
#include <utility>

namespace cellm::vulkan {

using plugin::Failure;

namespace {

// An instance of Vulkan 1.2 (buffer device addresses and scalar layouts are core there), with its entry points.
struct Instance {
    Vk vk;
    VkInstance handle = VK_NULL_HANDLE;

    Instance() : vk(loader()) {
        VkApplicationInfo app{};
        app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
        app.pApplicationName = "cellm";
        app.apiVersion = VK_API_VERSION_1_2;
        VkInstanceCreateInfo info{};
        info.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
        info.pApplicationInfo = &app;
        const VkResult r = vk.vkCreateInstance(&info, nullptr, &handle);
        if (r != VK_SUCCESS)
            throw Failure(CELLM_ERR_UNSUPPORTED, "vulkan: no Vulkan 1.2 instance (" + result_name(r) + ")");
        load_instance(vk, handle);
    }
    ~Instance() {
        if (handle != VK_NULL_HANDLE) vk.vkDestroyInstance(handle, nullptr);
    }
    Instance(const Instance&) = delete;
    Instance& operator=(const Instance&) = delete;
    VkInstance release() { return std::exchange(handle, VK_NULL_HANDLE); }

    std::vector<VkPhysicalDevice> devices() const {
        uint32_t n = 0;
        check(vk.vkEnumeratePhysicalDevices(handle, &n, nullptr), "vkEnumeratePhysicalDevices");
        std::vector<VkPhysicalDevice> all(n);
        check(vk.vkEnumeratePhysicalDevices(handle, &n, all.data()), "vkEnumeratePhysicalDevices");
        all.resize(n);
        return all;
    }
};

const char* type_name(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
    }
}

// The first queue family with compute, or UINT32_MAX.
uint32_t compute_family(const Vk& vk, VkPhysicalDevice physical) {
    uint32_t n = 0;
    vk.vkGetPhysicalDeviceQueueFamilyProperties(physical, &n, nullptr);
    std::vector<VkQueueFamilyProperties> families(n);
    vk.vkGetPhysicalDeviceQueueFamilyProperties(physical, &n, families.data());
    for (uint32_t i = 0; i < n; ++i)
        if ((families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) != 0) return i;
    return UINT32_MAX;
}

DeviceSummary summarize(const Vk& vk, VkPhysicalDevice physical) {
    VkPhysicalDeviceProperties props{};
    vk.vkGetPhysicalDeviceProperties(physical, &props);
    VkPhysicalDeviceVulkan12Features v12{};
    v12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
    VkPhysicalDeviceFeatures2 features{};
    features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    features.pNext = &v12;
    vk.vkGetPhysicalDeviceFeatures2(physical, &features);
    VkPhysicalDeviceSubgroupProperties subgroup{};
    subgroup.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
    VkPhysicalDeviceProperties2 props2{};
    props2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    props2.pNext = &subgroup;
    vk.vkGetPhysicalDeviceProperties2(physical, &props2);
    VkPhysicalDeviceMemoryProperties memory{};
    vk.vkGetPhysicalDeviceMemoryProperties(physical, &memory);

    DeviceSummary s;
    s.name = props.deviceName;
    s.type = type_name(props.deviceType);
    s.api = props.apiVersion;
    for (uint32_t i = 0; i < memory.memoryHeapCount; ++i)
        if ((memory.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0) s.memory += memory.memoryHeaps[i].size;
    s.max_shared = props.limits.maxComputeSharedMemorySize;
    s.max_push = props.limits.maxPushConstantsSize;
    s.float64 = features.features.shaderFloat64 == VK_TRUE;
    s.shuffle = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0 &&
                (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT) != 0 && subgroup.subgroupSize >= 4;
    s.cpu = props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    s.subgroup = subgroup.subgroupSize;
    if (props.apiVersion < VK_API_VERSION_1_2) s.unusable = "needs Vulkan 1.2";
    else if (!v12.bufferDeviceAddress) s.unusable = "no bufferDeviceAddress";
    else if (!v12.scalarBlockLayout) s.unusable = "no scalarBlockLayout";
    else if (props.limits.maxPushConstantsSize < 128) s.unusable = "push constants below 128 bytes";
    else if (props.limits.maxComputeSharedMemorySize < 32768) s.unusable = "shared memory below 32 KiB";
    else if (compute_family(vk, physical) == UINT32_MAX) s.unusable = "no compute queue";
    return s;
}

}  // namespace

std::vector<DeviceSummary> list_devices() {
    Instance instance;
    std::vector<DeviceSummary> out;
    for (VkPhysicalDevice p : instance.devices()) out.push_back(summarize(instance.vk, p));
    return out;
}

Device::Device(const std::string& selector, const std::string& precision) {
    Instance instance;
    const std::vector<VkPhysicalDevice> all = instance.devices();
    if (all.empty()) throw Failure(CELLM_ERR_UNSUPPORTED, "vulkan: no Vulkan device found");
    std::vector<DeviceSummary> summaries;
    for (VkPhysicalDevice p : all) summaries.push_back(summarize(instance.vk, p));
    size_t chosen = all.size();
    if (selector.empty()) {
        for (size_t i = 0; i < all.size() && chosen == all.size(); ++i)
            if (summaries[i].unusable.empty() && summaries[i].type == "discrete GPU") chosen = i;
        for (size_t i = 0; i < all.size() && chosen == all.size(); ++i)
            if (summaries[i].unusable.empty()) chosen = i;
        if (chosen == all.size())
            throw Failure(CELLM_ERR_UNSUPPORTED, "vulkan: no usable Vulkan device (" + summaries[0].name + ": " +
                                                     summaries[0].unusable + ")");
    } else {
        size_t index = 0;
        const auto [end, ec] = std::from_chars(selector.data(), selector.data() + selector.size(), index);
        if (ec == std::errc() && end == selector.data() + selector.size()) {
            if (index >= all.size())
                throw Failure(CELLM_ERR_INVALID_ARGUMENT, "vulkan: device " + selector + " does not exist (" +
                                                              std::to_string(all.size()) + " found)");
            chosen = index;
        } else {
            for (size_t i = 0; i < all.size() && chosen == all.size(); ++i)
                if (summaries[i].name.find(selector) != std::string::npos) chosen = i;
            if (chosen == all.size()) {
                std::string names;
                for (const DeviceSummary& s : summaries) names += (names.empty() ? "" : ", ") + s.name;
                throw Failure(CELLM_ERR_INVALID_ARGUMENT, "vulkan: no device named '" + selector + "' (found: " + names + ")");
            }
        }
        if (!summaries[chosen].unusable.empty())
            throw Failure(CELLM_ERR_UNSUPPORTED, "vulkan: device " + summaries[chosen].name + " cannot run cellm: " +
                                                     summaries[chosen].unusable);
    }

    vk = instance.vk;
    physical_ = all[chosen];
    name = summaries[chosen].name;
    memory = summaries[chosen].memory;
    const uint32_t family = compute_family(vk, physical_);
    const float priority = 1.0f;
    VkDeviceQueueCreateInfo queue_info{};
    queue_info.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
    queue_info.queueFamilyIndex = family;
    queue_info.queueCount = 1;
    queue_info.pQueuePriorities = &priority;
    VkPhysicalDeviceVulkan12Features v12{};
    v12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
    v12.bufferDeviceAddress = VK_TRUE;
    v12.scalarBlockLayout = VK_TRUE;
    exact = summaries[chosen].float64;
    const DeviceSummary& chosen_summary = summaries[chosen];
    if (precision == "fast" && !chosen_summary.shuffle)
        throw Failure(CELLM_ERR_UNSUPPORTED, "vulkan: precision \"fast\" needs subgroup shuffles in compute shaders, which " +
                                                 name + " lacks");
    fast = precision == "fast" || (precision.empty() && chosen_summary.shuffle && !chosen_summary.cpu);
    subgroup = chosen_summary.subgroup;
    VkPhysicalDeviceFeatures2 features{};
    features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    features.pNext = &v12;
    features.features.shaderFloat64 = exact ? VK_TRUE : VK_FALSE;
    VkDeviceCreateInfo device_info{};
    device_info.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
    device_info.pNext = &features;
    device_info.queueCreateInfoCount = 1;
    device_info.pQueueCreateInfos = &queue_info;
    check(vk.vkCreateDevice(physical_, &device_info, nullptr, &device), "vkCreateDevice");
    instance_ = instance.release();
    load_device(vk, device);
    vk.vkGetDeviceQueue(device, family, 0, &queue);
    vk.vkGetPhysicalDeviceMemoryProperties(physical_, &memory_props_);

    VkPhysicalDeviceProperties props{};
    vk.vkGetPhysicalDeviceProperties(physical_, &props);
    uint32_t n_families = 0;
    vk.vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n_families, nullptr);
    std::vector<VkQueueFamilyProperties> families(n_families);
    vk.vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n_families, families.data());
    if (families[family].timestampValidBits > 0) timestamp_period = props.limits.timestampPeriod;

    VkCommandPoolCreateInfo pool_info{};
    pool_info.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
    pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pool_info.queueFamilyIndex = family;
    check(vk.vkCreateCommandPool(device, &pool_info, nullptr, &pool), "vkCreateCommandPool");
    VkFenceCreateInfo fence_info{};
    fence_info.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
    check(vk.vkCreateFence(device, &fence_info, nullptr, &fence_), "vkCreateFence");
    VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, 128};
    VkPipelineLayoutCreateInfo layout_info{};
    layout_info.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
    layout_info.pushConstantRangeCount = 1;
    layout_info.pPushConstantRanges = &range;
    check(vk.vkCreatePipelineLayout(device, &layout_info, nullptr, &layout), "vkCreatePipelineLayout");
}

Device::~Device() {
    if (device != VK_NULL_HANDLE) {
        vk.vkDeviceWaitIdle(device);
        for (auto& [shader, p] : pipelines_) vk.vkDestroyPipeline(device, p, nullptr);
        if (layout != VK_NULL_HANDLE) vk.vkDestroyPipelineLayout(device, layout, nullptr);
        if (fence_ != VK_NULL_HANDLE) vk.vkDestroyFence(device, fence_, nullptr);
        if (pool != VK_NULL_HANDLE) vk.vkDestroyCommandPool(device, pool, nullptr);
        vk.vkDestroyDevice(device, nullptr);
    }
    if (instance_ != VK_NULL_HANDLE) vk.vkDestroyInstance(instance_, nullptr);
}

uint32_t Device::memory_type(uint32_t allowed, bool host_visible) const {
    // Host-visible memory for staging is also coherent (no flushes) and, where there is a choice, cached
    // (reads back fast); device memory is device-local.
    const VkMemoryPropertyFlags need = host_visible
                                           ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
                                           : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    const VkMemoryPropertyFlags nice = host_visible ? VK_MEMORY_PROPERTY_HOST_CACHED_BIT : 0;
    uint32_t fallback = UINT32_MAX;
    for (uint32_t i = 0; i < memory_props_.memoryTypeCount; ++i) {
        if ((allowed & (1u << i)) == 0) continue;
        const VkMemoryPropertyFlags f = memory_props_.memoryTypes[i].propertyFlags;
        if ((f & need) != need) continue;
        if ((f & nice) == nice) return i;
        if (fallback == UINT32_MAX) fallback = i;
    }
    if (fallback == UINT32_MAX)
        throw Failure(CELLM_ERR_UNSUPPORTED, std::string("vulkan: no ") + (host_visible ? "host-visible" : "device-local") +
                                                 " memory type for a buffer");
    return fallback;
}

VkPipeline Device::pipeline(const std::string& shader) {
    if (auto it = pipelines_.find(shader); it != pipelines_.end()) return it->second;
    const ShaderCode* code = find_shader(exact && !fast ? shader : shader + ".f32");
    if (code == nullptr) throw Failure(CELLM_ERR_INTERNAL, "vulkan: no shader " + shader);
    VkShaderModuleCreateInfo module_info{};
    module_info.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
    module_info.codeSize = code->bytes;
    module_info.pCode = code->words;
    VkShaderModule module = VK_NULL_HANDLE;
    check(vk.vkCreateShaderModule(device, &module_info, nullptr, &module), "vkCreateShaderModule");
    VkComputePipelineCreateInfo info{};
    info.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
    info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    info.stage.module = module;
    info.stage.pName = "main";
    info.layout = layout;
    VkPipeline p = VK_NULL_HANDLE;
    const VkResult r = vk.vkCreateComputePipelines(device, VK_NULL_HANDLE, 1, &info, nullptr, &p);
    vk.vkDestroyShaderModule(device, module, nullptr);
    check(r, ("vkCreateComputePipelines (" + shader + ")").c_str());
    pipelines_.emplace(shader, p);
    return p;
}

void Device::submit(VkCommandBuffer cmd) {
    VkSubmitInfo submit{};
    submit.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    submit.commandBufferCount = 1;
    submit.pCommandBuffers = &cmd;
    check(vk.vkQueueSubmit(queue, 1, &submit, fence_), "vkQueueSubmit");
    check(vk.vkWaitForFences(device, 1, &fence_, VK_TRUE, UINT64_MAX), "vkWaitForFences");
    check(vk.vkResetFences(device, 1, &fence_), "vkResetFences");
}

void Device::run_once(const std::function<void(VkCommandBuffer)>& record) {
    VkCommandBufferAllocateInfo alloc{};
    alloc.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    alloc.commandPool = pool;
    alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    alloc.commandBufferCount = 1;
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    check(vk.vkAllocateCommandBuffers(device, &alloc, &cmd), "vkAllocateCommandBuffers");
    struct Free {
        Device* d;
        VkCommandBuffer c;
        ~Free() { d->vk.vkFreeCommandBuffers(d->device, d->pool, 1, &c); }
    } free_cmd{this, cmd};
    VkCommandBufferBeginInfo begin{};
    begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(vk.vkBeginCommandBuffer(cmd, &begin), "vkBeginCommandBuffer");
    record(cmd);
    check(vk.vkEndCommandBuffer(cmd), "vkEndCommandBuffer");
    submit(cmd);
}

Allocation::Allocation(Device& device, uint64_t bytes, bool host_visible) : size(bytes), device_(&device) {
    const Vk& vk = device.vk;
    VkBufferCreateInfo info{};
    info.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
    info.size = std::max<uint64_t>(bytes, 16);
    info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT |
                 VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    check(vk.vkCreateBuffer(device.device, &info, nullptr, &buffer), "vkCreateBuffer");
    VkMemoryRequirements req{};
    vk.vkGetBufferMemoryRequirements(device.device, buffer, &req);
    VkMemoryAllocateFlagsInfo flags{};
    flags.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO;
    flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
    VkMemoryAllocateInfo alloc{};
    alloc.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
    alloc.pNext = &flags;
    alloc.allocationSize = req.size;
    alloc.memoryTypeIndex = device.memory_type(req.memoryTypeBits, host_visible);
    const VkResult r = vk.vkAllocateMemory(device.device, &alloc, nullptr, &memory_);
    if (r != VK_SUCCESS) {
        vk.vkDestroyBuffer(device.device, buffer, nullptr);
        buffer = VK_NULL_HANDLE;
        check(r, ("vkAllocateMemory of " + std::to_string(bytes) + " bytes").c_str());
    }
    check(vk.vkBindBufferMemory(device.device, buffer, memory_, 0), "vkBindBufferMemory");
    VkBufferDeviceAddressInfo address_info{};
    address_info.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO;
    address_info.buffer = buffer;
    address = vk.vkGetBufferDeviceAddress(device.device, &address_info);
    if (host_visible) {
        void* p = nullptr;
        check(vk.vkMapMemory(device.device, memory_, 0, VK_WHOLE_SIZE, 0, &p), "vkMapMemory");
        mapped = static_cast<std::byte*>(p);
    }
}

Allocation& Allocation::operator=(Allocation&& other) noexcept {
    if (this == &other) return *this;
    this->~Allocation();
    buffer = std::exchange(other.buffer, VK_NULL_HANDLE);
    address = std::exchange(other.address, 0);
    size = std::exchange(other.size, 0);
    mapped = std::exchange(other.mapped, nullptr);
    device_ = std::exchange(other.device_, nullptr);
    memory_ = std::exchange(other.memory_, VK_NULL_HANDLE);
    return *this;
}

Allocation::~Allocation() {
    if (device_ == nullptr) return;
    if (buffer != VK_NULL_HANDLE) device_->vk.vkDestroyBuffer(device_->device, buffer, nullptr);
    if (memory_ != VK_NULL_HANDLE) device_->vk.vkFreeMemory(device_->device, memory_, nullptr);
    buffer = VK_NULL_HANDLE;
    memory_ = VK_NULL_HANDLE;
    device_ = nullptr;
}

}  // namespace cellm::vulkan
