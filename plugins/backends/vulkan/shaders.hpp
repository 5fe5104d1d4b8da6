// The SPIR-V of every shader variant, compiled from shaders/ by glslang at build time (CMakeLists.txt).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace cellm::vulkan {

struct ShaderCode {
    std::string_view name;  // e.g. "matmul_vec_3": matmul.comp, vector shape, WEIGHT_TYPE 3 (Q4_1)
    const uint32_t* words;
    size_t bytes;
};

// The variant named `name`, or nullptr.
const ShaderCode* find_shader(std::string_view name);

}  // namespace cellm::vulkan
