// Host memory of the CPU backends: 64-byte aligned allocations and buffers (owned or borrowed).
#pragma once

#include <cellm/backend.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace cellm::cpu {

inline constexpr size_t alignment = 64;

// An aligned byte array allocated once.
class AlignedBytes {
public:
    AlignedBytes() = default;
    explicit AlignedBytes(uint64_t size);
    std::byte* data() const { return data_.get(); }

private:
    struct Free {
        void operator()(std::byte* p) const;
    };
    std::unique_ptr<std::byte, Free> data_;
};

}  // namespace cellm::cpu

// The ABI's opaque buffer handle.
struct cellm_buffer {
    std::byte* data = nullptr;
    uint64_t size = 0;
    bool writable = true;            // false for wrapped host memory
    cellm::cpu::AlignedBytes owned;  // empty when wrapping
};
