// A model view's tensors by name, with the presence, shape and type checks an arch runs at load. Every
// failure names the tensor, and for shapes the expected and the found one.
#pragma once

#include <cellm/tensor.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace cellm::transformer {

// Tensor index of an optional tensor the file does not have.
constexpr int32_t kAbsent = -1;

class Tensors {
public:
    using Shape = std::vector<int64_t>;  // ne[0] first; missing trailing dims are 1

    // Throws plugin::Failure when the view has no usable tensor array (CELLM_ERR_INVALID_ARGUMENT) or more
    // tensors than int32 indexes (CELLM_ERR_CORRUPT).
    explicit Tensors(const cellm_model_view& view);

    // kAbsent when the file has no tensor of that name. A present tensor of another shape throws
    // plugin::Failure (CELLM_ERR_CORRUPT); one that is not F32 when `f32_only` throws CELLM_ERR_UNSUPPORTED.
    int32_t optional(const std::string& name, const Shape& shape, bool f32_only = false) const;
    // As optional(), and an absent tensor throws plugin::Failure (CELLM_ERR_NOT_FOUND).
    int32_t required(const std::string& name, const Shape& shape, bool f32_only = false) const;

    // Rows of a 2-D tensor (ne[1]), or 0 when absent.
    int64_t rows(const std::string& name) const;

private:
    const cellm_model_view& view_;
    std::unordered_map<std::string, int32_t> by_name_;
};

}  // namespace cellm::transformer
