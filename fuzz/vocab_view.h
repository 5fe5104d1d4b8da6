// A tokenizer's GGUF metadata (tokenizer.ggml.*) held in memory as a cellm_model_view, for the tokenizer
// fuzz targets: the synthetic models' vocabulary (tools/make_model) without writing or parsing a file.
#pragma once

#include <cellm/tensor.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace cellm::fuzz {

class VocabView {
public:
    void string(const std::string& key, const std::string& value) {
        cellm_meta_value v{};
        v.type = CELLM_VALUE_STRING;
        v.v.str = ref(value);
        add(key, v);
    }
    void u32(const std::string& key, uint32_t value) {
        cellm_meta_value v{};
        v.type = CELLM_VALUE_U32;
        v.v.u64 = value;
        add(key, v);
    }
    void boolean(const std::string& key, bool value) {
        cellm_meta_value v{};
        v.type = CELLM_VALUE_BOOL;
        v.v.u64 = value ? 1 : 0;
        add(key, v);
    }
    void strings(const std::string& key, const std::vector<std::string>& values) {
        auto& refs = string_arrays_.emplace_back();
        for (const auto& s : values) refs.push_back(ref(s));
        add(key, array(CELLM_VALUE_STRING, refs.size(), refs.data()));
    }
    void i32s(const std::string& key, const std::vector<int32_t>& values) {
        const auto& stored = i32_arrays_.emplace_back(values);
        add(key, array(CELLM_VALUE_I32, stored.size(), stored.data()));
    }
    void f32s(const std::string& key, const std::vector<float>& values) {
        const auto& stored = f32_arrays_.emplace_back(values);
        add(key, array(CELLM_VALUE_F32, stored.size(), stored.data()));
    }

    // Valid while this object lives and is not changed.
    const cellm_model_view& view() {
        view_ = {};
        view_.struct_size = sizeof(view_);
        view_.n_meta = meta_.size();
        view_.meta = meta_.data();
        view_.tensor_stride = sizeof(cellm_tensor_info);
        return view_;
    }

private:
    cellm_string_ref ref(const std::string& s) {
        const std::string& stored = strings_.emplace_back(s);
        return {stored.data(), stored.size()};
    }
    static cellm_meta_value array(cellm_value_type elem, uint64_t count, const void* data) {
        cellm_meta_value v{};
        v.type = CELLM_VALUE_ARRAY;
        v.v.arr.elem_type = elem;
        v.v.arr.count = count;
        v.v.arr.data = data;
        return v;
    }
    void add(const std::string& key, const cellm_meta_value& value) { meta_.push_back({ref(key), value}); }

    std::deque<std::string> strings_;
    std::deque<std::vector<cellm_string_ref>> string_arrays_;
    std::deque<std::vector<int32_t>> i32_arrays_;
    std::deque<std::vector<float>> f32_arrays_;
    std::vector<cellm_meta_kv> meta_;
    cellm_model_view view_{};
};

}  // namespace cellm::fuzz
