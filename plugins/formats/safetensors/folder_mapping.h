// Every shard of a model folder mapped read-only into ONE contiguous address range, followed by a small
// plugin-owned area for tensors that must be rewritten (Llama's permuted Q/K rows). One range lets the host
// hand the whole model to a host-memory backend without copying, as it does for a GGUF file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cellm::safetensors_plugin {

class FolderMapping {
public:
    // Maps `paths` in order and reserves room for up to `owned_capacity` rewritten bytes. Throws
    // plugin::Failure (NOT_FOUND for a missing file, IO otherwise) naming the file.
    FolderMapping(const std::vector<std::string>& paths, uint64_t owned_capacity);
    ~FolderMapping();
    FolderMapping(const FolderMapping&) = delete;
    FolderMapping& operator=(const FolderMapping&) = delete;

    struct File {
        const uint8_t* data;  // NULL for an empty file
        uint64_t size;
    };
    const File& file(size_t i) const { return files_[i]; }

    // `bytes` of writable memory inside the range, 64-byte aligned; valid until seal().
    uint8_t* allocate(uint64_t bytes);
    // Makes the owned area read-only and gives back the reserve it did not use.
    void seal();

    const uint8_t* base() const { return base_; }
    uint64_t size() const { return owned_begin_ + owned_used_; }  // what the view exposes

private:
    uint8_t* base_ = nullptr;
    uint64_t reserved_ = 0;
    uint64_t owned_begin_ = 0;
    uint64_t owned_used_ = 0;
    std::vector<File> files_;
};

}  // namespace cellm::safetensors_plugin
