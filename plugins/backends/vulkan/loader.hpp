// The Vulkan loader, opened at run time (dlopen of libvulkan.so.1) rather than linked, so the plugin loads on a
// machine without Vulkan and says so in one error line instead of failing to load.
#pragma once

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <string>

namespace cellm::vulkan {

// Every entry point the backend calls, resolved through vkGetInstanceProcAddr.
#define CELLM_VK_INSTANCE_FUNCTIONS(X)                                                                                 \
    X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)                             \
    X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkGetPhysicalDeviceMemoryProperties) X(vkGetPhysicalDeviceFeatures2) \
    X(vkGetPhysicalDeviceProperties2)                                                                                  \
    X(vkCreateDevice) X(vkGetDeviceProcAddr)
#define CELLM_VK_DEVICE_FUNCTIONS(X)                                                                                   \
    X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer) X(vkGetBufferMemoryRequirements)      \
    X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory) X(vkMapMemory) X(vkUnmapMemory)                          \
    X(vkGetBufferDeviceAddress) X(vkCreateShaderModule) X(vkDestroyShaderModule) X(vkCreatePipelineLayout)            \
    X(vkDestroyPipelineLayout) X(vkCreateComputePipelines) X(vkDestroyPipeline) X(vkCreateCommandPool)                 \
    X(vkDestroyCommandPool) X(vkAllocateCommandBuffers) X(vkFreeCommandBuffers) X(vkBeginCommandBuffer)               \
    X(vkEndCommandBuffer) X(vkCmdBindPipeline) X(vkCmdPushConstants) X(vkCmdDispatch) X(vkCmdPipelineBarrier)         \
    X(vkCmdCopyBuffer) X(vkQueueSubmit) X(vkCreateFence) X(vkDestroyFence) X(vkWaitForFences) X(vkResetFences)        \
    X(vkCreateQueryPool) X(vkDestroyQueryPool) X(vkCmdWriteTimestamp) X(vkCmdResetQueryPool) X(vkGetQueryPoolResults)  \
    X(vkDeviceWaitIdle)

struct Vk {
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
    PFN_vkCreateInstance vkCreateInstance = nullptr;
#define CELLM_VK_MEMBER(name) PFN_##name name = nullptr;
    CELLM_VK_INSTANCE_FUNCTIONS(CELLM_VK_MEMBER)
    CELLM_VK_DEVICE_FUNCTIONS(CELLM_VK_MEMBER)
#undef CELLM_VK_MEMBER
};

// The loader's global entry points, or throws plugin::Failure(CELLM_ERR_UNSUPPORTED) when there is no loader.
// Opened once per process and never closed.
const Vk& loader();
// Fills the instance- and device-level entry points of `vk` (a copy of loader()).
void load_instance(Vk& vk, VkInstance instance);
void load_device(Vk& vk, VkDevice device);

// "VK_ERROR_OUT_OF_DEVICE_MEMORY" and the like.
std::string result_name(VkResult r);
// Throws plugin::Failure naming `what` unless r is VK_SUCCESS.
void check(VkResult r, const char* what);

}  // namespace cellm::vulkan
