#include "mapped_file.h"

#include "plugin_host.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace cellm::gguf_plugin {
namespace {

[[noreturn]] void fail_errno(const std::string& path, const char* action) {
    const int err = errno;
    throw plugin::Failure(err == ENOENT ? CELLM_ERR_NOT_FOUND : CELLM_ERR_IO,
                          path + ": cannot " + action + ": " + std::strerror(err));
}

// Closes the descriptor on every path out of the constructor; the mapping outlives it.
struct Descriptor {
    int fd;
    ~Descriptor() { ::close(fd); }
};

}  // namespace

MappedFile::MappedFile(const std::string& path) {
    Descriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (file.fd < 0) fail_errno(path, "open");
    struct stat st {};
    if (::fstat(file.fd, &st) != 0) fail_errno(path, "stat");
    if (!S_ISREG(st.st_mode)) throw plugin::Failure(CELLM_ERR_IO, path + ": not a regular file");
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ == 0) return;  // mmap refuses empty ranges; the parser reports the file as truncated
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd, 0);
    if (p == MAP_FAILED) fail_errno(path, "map");
    data_ = static_cast<const uint8_t*>(p);
}

MappedFile::~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace cellm::gguf_plugin
