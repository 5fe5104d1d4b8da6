#include "metadata.hpp"

#include "plugin_host.hpp"

#include <array>
#include <limits>

namespace cellm::transformer {
namespace {

std::string type_name(cellm_value_type type) {
    static constexpr std::array<const char*, 13> names = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                                          "bool", "string", "array", "u64", "i64", "f64"};
    const auto i = static_cast<size_t>(type);
    return i < names.size() ? names[i] : "type " + std::to_string(i);
}

[[noreturn]] void wrong_type(std::string_view key, const char* expected, cellm_value_type found) {
    throw plugin::Failure(CELLM_ERR_CORRUPT, "metadata key '" + std::string(key) + "' has type " +
                                                 type_name(found) + ", expected " + expected);
}

template <class T>
T required(std::optional<T> value, std::string_view key) {
    if (!value) throw plugin::Failure(CELLM_ERR_NOT_FOUND, "missing metadata key '" + std::string(key) + "'");
    return *value;
}

}  // namespace

Metadata::Metadata(const cellm_model_view& view) : view_(view) {
    if (view.n_meta > 0 && view.meta == nullptr) {
        throw plugin::Failure(CELLM_ERR_INVALID_ARGUMENT, "model view has no metadata array");
    }
}

const cellm_meta_value* Metadata::find(std::string_view key) const {
    for (uint64_t i = 0; i < view_.n_meta; ++i) {
        const cellm_string_ref& k = view_.meta[i].key;
        if (k.len == key.size() && (key.empty() || std::string_view(k.data, k.len) == key)) {
            return &view_.meta[i].value;
        }
    }
    return nullptr;
}

std::optional<uint32_t> Metadata::find_u32(std::string_view key) const {
    const cellm_meta_value* v = find(key);
    if (v == nullptr) return std::nullopt;
    constexpr uint64_t max = std::numeric_limits<uint32_t>::max();
    switch (v->type) {
    case CELLM_VALUE_U8: case CELLM_VALUE_U16: case CELLM_VALUE_U32: case CELLM_VALUE_U64:
        if (v->v.u64 <= max) return static_cast<uint32_t>(v->v.u64);
        break;
    case CELLM_VALUE_I8: case CELLM_VALUE_I16: case CELLM_VALUE_I32: case CELLM_VALUE_I64:
        if (v->v.i64 >= 0 && static_cast<uint64_t>(v->v.i64) <= max) return static_cast<uint32_t>(v->v.i64);
        break;
    default: wrong_type(key, "an unsigned integer", v->type);
    }
    throw plugin::Failure(CELLM_ERR_CORRUPT, "metadata key '" + std::string(key) + "' is out of the u32 range");
}

std::optional<float> Metadata::find_f32(std::string_view key) const {
    const cellm_meta_value* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type != CELLM_VALUE_F32 && v->type != CELLM_VALUE_F64) wrong_type(key, "f32", v->type);
    return static_cast<float>(v->v.f64);
}

std::optional<std::string> Metadata::find_string(std::string_view key) const {
    const cellm_meta_value* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type != CELLM_VALUE_STRING) wrong_type(key, "string", v->type);
    if (v->v.str.len == 0) return std::string();
    return std::string(v->v.str.data, v->v.str.len);
}

uint32_t Metadata::u32(std::string_view key) const { return required(find_u32(key), key); }
float Metadata::f32(std::string_view key) const { return required(find_f32(key), key); }
std::string Metadata::string(std::string_view key) const { return required(find_string(key), key); }

int32_t Metadata::checked_dimension(std::string_view key, uint32_t value) {
    if (value == 0 || value > (1u << 24)) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, "metadata key '" + std::string(key) + "' has value " +
                                                     std::to_string(value) + ", expected 1..16777216");
    }
    return static_cast<int32_t>(value);
}

int32_t Metadata::dimension(std::string_view key) const { return checked_dimension(key, u32(key)); }

int32_t Metadata::dimension_or(std::string_view key, int32_t fallback) const {
    return checked_dimension(key, find_u32(key).value_or(static_cast<uint32_t>(fallback)));
}

}  // namespace cellm::transformer
