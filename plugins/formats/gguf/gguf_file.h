// A validated GGUF v2/v3 file: header, metadata and tensor infos parsed out of a read-only mapping.
#pragma once

#include "gguf_metadata.h"
#include "mapped_file.h"

#include <cellm/tensor.h>

#include <string>
#include <vector>

namespace cellm::gguf_plugin {

class GgufFile {
public:
    // Maps and validates `path`; throws plugin::Failure with a message that starts with `path`.
    explicit GgufFile(const std::string& path);

    const cellm_model_view& view() const { return view_; }

private:
    uint32_t read_alignment(const Cursor& cursor) const;
    void read_tensor_infos(Cursor& cursor, uint64_t count, uint32_t alignment);

    MappedFile mapping_;
    Metadata metadata_;
    std::vector<cellm_tensor_info> tensors_;
    cellm_model_view view_{};
};

}  // namespace cellm::gguf_plugin
