#include "folder_mapping.h"

#include "plugin_host.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace cellm::safetensors_plugin {
namespace {

[[noreturn]] void fail_errno(const std::string& path, const char* action) {
    const int err = errno;
    throw plugin::Failure(err == ENOENT ? CELLM_ERR_NOT_FOUND : CELLM_ERR_IO,
                          path + ": cannot " + action + ": " + std::strerror(err));
}

// Closes the descriptors on every path out of the constructor; the mappings outlive them.
struct Descriptors {
    std::vector<int> fds;
    ~Descriptors() {
        for (int fd : fds) ::close(fd);
    }
};

uint64_t page_size() { return static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)); }
uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

}  // namespace

FolderMapping::FolderMapping(const std::vector<std::string>& paths, uint64_t owned_capacity) {
    Descriptors open_files;
    std::vector<int>& fds = open_files.fds;
    std::vector<uint64_t> sizes;
    uint64_t total = 0;
    for (const std::string& path : paths) {
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) fail_errno(path, "open");
        fds.push_back(fd);
        struct stat st {};
        if (::fstat(fd, &st) != 0) fail_errno(path, "stat");
        if (!S_ISREG(st.st_mode)) throw plugin::Failure(CELLM_ERR_IO, path + ": not a regular file");
        sizes.push_back(static_cast<uint64_t>(st.st_size));
        total += round_up(sizes.back(), page_size());
    }
    owned_begin_ = total;
    reserved_ = total + round_up(owned_capacity, page_size());
    if (reserved_ == 0) reserved_ = page_size();
    // Address space only: shards are mapped over it, the owned area is committed page by page as it is written.
    void* p = ::mmap(nullptr, reserved_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fail_errno(paths.empty() ? "model folder" : paths[0], "reserve address space for");
    base_ = static_cast<uint8_t*>(p);

    uint64_t at = 0;
    for (size_t i = 0; i < paths.size(); ++i) {
        if (sizes[i] == 0) {
            files_.push_back({nullptr, 0});  // mmap refuses empty ranges; the parser reports the file as truncated
            continue;
        }
        if (::mmap(base_ + at, sizes[i], PROT_READ, MAP_PRIVATE | MAP_FIXED, fds[i], 0) == MAP_FAILED) {
            fail_errno(paths[i], "map");
        }
        files_.push_back({base_ + at, sizes[i]});
        at += round_up(sizes[i], page_size());
    }
}

FolderMapping::~FolderMapping() {
    if (base_ != nullptr) ::munmap(base_, reserved_);
}

uint8_t* FolderMapping::allocate(uint64_t bytes) {
    const uint64_t at = round_up(owned_used_, 64);
    if (bytes > reserved_ - owned_begin_ || at > reserved_ - owned_begin_ - bytes) {
        throw plugin::Failure(CELLM_ERR_INTERNAL, "rewritten tensors exceed their reserved area");
    }
    const uint64_t commit = round_up(at + bytes, page_size());
    if (commit > owned_committed_) {
        // The reserve is an upper bound, so its pages become writable (and count against the system's commit
        // limit) only as they are handed out.
        uint8_t* from = base_ + owned_begin_ + owned_committed_;
        if (::mprotect(from, commit - owned_committed_, PROT_READ | PROT_WRITE) != 0) {
            const int err = errno;
            throw plugin::Failure(CELLM_ERR_OUT_OF_MEMORY, "cannot commit " + std::to_string(commit) +
                                                               " bytes for tensors rewritten on load: " +
                                                               std::strerror(err));
        }
        owned_committed_ = commit;
    }
    owned_used_ = at + bytes;
    return base_ + owned_begin_ + at;
}

void FolderMapping::release(const uint8_t* data, uint64_t bytes) {
    if (data < base_ || data >= base_ + owned_begin_) return;  // not shard data
    const auto at = static_cast<uint64_t>(data - base_);
    if (bytes > owned_begin_ - at) return;
    const uint64_t begin = round_up(at, page_size());
    const uint64_t end = (at + bytes) / page_size() * page_size();
    // Advice only: the shards are mapped private and read-only, so a dropped page is read from the file again.
    if (begin < end) ::madvise(base_ + begin, end - begin, MADV_DONTNEED);
}

void FolderMapping::seal() {
    const uint64_t used = round_up(owned_used_, page_size());
    if (used > 0) ::mprotect(base_ + owned_begin_, used, PROT_READ);
    const uint64_t keep = owned_begin_ + used;
    if (keep > 0 && keep < reserved_) {
        ::munmap(base_ + keep, reserved_ - keep);
        reserved_ = keep;
    }
}

}  // namespace cellm::safetensors_plugin
