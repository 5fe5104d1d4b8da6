// Every shard of a model folder mapped read-only into ONE contiguous address range, followed by a plugin-owned
// area for tensors that must be rewritten (Llama's permuted Q/K rows, Qwen3.5's norm gains, tensors widened to
// F32). One range lets the host hand the whole model to a host-memory backend without copying, as it does for a
// GGUF file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cellm::safetensors_plugin {

class FolderMapping {
public:
    // Maps `paths` in order and reserves address space for up to `owned_capacity` rewritten bytes (an upper
    // bound: memory is committed only as allocate() hands it out). Throws plugin::Failure (NOT_FOUND for a missing
    // file, IO otherwise) naming the file.
    FolderMapping(const std::vector<std::string>& paths, uint64_t owned_capacity);
    ~FolderMapping();
    FolderMapping(const FolderMapping&) = delete;
    FolderMapping& operator=(const FolderMapping&) = delete;

    struct File {
        const uint8_t* data;  // NULL for an empty file
        uint64_t size;
    };
    const File& file(size_t i) const { return files_[i]; }

    // `bytes` of writable memory inside the range, 64-byte aligned; valid until seal(). Throws plugin::Failure:
    // INTERNAL past the reserved capacity, OUT_OF_MEMORY when the system will not commit the pages.
    uint8_t* allocate(uint64_t bytes);
    // Tells the system that the whole pages of shard data in [data, data + bytes) will not be read again (a
    // tensor served from its rewritten copy), so they leave the process's resident memory; reading them later
    // still works (they come back from the file).
    void release(const uint8_t* data, uint64_t bytes);
    // Makes the owned area read-only and gives back the reserve it did not use.
    void seal();

    const uint8_t* base() const { return base_; }
    uint64_t size() const { return owned_begin_ + owned_used_; }  // what the view exposes

private:
    uint8_t* base_ = nullptr;
    uint64_t reserved_ = 0;
    uint64_t owned_begin_ = 0;
    uint64_t owned_used_ = 0;
    uint64_t owned_committed_ = 0;  // writable bytes from owned_begin_, whole pages
    std::vector<File> files_;
};

}  // namespace cellm::safetensors_plugin
