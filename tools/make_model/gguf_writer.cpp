#include "gguf_writer.h"

#include <fstream>
#include <stdexcept>

namespace cellm::gguf {
namespace {

uint64_t padding(uint64_t offset, uint64_t alignment) { return (alignment - offset % alignment) % alignment; }

}  // namespace

void Writer::put_string(std::vector<uint8_t>& out, std::string_view s) {
    put(out, static_cast<uint64_t>(s.size()));
    out.insert(out.end(), s.begin(), s.end());
}

void Writer::add(std::string key, std::string_view value) {
    std::vector<uint8_t> bytes;
    put_string(bytes, value);
    add_raw(std::move(key), CELLM_VALUE_STRING, std::move(bytes));
}

void Writer::add_array(std::string key, const std::vector<std::string>& values) {
    std::vector<uint8_t> bytes;
    put(bytes, static_cast<uint32_t>(CELLM_VALUE_STRING));
    put(bytes, static_cast<uint64_t>(values.size()));
    for (const std::string& v : values) put_string(bytes, v);
    add_raw(std::move(key), CELLM_VALUE_ARRAY, std::move(bytes));
}

void Writer::add_raw(std::string key, uint32_t type, std::vector<uint8_t> value) {
    kvs_.push_back({std::move(key), type, std::move(value)});
}

void Writer::set_alignment(uint32_t alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
        throw std::invalid_argument("GGUF alignment " + std::to_string(alignment) + " is not a power of two");
    }
    alignment_ = alignment;
    add("general.alignment", alignment);
}

void Writer::add_tensor(std::string name, cellm_dtype type, std::vector<int64_t> ne, std::vector<uint8_t> data) {
    tensors_.push_back({std::move(name), static_cast<uint32_t>(type), std::move(ne), std::move(data)});
}

std::vector<uint8_t> Writer::header(Layout& layout) const {
    std::vector<uint8_t> out{'G', 'G', 'U', 'F'};
    put(out, version_);
    put(out, static_cast<uint64_t>(tensors_.size()));
    put(out, static_cast<uint64_t>(kvs_.size()));
    for (const Kv& kv : kvs_) {
        KvLayout at{out.size(), 0, 0};
        put_string(out, kv.key);
        at.type = out.size();
        put(out, kv.type);
        at.value = out.size();
        out.insert(out.end(), kv.value.begin(), kv.value.end());
        layout.kvs.push_back(at);
    }
    uint64_t data_offset = 0;
    for (const Tensor& t : tensors_) {
        TensorLayout at{};
        at.name = out.size();
        put_string(out, t.name);
        at.n_dims = out.size();
        put(out, static_cast<uint32_t>(t.ne.size()));
        at.ne = out.size();
        for (int64_t n : t.ne) put(out, n);
        at.type = out.size();
        put(out, t.type);
        at.offset = out.size();
        put(out, data_offset);
        at.data = data_offset;  // made absolute below, once data_start is known
        layout.tensors.push_back(at);
        data_offset += t.data.size() + padding(t.data.size(), alignment_);
    }
    out.resize(out.size() + padding(out.size(), alignment_), 0);
    layout.data_start = out.size();
    layout.size = layout.data_start + data_offset;
    for (TensorLayout& at : layout.tensors) at.data += layout.data_start;
    return out;
}

Layout Writer::layout() const {
    Layout layout;
    header(layout);
    return layout;
}

std::vector<uint8_t> Writer::to_bytes() const {
    Layout layout;
    std::vector<uint8_t> out = header(layout);
    out.reserve(layout.size);
    for (const Tensor& t : tensors_) {
        out.insert(out.end(), t.data.begin(), t.data.end());
        out.resize(out.size() + padding(t.data.size(), alignment_), 0);
    }
    return out;
}

void Writer::write(const std::string& path) const {
    Layout layout;
    const std::vector<uint8_t> head = header(layout);
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    const std::vector<char> zeros(alignment_, 0);
    file.write(reinterpret_cast<const char*>(head.data()), static_cast<std::streamsize>(head.size()));
    for (const Tensor& t : tensors_) {
        file.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size()));
        file.write(zeros.data(), static_cast<std::streamsize>(padding(t.data.size(), alignment_)));
    }
    file.close();
    if (!file) throw std::runtime_error(path + ": cannot write the GGUF file");
}

}  // namespace cellm::gguf
