// A step's graph prepared for one Vulkan device: the checked nodes placed in device memory, every op turned into
// dispatches recorded once into one command buffer (barriers only where a dispatch reads or overwrites memory an
// earlier one since the last barrier wrote or read), and what execute must do around it: copy the inputs and the
// step's rotary angles in, check the inputs that index memory, read the outputs back.
#pragma once

#include "device.hpp"
#include "graph.hpp"

#include <array>
#include <memory>
#include <string>
#include <vector>

// The ABI's opaque buffer handle: one allocation of the device.
struct cellm_buffer {
    cellm::vulkan::Allocation memory;
};

namespace cellm::vulkan {

// One compute dispatch: a shader variant, its push constants and its grid.
struct Dispatch {
    std::string shader;
    std::array<std::byte, 128> push{};
    uint32_t push_size = 0;
    std::array<uint32_t, 3> groups{1, 1, 1};
    std::string kind;  // what the profile counts it under: the op's name, or "ROUND" for activation rounding
};

// A table of cos and sin for one ROPE configuration and this step's positions, computed on the host in double as
// the reference does (GPU sin and cos of large angles are not accurate to float).
struct RopeAngles {
    int32_t positions = -1;  // INPUT node
    int32_t n_rot = 0;
    double base = 0, scale = 1;
    int32_t factors_node = -1;   // WEIGHT node of per-frequency divisors, -1 for none
    std::vector<float> factors;  // its values
    uint64_t staging_offset = 0, device_offset = 0, bytes = 0;
};

class Plan {
public:
    Plan(Device& device, const graph::Checked& graph, bool profile);
    ~Plan();
    Plan(const Plan&) = delete;
    Plan& operator=(const Plan&) = delete;

    // Copies the inputs in, checks them, runs the command buffer once and copies the outputs out.
    void execute(const cellm_execute_args& args);

    const graph::Checked& graph() const { return graph_; }
    // Kind -> (dispatches, accumulated GPU nanoseconds), and host time, when profiling.
    struct Profile {
        std::vector<std::pair<std::string, std::pair<uint64_t, double>>> kinds;
        uint64_t steps = 0;
        double gpu_ns = 0, wall_ns = 0;
        size_t dispatches = 0, barriers = 0;
    };
    const Profile& profile() const { return profile_; }

private:
    VkDeviceAddress address(int32_t node) const;
    void record();
    void check_inputs(const std::vector<const std::byte*>& inputs) const;

    Device& device_;
    graph::Checked graph_;
    std::vector<Dispatch> dispatches_;
    std::vector<bool> barrier_before_;  // per dispatch
    std::vector<RopeAngles> ropes_;
    uint64_t arena_size_ = 0, scratch_offset_ = 0, angles_offset_ = 0, partials_offset_ = 0;
    std::vector<uint64_t> staging_offset_;   // per node: where an INPUT node's data sits in the staging buffer
    std::vector<uint64_t> readback_offset_;  // per node: where a graph output lands in the readback buffer
    Allocation arena_, staging_, readback_;
    VkCommandBuffer cmd_ = VK_NULL_HANDLE;
    VkQueryPool queries_ = VK_NULL_HANDLE;
    Profile profile_;
};

}  // namespace cellm::vulkan

// The ABI's opaque plan handle.
struct cellm_plan {
    std::unique_ptr<cellm::vulkan::Plan> plan;
};
