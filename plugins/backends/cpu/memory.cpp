#include "memory.hpp"

#include <new>

namespace cellm::cpu {

AlignedBytes::AlignedBytes(uint64_t size)
    : data_(static_cast<std::byte*>(::operator new(size > 0 ? size : 1, std::align_val_t{alignment}))) {}

void AlignedBytes::Free::operator()(std::byte* p) const { ::operator delete(p, std::align_val_t{alignment}); }

}  // namespace cellm::cpu
