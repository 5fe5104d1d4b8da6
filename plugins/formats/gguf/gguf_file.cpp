#include "gguf_file.h"

#include <limits>
#include <unordered_set>

namespace cellm::gguf_plugin {
namespace {

constexpr uint32_t default_alignment = 32;

// Smallest tensor info: name length, n_dims, one dimension, type, offset.
constexpr uint64_t min_tensor_info_size = 8 + 4 + 8 + 4 + 8;

void check_version(const Cursor& cursor, uint32_t version) {
    if (version == 2 || version == 3) return;
    if (version == 1) cursor.fail("GGUF version 1 is not supported (only versions 2 and 3)", CELLM_ERR_VERSION);
    const uint32_t swapped = __builtin_bswap32(version);
    if (swapped >= 1 && swapped <= 3) {
        cursor.fail("big-endian GGUF files are not supported", CELLM_ERR_VERSION);
    }
    cursor.fail("unsupported GGUF version " + std::to_string(version) + " (only versions 2 and 3)",
                CELLM_ERR_VERSION);
}

uint64_t align_up(uint64_t offset, uint64_t alignment) {
    return offset + (alignment - offset % alignment) % alignment;
}

}  // namespace

GgufFile::GgufFile(const std::string& path) : mapping_(path) {
    Cursor cursor(mapping_.data(), mapping_.size(), path);
    const uint8_t* magic = cursor.take(4, "magic");
    if (std::string_view(reinterpret_cast<const char*>(magic), 4) != "GGUF") {
        cursor.fail("not a GGUF file (magic is not \"GGUF\")");
    }
    check_version(cursor, cursor.read<uint32_t>("version"));
    if (mapping_.size() > file_limits::max_model_bytes) {
        cursor.fail(file_limits::exceeds("file size", mapping_.size(), file_limits::max_model_bytes, " bytes"),
                    CELLM_ERR_UNSUPPORTED);
    }
    const auto n_tensors = cursor.read<uint64_t>("tensor count");
    const auto n_kv = cursor.read<uint64_t>("metadata count");
    metadata_.read(cursor, n_kv);
    const uint32_t alignment = read_alignment(cursor);
    read_tensor_infos(cursor, n_tensors, alignment);

    view_.struct_size = sizeof(view_);
    view_.n_meta = metadata_.entries().size();
    view_.meta = metadata_.entries().data();
    view_.n_tensors = tensors_.size();
    view_.tensors = tensors_.data();
    view_.tensor_stride = sizeof(cellm_tensor_info);
    view_.mapping = mapping_.data();
    view_.mapping_size = mapping_.size();
}

uint32_t GgufFile::read_alignment(const Cursor& cursor) const {
    const cellm_meta_kv* kv = metadata_.find("general.alignment");
    if (kv == nullptr) return default_alignment;
    if (kv->value.type != CELLM_VALUE_U32) {
        cursor.fail("general.alignment must be a u32, not " + name_of_value_type(kv->value.type));
    }
    const uint64_t alignment = kv->value.v.u64;
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
        cursor.fail("general.alignment " + std::to_string(alignment) + " is not a power of two");
    }
    return static_cast<uint32_t>(alignment);
}

void GgufFile::read_tensor_infos(Cursor& cursor, uint64_t count, uint32_t alignment) {
    if (count > file_limits::max_tensors) cursor.fail(file_limits::exceeds("tensor count", count, file_limits::max_tensors));
    if (count > cursor.remaining() / min_tensor_info_size) {
        cursor.fail("tensor count " + std::to_string(count) + " cannot fit in the " +
                    std::to_string(cursor.remaining()) + " bytes left after the metadata");
    }
    std::vector<uint64_t> offsets;
    tensors_.reserve(count);
    offsets.reserve(count);
    std::unordered_set<std::string_view> names;
    for (uint64_t i = 0; i < count; ++i) {
        cursor.set_context("tensor info " + std::to_string(i));
        cellm_tensor_info t{};
        t.struct_size = sizeof(t);
        t.name = cursor.read_string("name");
        const std::string where = "tensor '" + to_string(t.name) + "'";
        cursor.set_context(where);
        if (!names.emplace(t.name.data, t.name.len).second) cursor.fail("duplicate " + where);

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

        const auto type = cursor.read<uint32_t>("type");
        // Checked before the cast: an enum may not hold values outside its range.
        const int64_t block = type < CELLM_TYPE_COUNT_GGUF ? cellm_dtype_block_size(static_cast<cellm_dtype>(type)) : 0;
        if (block == 0) cursor.fail(where + " has unknown type " + std::to_string(type), CELLM_ERR_UNSUPPORTED);
        t.type = static_cast<cellm_dtype>(type);
        if (t.ne[0] % block != 0) {
            cursor.fail(where + " row length " + std::to_string(t.ne[0]) +
                        " is not a multiple of its type's block size " + std::to_string(block));
        }
        const auto n_blocks = static_cast<uint64_t>(n_elements / block);
        const auto block_bytes = static_cast<uint64_t>(cellm_dtype_type_size(t.type));
        if (n_blocks > std::numeric_limits<uint64_t>::max() / block_bytes) {
            cursor.fail(where + " size in bytes does not fit in 64 bits");
        }
        t.size = n_blocks * block_bytes;

        const auto offset = cursor.read<uint64_t>("data offset");
        if (offset % alignment != 0) {
            cursor.fail(where + " data offset " + std::to_string(offset) + " is not a multiple of the alignment " +
                        std::to_string(alignment));
        }
        tensors_.push_back(t);
        offsets.push_back(offset);
    }
    cursor.set_context({});

    // The data section starts at the next aligned offset after the tensor infos.
    const uint64_t data_start = align_up(cursor.offset(), alignment);
    const uint64_t file_size = mapping_.size();
    const uint64_t data_bytes = data_start < file_size ? file_size - data_start : 0;
    // GGUF does not forbid tensors that share bytes, so their sizes together can exceed the file.
    uint64_t total = 0;
    for (size_t i = 0; i < tensors_.size(); ++i) {
        cellm_tensor_info& t = tensors_[i];
        const uint64_t offset = offsets[i];
        if (offset > data_bytes || t.size > data_bytes - offset) {
            const std::string where = "tensor '" + to_string(t.name) + "' data";
            const uint64_t limit = std::numeric_limits<uint64_t>::max() - data_start;
            if (offset > limit || t.size > limit - offset) {
                cursor.fail(where + " offset " + std::to_string(offset) + " lies far past the end of the file (" +
                            std::to_string(file_size) + " bytes)");
            }
            cursor.fail(where + " (bytes " + std::to_string(data_start + offset) + ".." +
                        std::to_string(data_start + offset + t.size) + ") runs past the end of the file (" +
                        std::to_string(file_size) + " bytes)");
        }
        if (t.size > file_limits::max_model_bytes - total) {
            cursor.fail("with tensor '" + to_string(t.name) + "', " +
                            file_limits::exceeds("total tensor data size", total + t.size,
                                                 file_limits::max_model_bytes, " bytes"),
                        CELLM_ERR_UNSUPPORTED);
        }
        total += t.size;
        t.data = mapping_.data() + data_start + offset;
    }
}

}  // namespace cellm::gguf_plugin
