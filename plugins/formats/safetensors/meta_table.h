// GGUF-vocabulary metadata built from JSON: the entries the view exposes, with storage for every string and
// array they point to.
#pragma once

#include <cellm/tensor.h>

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace cellm::safetensors_plugin {

class MetaTable {
public:
    MetaTable() = default;
    MetaTable(const MetaTable&) = delete;  // entries point into the storage below
    MetaTable& operator=(const MetaTable&) = delete;

    void add_string(std::string key, std::string value);
    void add_u32(std::string key, uint32_t value);
    void add_f32(std::string key, float value);
    void add_bool(std::string key, bool value);
    void add_strings(std::string key, std::vector<std::string> values);
    void add_i32s(std::string key, std::vector<int32_t> values);
    void add_f64(std::string key, double value);
    void add_f32s(std::string key, std::vector<float> values);

    bool contains(std::string_view key) const;
    const std::vector<cellm_meta_kv>& entries() const { return entries_; }

private:
    cellm_string_ref keep(std::string s);
    void add(std::string key, cellm_meta_value value);

    std::vector<cellm_meta_kv> entries_;
    // Deques never move their elements, so the refs handed out stay valid as entries are added.
    std::deque<std::string> strings_;
    std::deque<std::vector<cellm_string_ref>> string_arrays_;
    std::deque<std::vector<int32_t>> int_arrays_;
    std::deque<std::vector<float>> float_arrays_;
};

}  // namespace cellm::safetensors_plugin
