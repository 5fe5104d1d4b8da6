#include "cellm_file.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <unordered_set>

namespace cellm::cellm_plugin {
namespace {

using gguf_plugin::Cursor;
using gguf_plugin::to_string;

// Smallest metadata entry: key length, type, one byte of value. Smallest tensor entry: name length, type,
// n_dims, one dimension, offset, size.
constexpr uint64_t min_meta_entry = 8 + 4 + 1;
constexpr uint64_t min_tensor_entry = 8 + 4 + 4 + 8 + 8 + 8;

// Elements per block of a stored type number, 0 when unknown (checked before the cast to the enum).
int64_t block_size_of(uint32_t type) {
    return type < CELLM_TYPE_COUNT_CELLM ? cellm_dtype_block_size(static_cast<cellm_dtype>(type)) : 0;
}

// A section [offset, offset + size) must start at or after `lower` and end inside the file.
void check_section(const Cursor& cursor, const char* name, uint64_t offset, uint64_t size, uint64_t lower,
                   uint64_t file_size) {
    if (offset < lower) {
        cursor.fail(std::string(name) + " offset " + std::to_string(offset) + " overlaps what precedes it (must be >= " +
                    std::to_string(lower) + ")");
    }
    if (offset > file_size || size > file_size - offset) {
        cursor.fail(std::string(name) + " (offset " + std::to_string(offset) + ", " + std::to_string(size) +
                    " bytes) runs past the end of the file (" + std::to_string(file_size) + " bytes)");
    }
}

// Moves a fresh cursor over the whole file to `offset`, which check_section has already bounded.
Cursor cursor_at(const gguf_plugin::MappedFile& mapping, const std::string& path, uint64_t offset) {
    Cursor cursor(mapping.data(), mapping.size(), path);
    cursor.take(offset, "section start");
    return cursor;
}

void check_section_end(const Cursor& cursor, const char* name, uint64_t start, uint64_t size) {
    if (cursor.offset() != start + size) {
        cursor.fail(std::string(name) + " entries take " + std::to_string(cursor.offset() - start) +
                    " bytes but the header gives the section " + std::to_string(size));
    }
}

}  // namespace

CellmFile::CellmFile(const std::string& path) : mapping_(path) {
    Cursor cursor(mapping_.data(), mapping_.size(), path);
    const Header h = read_header(cursor);

    Cursor meta = cursor_at(mapping_, path, h.meta_offset);
    metadata_.read(meta, h.n_meta);
    check_section_end(meta, "metadata", h.meta_offset, h.meta_size);

    Cursor table = cursor_at(mapping_, path, h.table_offset);
    read_tensor_table(table, h);
    check_section_end(table, "tensor table", h.table_offset, h.table_size);

    view_.struct_size = sizeof(view_);
    view_.n_meta = metadata_.entries().size();
    view_.meta = metadata_.entries().data();
    view_.n_tensors = tensors_.size();
    view_.tensors = tensors_.data();
    view_.tensor_stride = sizeof(cellm_tensor_info);
    view_.mapping = mapping_.data();
    view_.mapping_size = mapping_.size();
}

Header CellmFile::read_header(Cursor& cursor) const {
    cursor.set_context("the header");
    if (std::memcmp(cursor.take(sizeof(magic), "magic"), magic, sizeof(magic)) != 0) {
        cursor.fail("not a .cellm file (the magic is not \"CELLM\\r\\n\\x1a\")");
    }
    Header h{};
    h.version_major = cursor.read<uint32_t>("major version");
    h.version_minor = cursor.read<uint32_t>("minor version");
    if (h.version_major != version_major) {
        cursor.fail("unsupported .cellm version " + std::to_string(h.version_major) + "." +
                        std::to_string(h.version_minor) + " (this reader implements " + std::to_string(version_major) +
                        ".x)",
                    CELLM_ERR_VERSION);
    }
    h.header_size = cursor.read<uint32_t>("header size");
    h.alignment = cursor.read<uint32_t>("alignment");
    h.n_meta = cursor.read<uint64_t>("metadata count");
    h.meta_offset = cursor.read<uint64_t>("metadata offset");
    h.meta_size = cursor.read<uint64_t>("metadata size");
    h.n_tensors = cursor.read<uint64_t>("tensor count");
    h.table_offset = cursor.read<uint64_t>("tensor table offset");
    h.table_size = cursor.read<uint64_t>("tensor table size");
    h.data_offset = cursor.read<uint64_t>("data offset");
    h.data_size = cursor.read<uint64_t>("data size");
    h.file_size = cursor.read<uint64_t>("file size");
    cursor.set_context({});

    const uint64_t file_size = mapping_.size();
    if (file_size > file_limits::max_model_bytes) {
        cursor.fail(file_limits::exceeds("file size", file_size, file_limits::max_model_bytes, " bytes"),
                    CELLM_ERR_UNSUPPORTED);
    }
    if (h.file_size != file_size) {
        cursor.fail("the header says the file is " + std::to_string(h.file_size) + " bytes but it is " +
                    std::to_string(file_size) + (file_size < h.file_size ? " (truncated)" : ""));
    }
    if (h.header_size < header_size_v1) {
        cursor.fail("header size " + std::to_string(h.header_size) + " is smaller than the " +
                    std::to_string(header_size_v1) + " bytes of version 1");
    }
    if (h.alignment < 8 || h.alignment > 65536 || (h.alignment & (h.alignment - 1)) != 0) {
        cursor.fail("alignment " + std::to_string(h.alignment) + " is not a power of two from 8 to 65536");
    }
    check_section(cursor, "metadata", h.meta_offset, h.meta_size, h.header_size, file_size);
    check_section(cursor, "tensor table", h.table_offset, h.table_size, h.meta_offset + h.meta_size, file_size);
    check_section(cursor, "data section", h.data_offset, h.data_size, h.table_offset + h.table_size, file_size);
    if (h.data_offset % h.alignment != 0) {
        cursor.fail("data offset " + std::to_string(h.data_offset) + " is not a multiple of the alignment " +
                    std::to_string(h.alignment));
    }
    if (h.n_meta > file_limits::max_metadata_entries) {
        cursor.fail(file_limits::exceeds("metadata count", h.n_meta, file_limits::max_metadata_entries));
    }
    if (h.n_tensors > file_limits::max_tensors) {
        cursor.fail(file_limits::exceeds("tensor count", h.n_tensors, file_limits::max_tensors));
    }
    if (h.n_meta > h.meta_size / min_meta_entry) {
        cursor.fail("metadata count " + std::to_string(h.n_meta) + " cannot fit in the " +
                    std::to_string(h.meta_size) + "-byte metadata section");
    }
    if (h.n_tensors > h.table_size / min_tensor_entry) {
        cursor.fail("tensor count " + std::to_string(h.n_tensors) + " cannot fit in the " +
                    std::to_string(h.table_size) + "-byte tensor table");
    }
    return h;
}

void CellmFile::read_tensor_table(Cursor& cursor, const Header& h) {
    std::vector<uint64_t> offsets;
    tensors_.reserve(h.n_tensors);
    offsets.reserve(h.n_tensors);
    std::unordered_set<std::string_view> names;
    for (uint64_t i = 0; i < h.n_tensors; ++i) {
        cursor.set_context("tensor entry " + std::to_string(i));
        cellm_tensor_info t{};
        t.struct_size = sizeof(t);
        t.name = cursor.read_string("name");
        const std::string where = "tensor '" + to_string(t.name) + "'";
        cursor.set_context(where);
        if (!names.emplace(t.name.data, t.name.len).second) cursor.fail("duplicate " + where);

        const auto type = cursor.read<uint32_t>("type");
        const int64_t block = block_size_of(type);
        if (block == 0) cursor.fail(where + " has unknown type " + std::to_string(type), CELLM_ERR_UNSUPPORTED);
        t.type = static_cast<cellm_dtype>(type);

        t.n_dims = cursor.read<uint32_t>("dimension count");
        if (t.n_dims == 0 || t.n_dims > CELLM_MAX_DIMS) {
            cursor.fail(where + " has " + std::to_string(t.n_dims) + " dimensions (must be 1.." +
                        std::to_string(CELLM_MAX_DIMS) + ")");
        }
        int64_t n_elements = 1;
        for (uint32_t d = 0; d < CELLM_MAX_DIMS; ++d) {
            t.ne[d] = d < t.n_dims ? cursor.read<int64_t>("dimension") : 1;
            if (t.ne[d] <= 0) {
                cursor.fail(where + " dimension " + std::to_string(d) + " is " + std::to_string(t.ne[d]) +
                            " (must be positive)");
            }
            if (t.ne[d] > std::numeric_limits<int64_t>::max() / n_elements) {
                cursor.fail(where + " has more elements than fit in 64 bits");
            }
            n_elements *= t.ne[d];
        }
        if (t.ne[0] % block != 0) {
            cursor.fail(where + " row length " + std::to_string(t.ne[0]) +
                        " is not a multiple of its type's block size " + std::to_string(block));
        }
        const auto n_blocks = static_cast<uint64_t>(n_elements / block);
        const auto block_bytes = static_cast<uint64_t>(cellm_dtype_type_size(t.type));
        if (n_blocks > std::numeric_limits<uint64_t>::max() / block_bytes) {
            cursor.fail(where + " size in bytes does not fit in 64 bits");
        }

        const auto offset = cursor.read<uint64_t>("data offset");
        t.size = cursor.read<uint64_t>("data size");
        if (t.size != n_blocks * block_bytes) {
            cursor.fail(where + " is stored as " + std::to_string(t.size) + " bytes but its type and shape need " +
                        std::to_string(n_blocks * block_bytes));
        }
        if (offset % h.alignment != 0) {
            cursor.fail(where + " data offset " + std::to_string(offset) + " is not a multiple of the alignment " +
                        std::to_string(h.alignment));
        }
        if (offset > h.data_size || t.size > h.data_size - offset) {
            cursor.fail(where + " data (offset " + std::to_string(offset) + ", " + std::to_string(t.size) +
                        " bytes) runs past the end of the " + std::to_string(h.data_size) + "-byte data section");
        }
        t.data = mapping_.data() + h.data_offset + offset;
        tensors_.push_back(t);
        offsets.push_back(offset);
    }
    cursor.set_context({});

    // Sorted by offset, each tensor must end before the next begins.
    std::vector<size_t> order(tensors_.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return offsets[a] < offsets[b]; });
    for (size_t k = 1; k < order.size(); ++k) {
        const size_t prev = order[k - 1], next = order[k];
        if (offsets[prev] + tensors_[prev].size > offsets[next]) {
            cursor.fail("tensor '" + to_string(tensors_[prev].name) + "' and tensor '" +
                        to_string(tensors_[next].name) + "' overlap in the data section");
        }
    }
}

}  // namespace cellm::cellm_plugin
