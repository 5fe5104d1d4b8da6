#include "tensors.hpp"

#include "plugin_host.hpp"

#include <algorithm>
#include <limits>

namespace cellm::transformer {
namespace {

std::string shape_string(const int64_t* ne, size_t n) {
    std::string s = "[";
    for (size_t i = 0; i < n; ++i) s += (i > 0 ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

void check_shape(const std::string& name, const cellm_tensor_info& t, const Tensors::Shape& shape) {
    bool match = t.n_dims <= CELLM_MAX_DIMS;
    for (size_t d = 0; match && d < CELLM_MAX_DIMS; ++d) match = t.ne[d] == (d < shape.size() ? shape[d] : 1);
    if (!match) {
        const size_t dims = std::min<size_t>(t.n_dims, CELLM_MAX_DIMS);
        throw plugin::Failure(CELLM_ERR_CORRUPT, "tensor '" + name + "' has shape " + shape_string(t.ne, dims) +
                                                     ", expected " + shape_string(shape.data(), shape.size()));
    }
}

}  // namespace

Tensors::Tensors(const cellm_model_view& view) : view_(view) {
    if (view.n_tensors > 0 && (view.tensors == nullptr || view.tensor_stride < sizeof(cellm_tensor_info))) {
        throw plugin::Failure(CELLM_ERR_INVALID_ARGUMENT, "model view has no valid tensor array");
    }
    if (view.n_tensors > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, "too many tensors: " + std::to_string(view.n_tensors));
    }
    for (uint64_t i = 0; i < view.n_tensors; ++i) {
        const cellm_string_ref& name = cellm_model_tensor(&view, i)->name;
        by_name_.emplace(std::string(name.data, name.len), static_cast<int32_t>(i));
    }
}

int32_t Tensors::optional(const std::string& name, const Shape& shape, bool f32_only) const {
    const auto it = by_name_.find(name);
    if (it == by_name_.end()) return kAbsent;
    const cellm_tensor_info* t = cellm_model_tensor(&view_, static_cast<uint64_t>(it->second));
    check_shape(name, *t, shape);
    if (f32_only && t->type != CELLM_TYPE_F32) {
        throw plugin::Failure(CELLM_ERR_UNSUPPORTED, "tensor '" + name + "' has type " +
                                                         std::to_string(static_cast<int>(t->type)) +
                                                         ", expected F32 (0)");
    }
    return it->second;
}

int32_t Tensors::required(const std::string& name, const Shape& shape, bool f32_only) const {
    const int32_t index = optional(name, shape, f32_only);
    if (index == kAbsent) throw plugin::Failure(CELLM_ERR_NOT_FOUND, "missing tensor '" + name + "'");
    return index;
}

int64_t Tensors::rows(const std::string& name) const {
    const auto it = by_name_.find(name);
    return it == by_name_.end() ? 0 : cellm_model_tensor(&view_, static_cast<uint64_t>(it->second))->ne[1];
}

}  // namespace cellm::transformer
