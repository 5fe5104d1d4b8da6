// Writes .cellm files (docs/format.md): metadata in GGUF's value encoding, a tensor table and aligned tensor
// data, so the cellm format plugin can serve it straight from a mapping.
#pragma once

#include <cellm/tensor.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace cellm {

// Where the writer put each part of the file: the output size for the user, exact offsets for tests.
struct CellmLayout {
    uint64_t meta_offset = 0, table_offset = 0, data_offset = 0, file_size = 0;
    std::vector<uint64_t> meta_entries;    // first byte (the key's length) of each metadata entry
    std::vector<uint64_t> tensor_entries;  // first byte (the name's length) of each tensor table entry
};

class CellmWriter {
public:
    explicit CellmWriter(uint32_t alignment = 64);

    // Every metadata entry and tensor of `view`, unchanged (tensor data borrowed from the view). Keys it must
    // leave out (nested arrays) are appended to `skipped`.
    static CellmWriter from_view(const cellm_model_view& view, std::vector<std::string>& skipped);

    // Re-encodes one metadata entry of a model view. Returns false, writing nothing, for a nested array
    // (views expose only its length); throws cellm::Error for a value type the format does not define.
    bool add_meta(const cellm_meta_kv& kv);

    // A tensor stored as given: `data` (`size` bytes, laid out as `type` defines) is borrowed until write()
    // returns. Throws cellm::Error when the size does not match the type and shape.
    void add_tensor(const cellm_tensor_info& tensor);

    CellmLayout layout() const;

    // Called after each tensor's data is written: its index, the tensor count and the tensor.
    using Progress = std::function<void(size_t index, size_t count, const cellm_tensor_info& tensor)>;

    // Writes the file to `path` through a sibling `<path>.partial` that replaces `path` only when complete,
    // so a failed write never leaves a broken model behind. Throws cellm::Error naming the path.
    CellmLayout write(const std::filesystem::path& path, const Progress& progress = {}) const;

private:
    // Header, metadata and tensor table; fills `layout`.
    std::vector<uint8_t> head(CellmLayout& layout) const;

    uint32_t alignment_;
    uint64_t n_meta_ = 0;
    std::vector<uint8_t> meta_;                    // encoded entries
    std::vector<uint64_t> meta_entries_;           // their offsets inside meta_
    std::vector<cellm_tensor_info> tensors_;       // name and data borrowed
    std::vector<uint64_t> data_offsets_;           // relative to the data section
    uint64_t data_size_ = 0;
};

}  // namespace cellm
