// A validated .cellm file (docs/format.md): header, metadata and tensor table parsed out of a read-only mapping.
#pragma once

#include "gguf_metadata.h"
#include "mapped_file.h"

#include <cellm/tensor.h>

#include <string>
#include <vector>

namespace cellm::cellm_plugin {

// The fixed part of the header, as docs/format.md lays it out.
struct Header {
    uint32_t version_major, version_minor, header_size, alignment;
    uint64_t n_meta, meta_offset, meta_size;
    uint64_t n_tensors, table_offset, table_size;
    uint64_t data_offset, data_size, file_size;
};

inline constexpr char magic[8] = {'C', 'E', 'L', 'L', 'M', '\r', '\n', '\x1a'};
inline constexpr uint32_t version_major = 1;
inline constexpr uint64_t header_size_v1 = 96;

class CellmFile {
public:
    // Maps and validates `path`; throws plugin::Failure with a message that starts with `path`.
    explicit CellmFile(const std::string& path);

    const cellm_model_view& view() const { return view_; }

private:
    Header read_header(gguf_plugin::Cursor& cursor) const;
    void read_tensor_table(gguf_plugin::Cursor& cursor, const Header& h);

    gguf_plugin::MappedFile mapping_;
    gguf_plugin::Metadata metadata_;
    std::vector<cellm_tensor_info> tensors_;
    cellm_model_view view_{};
};

}  // namespace cellm::cellm_plugin
