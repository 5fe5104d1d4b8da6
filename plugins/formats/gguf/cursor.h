// Bounds-checked little-endian reading of a GGUF file. Every read checks the remaining bytes first, so a
// truncated or lying file ends in a plugin::Failure that names the file, the field and the offset.
#pragma once

#include "formats/limits.h"
#include "plugin_host.hpp"

#include <cellm/tensor.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace cellm::gguf_plugin {

// GGUF is little endian and values are copied straight out of the mapping.
static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

inline std::string to_string(cellm_string_ref s) { return std::string(s.data, s.len); }

class Cursor {
public:
    Cursor(const uint8_t* data, uint64_t size, std::string file) : data_(data), size_(size), file_(std::move(file)) {}

    uint64_t offset() const { return pos_; }
    uint64_t remaining() const { return size_ - pos_; }
    const std::string& file() const { return file_; }

    // Names the entry being read ("metadata entry 3 'general.name'") for truncation messages.
    void set_context(std::string context) { context_ = std::move(context); }
    const std::string& context() const { return context_; }

    template <class T>
    T read(const char* what) {
        T value;
        std::memcpy(&value, take(sizeof(T), what), sizeof(T));
        return value;
    }

    // A GGUF string: u64 length, then that many bytes (not NUL-terminated), pointing into the mapping.
    cellm_string_ref read_string(const char* what) {
        const uint64_t len = read<uint64_t>(what);
        if (len > file_limits::max_string_bytes) {
            fail(std::string(what) + (context_.empty() ? "" : " of " + context_) + ": " +
                 file_limits::exceeds("string length", len, file_limits::max_string_bytes, " bytes"));
        }
        return {reinterpret_cast<const char*>(take(len, what)), len};
    }

    const uint8_t* take(uint64_t n, const char* what) {
        if (n > remaining()) {
            fail(std::string("truncated: ") + what + (context_.empty() ? "" : " of " + context_) + " needs " +
                 std::to_string(n) + " bytes at offset " + std::to_string(pos_) + " but the file has " +
                 std::to_string(size_) + " bytes");
        }
        const uint8_t* p = data_ + pos_;
        pos_ += n;
        return p;
    }

    [[noreturn]] void fail(const std::string& message, cellm_status_code code = CELLM_ERR_CORRUPT) const {
        throw plugin::Failure(code, file_ + ": " + message);
    }

private:
    const uint8_t* data_;
    uint64_t size_;
    uint64_t pos_ = 0;
    std::string file_;
    std::string context_;
};

}  // namespace cellm::gguf_plugin
