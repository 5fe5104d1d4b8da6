#include "loader.hpp"

#include "plugin_host.hpp"

#include <dlfcn.h>
#include <link.h>

namespace cellm::vulkan {

using plugin::Failure;

namespace {

// Under AddressSanitizer, every library loaded so far stays mapped until the process exits. Debian 12's Mesa
// (22.3.6) lavapipe leaves a 128-byte allocation behind when the Vulkan loader unloads it at vkDestroyInstance (a
// bare vkCreateInstance / vkDestroyInstance program shows it); LeakSanitizer then reports it from an unmapped
// module, which no suppression can name. Kept mapped, the allocation stays reachable from the driver's globals.
void keep_drivers_mapped() {
#if defined(__SANITIZE_ADDRESS__)
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void*) {
            if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') {
                dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
            }
            return 0;
        },
        nullptr);
#endif
}

}  // namespace

const Vk& loader() {
    static const Vk vk = [] {
        Vk v;
        void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
        if (lib == nullptr) lib = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
        if (lib == nullptr) return v;
        v.vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
        if (v.vkGetInstanceProcAddr != nullptr)
            v.vkCreateInstance = reinterpret_cast<PFN_vkCreateInstance>(v.vkGetInstanceProcAddr(nullptr, "vkCreateInstance"));
        return v;
    }();
    if (vk.vkCreateInstance == nullptr)
        throw Failure(CELLM_ERR_UNSUPPORTED, "vulkan: no Vulkan loader (libvulkan.so.1) on this machine");
    return vk;
}

void load_instance(Vk& vk, VkInstance instance) {
#define CELLM_VK_LOAD(name)                                                                                            \
    vk.name = reinterpret_cast<PFN_##name>(vk.vkGetInstanceProcAddr(instance, #name));                                 \
    if (vk.name == nullptr) throw Failure(CELLM_ERR_UNSUPPORTED, "vulkan: the loader lacks " #name);
    CELLM_VK_INSTANCE_FUNCTIONS(CELLM_VK_LOAD)
#undef CELLM_VK_LOAD
    keep_drivers_mapped();
}

void load_device(Vk& vk, VkDevice device) {
#define CELLM_VK_LOAD(name)                                                                                            \
    vk.name = reinterpret_cast<PFN_##name>(vk.vkGetDeviceProcAddr(device, #name));                                     \
    if (vk.name == nullptr) throw Failure(CELLM_ERR_UNSUPPORTED, "vulkan: the driver lacks " #name);
    CELLM_VK_DEVICE_FUNCTIONS(CELLM_VK_LOAD)
#undef CELLM_VK_LOAD
    keep_drivers_mapped();
}

std::string result_name(VkResult r) {
    switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    default: return "VkResult " + std::to_string(static_cast<int>(r));
    }
}

void check(VkResult r, const char* what) {
    if (r == VK_SUCCESS) return;
    const cellm_status_code code = r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY
                                       ? CELLM_ERR_OUT_OF_MEMORY
                                       : CELLM_ERR_INTERNAL;
    throw Failure(code, std::string("vulkan: ") + what + " failed: " + result_name(r));
}

}  // namespace cellm::vulkan
