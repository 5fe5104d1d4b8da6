// A whole file mapped read-only into memory: tensor data is served from the mapping, never copied.
#pragma once

#include <cstdint>
#include <string>

namespace cellm::gguf_plugin {

class MappedFile {
public:
    // Throws plugin::Failure (NOT_FOUND for a missing file, IO otherwise), the message starting with `path`.
    explicit MappedFile(const std::string& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return data_; }  // NULL for an empty file
    uint64_t size() const { return size_; }

private:
    const uint8_t* data_ = nullptr;
    uint64_t size_ = 0;
};

}  // namespace cellm::gguf_plugin
