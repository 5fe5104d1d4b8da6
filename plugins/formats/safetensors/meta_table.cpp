#include "meta_table.h"

namespace cellm::safetensors_plugin {

cellm_string_ref MetaTable::keep(std::string s) {
    const std::string& kept = strings_.emplace_back(std::move(s));
    return {kept.data(), kept.size()};
}

void MetaTable::add(std::string key, cellm_meta_value value) { entries_.push_back({keep(std::move(key)), value}); }

void MetaTable::add_string(std::string key, std::string value) {
    cellm_meta_value v{};
    v.type = CELLM_VALUE_STRING;
    v.v.str = keep(std::move(value));
    add(std::move(key), v);
}

void MetaTable::add_u32(std::string key, uint32_t value) {
    cellm_meta_value v{};
    v.type = CELLM_VALUE_U32;
    v.v.u64 = value;
    add(std::move(key), v);
}

void MetaTable::add_f32(std::string key, float value) {
    cellm_meta_value v{};
    v.type = CELLM_VALUE_F32;
    v.v.f64 = value;
    add(std::move(key), v);
}

void MetaTable::add_bool(std::string key, bool value) {
    cellm_meta_value v{};
    v.type = CELLM_VALUE_BOOL;
    v.v.u64 = value ? 1 : 0;
    add(std::move(key), v);
}

void MetaTable::add_strings(std::string key, std::vector<std::string> values) {
    std::vector<cellm_string_ref>& refs = string_arrays_.emplace_back();
    refs.reserve(values.size());
    for (std::string& s : values) refs.push_back(keep(std::move(s)));
    cellm_meta_value v{};
    v.type = CELLM_VALUE_ARRAY;
    v.v.arr = {CELLM_VALUE_STRING, refs.size(), refs.data()};
    add(std::move(key), v);
}

void MetaTable::add_i32s(std::string key, std::vector<int32_t> values) {
    const std::vector<int32_t>& kept = int_arrays_.emplace_back(std::move(values));
    cellm_meta_value v{};
    v.type = CELLM_VALUE_ARRAY;
    v.v.arr = {CELLM_VALUE_I32, kept.size(), kept.data()};
    add(std::move(key), v);
}

void MetaTable::add_f64(std::string key, double value) {
    cellm_meta_value v{};
    v.type = CELLM_VALUE_F64;
    v.v.f64 = value;
    add(std::move(key), v);
}

void MetaTable::add_f32s(std::string key, std::vector<float> values) {
    const std::vector<float>& kept = float_arrays_.emplace_back(std::move(values));
    cellm_meta_value v{};
    v.type = CELLM_VALUE_ARRAY;
    v.v.arr = {CELLM_VALUE_F32, kept.size(), kept.data()};
    add(std::move(key), v);
}

bool MetaTable::contains(std::string_view key) const {
    for (const cellm_meta_kv& kv : entries_) {
        if (std::string_view(kv.key.data, kv.key.len) == key) return true;
    }
    return false;
}

}  // namespace cellm::safetensors_plugin
