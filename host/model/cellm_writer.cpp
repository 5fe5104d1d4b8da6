#include "model/cellm_writer.h"

#include "error.h"
#include "model/model_file.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>

namespace fs = std::filesystem;

namespace cellm {
namespace {

static_assert(std::endian::native == std::endian::little, "the .cellm writer assumes a little-endian host");

constexpr char magic[8] = {'C', 'E', 'L', 'L', 'M', '\r', '\n', '\x1a'};
constexpr uint32_t version_major = 1, version_minor = 0, header_size = 96;

template <class T>
void put(std::vector<uint8_t>& out, T value) {
    const size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &value, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, cellm_string_ref s) {
    put(out, s.len);
    out.insert(out.end(), s.data, s.data + s.len);
}

// Bytes of one numeric value as GGUF encodes it; 0 for strings, arrays and unknown types.
uint64_t numeric_size(cellm_value_type type) {
    switch (type) {
    case CELLM_VALUE_U8: case CELLM_VALUE_I8: case CELLM_VALUE_BOOL: return 1;
    case CELLM_VALUE_U16: case CELLM_VALUE_I16: return 2;
    case CELLM_VALUE_U32: case CELLM_VALUE_I32: case CELLM_VALUE_F32: return 4;
    case CELLM_VALUE_U64: case CELLM_VALUE_I64: case CELLM_VALUE_F64: return 8;
    default: return 0;
    }
}

uint64_t align_up(uint64_t offset, uint64_t alignment) { return (offset + alignment - 1) / alignment * alignment; }

}  // namespace

CellmWriter::CellmWriter(uint32_t alignment) : alignment_(alignment) {
    if (alignment < 8 || alignment > 65536 || (alignment & (alignment - 1)) != 0) {
        throw Error("alignment " + std::to_string(alignment) + " is not a power of two from 8 to 65536");
    }
}

CellmWriter CellmWriter::from_view(const cellm_model_view& view, std::vector<std::string>& skipped) {
    CellmWriter writer;
    for (uint64_t i = 0; i < view.n_meta; ++i) {
        if (!writer.add_meta(view.meta[i])) skipped.emplace_back(to_string_view(view.meta[i].key));
    }
    for (uint64_t i = 0; i < view.n_tensors; ++i) writer.add_tensor(*cellm_model_tensor(&view, i));
    return writer;
}

bool CellmWriter::add_meta(const cellm_meta_kv& kv) {
    const cellm_meta_value& v = kv.value;
    std::vector<uint8_t> out;
    put_string(out, kv.key);
    put(out, static_cast<uint32_t>(v.type));
    switch (v.type) {
    case CELLM_VALUE_F32: put(out, static_cast<float>(v.v.f64)); break;
    case CELLM_VALUE_F64: put(out, v.v.f64); break;
    case CELLM_VALUE_STRING: put_string(out, v.v.str); break;
    case CELLM_VALUE_ARRAY: {
        if (v.v.arr.elem_type == CELLM_VALUE_ARRAY) return false;  // views expose only a nested array's length
        put(out, static_cast<uint32_t>(v.v.arr.elem_type));
        put(out, v.v.arr.count);
        if (v.v.arr.elem_type == CELLM_VALUE_STRING) {
            const auto* strings = static_cast<const cellm_string_ref*>(v.v.arr.data);
            for (uint64_t i = 0; i < v.v.arr.count; ++i) put_string(out, strings[i]);
        } else {
            const uint64_t bytes = v.v.arr.count * numeric_size(v.v.arr.elem_type);
            if (numeric_size(v.v.arr.elem_type) == 0) {
                throw Error("metadata key '" + std::string(to_string_view(kv.key)) + "' is an array of unknown type " +
                            std::to_string(v.v.arr.elem_type));
            }
            const auto* data = static_cast<const uint8_t*>(v.v.arr.data);
            out.insert(out.end(), data, data + bytes);
        }
        break;
    }
    default: {
        // Integers and bools: the low bytes of the widened value are the value (little endian).
        const uint64_t size = numeric_size(v.type);
        if (size == 0) {
            throw Error("metadata key '" + std::string(to_string_view(kv.key)) + "' has unknown value type " +
                        std::to_string(v.type));
        }
        const uint64_t bits = v.v.u64;
        const size_t at = out.size();
        out.resize(at + size);
        std::memcpy(out.data() + at, &bits, size);
    }
    }
    meta_entries_.push_back(meta_.size());
    meta_.insert(meta_.end(), out.begin(), out.end());
    ++n_meta_;
    return true;
}

void CellmWriter::add_tensor(const cellm_tensor_info& tensor) {
    const int64_t block = cellm_dtype_block_size(tensor.type);
    uint64_t elements = 1;
    for (uint32_t d = 0; d < tensor.n_dims; ++d) elements *= static_cast<uint64_t>(tensor.ne[d]);
    const std::string name(to_string_view(tensor.name));
    if (block == 0 || tensor.n_dims < 1 || tensor.n_dims > CELLM_MAX_DIMS || tensor.ne[0] % block != 0 ||
        tensor.size != elements / static_cast<uint64_t>(block) * static_cast<uint64_t>(cellm_dtype_type_size(tensor.type))) {
        throw Error("tensor '" + name + "': its type, shape and size do not agree");
    }
    data_offsets_.push_back(data_size_);
    data_size_ = align_up(data_size_ + tensor.size, alignment_);
    tensors_.push_back(tensor);
}

std::vector<uint8_t> CellmWriter::head(CellmLayout& layout) const {
    std::vector<uint8_t> table;
    for (size_t i = 0; i < tensors_.size(); ++i) {
        const cellm_tensor_info& t = tensors_[i];
        layout.tensor_entries.push_back(table.size());
        put_string(table, t.name);
        put(table, static_cast<uint32_t>(t.type));
        put(table, t.n_dims);
        for (uint32_t d = 0; d < t.n_dims; ++d) put(table, t.ne[d]);
        put(table, data_offsets_[i]);
        put(table, t.size);
    }
    layout.meta_offset = header_size;
    layout.table_offset = layout.meta_offset + meta_.size();
    layout.data_offset = align_up(layout.table_offset + table.size(), alignment_);
    layout.file_size = layout.data_offset + data_size_;
    for (uint64_t at : meta_entries_) layout.meta_entries.push_back(layout.meta_offset + at);
    for (uint64_t& at : layout.tensor_entries) at += layout.table_offset;

    std::vector<uint8_t> out(magic, magic + sizeof(magic));
    put(out, version_major);
    put(out, version_minor);
    put(out, header_size);
    put(out, alignment_);
    put(out, n_meta_);
    put(out, layout.meta_offset);
    put(out, static_cast<uint64_t>(meta_.size()));
    put(out, static_cast<uint64_t>(tensors_.size()));
    put(out, layout.table_offset);
    put(out, static_cast<uint64_t>(table.size()));
    put(out, layout.data_offset);
    put(out, data_size_);
    put(out, layout.file_size);
    out.insert(out.end(), meta_.begin(), meta_.end());
    out.insert(out.end(), table.begin(), table.end());
    out.resize(layout.data_offset, 0);
    return out;
}

CellmLayout CellmWriter::layout() const {
    CellmLayout layout;
    head(layout);
    return layout;
}

CellmLayout CellmWriter::write(const fs::path& path, const Progress& progress) const {
    CellmLayout layout;
    const std::vector<uint8_t> start = head(layout);
    const fs::path partial = path.string() + ".partial";
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    auto check = [&] {
        if (!out) throw Error("cannot write '" + partial.string() + "': " + std::strerror(errno));
    };
    std::error_code ec;
    try {
        check();
        out.write(reinterpret_cast<const char*>(start.data()), static_cast<std::streamsize>(start.size()));
        const std::vector<char> padding(alignment_, 0);
        for (size_t i = 0; i < tensors_.size(); ++i) {
            const cellm_tensor_info& t = tensors_[i];
            out.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(t.size));
            out.write(padding.data(), static_cast<std::streamsize>(align_up(t.size, alignment_) - t.size));
            check();
            if (progress) progress(i, tensors_.size(), t);
        }
        out.close();
        check();
        fs::rename(partial, path, ec);
        if (ec) throw Error("cannot move '" + partial.string() + "' to '" + path.string() + "': " + ec.message());
    } catch (...) {
        fs::remove(partial, ec);
        throw;
    }
    return layout;
}

}  // namespace cellm
