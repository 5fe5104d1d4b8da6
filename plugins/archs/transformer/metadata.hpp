// Typed access to a model view's metadata. Every getter checks the stored type and names the key when it
// fails, so a bad file yields one clear line instead of a misread number.
#pragma once

#include <cellm/tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cellm::transformer {

class Metadata {
public:
    // Throws plugin::Failure (CELLM_ERR_INVALID_ARGUMENT) when the view has entries but no array.
    explicit Metadata(const cellm_model_view& view);

    // NULL when the key is absent.
    const cellm_meta_value* find(std::string_view key) const;

    // Absent keys give nullopt; a present key of the wrong type or range throws plugin::Failure
    // (CELLM_ERR_CORRUPT) naming the key, the expected and the stored type.
    std::optional<uint32_t> find_u32(std::string_view key) const;  // any integer type, value in u32 range
    std::optional<float> find_f32(std::string_view key) const;     // F32 or F64
    std::optional<std::string> find_string(std::string_view key) const;

    // Required keys: an absent key throws plugin::Failure (CELLM_ERR_NOT_FOUND) naming it.
    uint32_t u32(std::string_view key) const;
    float f32(std::string_view key) const;
    std::string string(std::string_view key) const;

    // Model dimensions: positive and at most 2^24, so that the products of two that matter (heads x head size)
    // are checked against the same bound before they are formed in int32. Out of range throws
    // plugin::Failure (CELLM_ERR_CORRUPT) naming the key.
    int32_t dimension(std::string_view key) const;                     // required
    int32_t dimension_or(std::string_view key, int32_t fallback) const;  // `fallback` when absent
    static int32_t checked_dimension(std::string_view key, uint32_t value);

private:
    const cellm_model_view& view_;
};

}  // namespace cellm::transformer
