#include "pytorch_zip.h"

#include "formats/limits.h"
#include "pickle.h"
#include "plugin_host.hpp"

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <map>
#include <string_view>

namespace cellm::safetensors_plugin {
namespace {

// The zip records cellm reads (APPNOTE.TXT 4.3): little-endian fields at fixed offsets after a signature.
constexpr uint32_t local_header_sig = 0x04034b50, central_header_sig = 0x02014b50, end_sig = 0x06054b50,
                   zip64_end_sig = 0x06064b50, zip64_locator_sig = 0x07064b50;
constexpr uint64_t local_header_bytes = 30, central_header_bytes = 46, end_bytes = 22, zip64_end_bytes = 56,
                   zip64_locator_bytes = 20;
constexpr uint64_t max_comment = 0xffff;
// data.pkl is read into structures; the storages are only mapped. 256 MiB holds the pickle of far more tensors
// than max_tensors (pickle.cpp has the same bound).
constexpr uint64_t max_pickle_entry = uint64_t{256} << 20;

uint64_t get(const uint8_t* p, unsigned bytes) {
    uint64_t v = 0;
    for (unsigned k = 0; k < bytes; ++k) v |= uint64_t{p[k]} << (8 * k);
    return v;
}

constexpr std::array<uint32_t, 256> crc_table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
        uint32_t c = n;
        for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        t[n] = c;
    }
    return t;
}();

uint32_t crc32(const uint8_t* p, uint64_t n) {
    uint32_t c = 0xffffffffu;
    for (uint64_t i = 0; i < n; ++i) c = crc_table[(c ^ p[i]) & 0xffu] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

struct Entry {
    std::string name;
    uint16_t method = 0;
    uint16_t flags = 0;
    uint32_t crc = 0;
    uint64_t compressed = 0, uncompressed = 0, local_offset = 0;
    const uint8_t* data = nullptr;  // set once the local header is checked
};

std::string join(const std::vector<int64_t>& v) {
    std::string s = "[";
    for (size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + std::to_string(v[k]);
    return s + "]";
}

class Archive {
public:
    Archive(const std::string& file, const uint8_t* data, uint64_t size) : file_(file), p_(data), size_(size) {}

    std::vector<ShardTensor> tensors() {
        read_central_directory();
        const Entry& pickle = find_pickle();
        check_byteorder();
        const PickledStateDict dict = read_state_dict_pickle(pickle.data, pickle.uncompressed, file_ + ": " + pickle.name);
        // The entry of each storage, checked once whatever the number of tensors viewing it.
        std::vector<const Entry*> storage_entries;
        for (const PickledStorage& s : dict.storages) storage_entries.push_back(&storage_entry(s));

        std::vector<ShardTensor> out;
        for (size_t k = 0; k < dict.tensors.size(); ++k) {
            const PickledTensor& t = dict.tensors[k];
            ShardTensor view = tensor(t, dict.storages[t.storage], *storage_entries[t.storage]);
            // The archs use the token embedding when the output is absent, as save_pretrained's files have it.
            if (t.name == "lm_head.weight" && is_alias_of_another(dict, k)) continue;
            out.push_back(std::move(view));
        }
        return out;
    }

private:
    [[noreturn]] void fail(cellm_status_code code, std::string message) const {
        // Entry names and storage keys come from the file: control bytes must not break the one line.
        for (char& c : message) {
            if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
        }
        throw plugin::Failure(code, file_ + ": " + message);
    }
    [[noreturn]] void corrupt(const std::string& message) const { fail(CELLM_ERR_CORRUPT, message); }

    // The end of central directory record, searched backwards over the largest comment a zip can carry.
    uint64_t find_end() const {
        if (size_ < end_bytes) {
            corrupt("not a zip archive: " + std::to_string(size_) + " bytes is less than the 22 of its end record");
        }
        const uint64_t lowest = size_ - end_bytes > max_comment ? size_ - end_bytes - max_comment : 0;
        for (uint64_t at = size_ - end_bytes + 1; at-- > lowest;) {
            if (get(p_ + at, 4) == end_sig && at + end_bytes + get(p_ + at + 20, 2) == size_) return at;
        }
        if (get(p_, 4) == local_header_sig) {
            corrupt("zip archive without its end of central directory record (truncated?)");
        }
        corrupt("not a zip archive (torch.save writes zip archives since PyTorch 1.6; an older pickle-only "
                "checkpoint is not read: load and save it again with a current torch)");
    }

    void read_central_directory() {
        const uint64_t end = find_end();
        uint64_t count = get(p_ + end + 10, 2);
        uint64_t cd_size = get(p_ + end + 12, 4);
        uint64_t cd_offset = get(p_ + end + 16, 4);
        if (get(p_ + end + 4, 2) != 0 || get(p_ + end + 6, 2) != 0) corrupt("multi-disk zip archives are not read");
        if (end >= zip64_locator_bytes && get(p_ + end - zip64_locator_bytes, 4) == zip64_locator_sig) {
            // Zip64 (archives above 4 GiB, or with more than 65,535 entries): the counts and offsets live there.
            const uint64_t record = get(p_ + end - zip64_locator_bytes + 8, 8);
            if (record > end - zip64_locator_bytes || end - zip64_locator_bytes - record < zip64_end_bytes ||
                get(p_ + record, 4) != zip64_end_sig) {
                corrupt("zip64 end of central directory record at offset " + std::to_string(record) +
                        " is missing or outside the file");
            }
            count = get(p_ + record + 32, 8);
            cd_size = get(p_ + record + 40, 8);
            cd_offset = get(p_ + record + 48, 8);
        }
        if (cd_offset > end || cd_size > end - cd_offset) {
            corrupt("central directory [" + std::to_string(cd_offset) + ", +" + std::to_string(cd_size) +
                    ") lies outside the file before its end record");
        }
        // Each entry takes at least 46 bytes, so the count is bounded by the directory's size before anything is
        // allocated; torch writes a handful of entries beside one per storage.
        if (count > cd_size / central_header_bytes) {
            corrupt("central directory claims " + std::to_string(count) + " entries in " + std::to_string(cd_size) + " bytes");
        }
        if (count > 2 * file_limits::max_tensors + 16) corrupt(file_limits::exceeds("zip entry count", count, 2 * file_limits::max_tensors + 16));
        uint64_t at = cd_offset;
        const uint64_t cd_end = cd_offset + cd_size;
        for (uint64_t k = 0; k < count; ++k) {
            if (cd_end - at < central_header_bytes || get(p_ + at, 4) != central_header_sig) {
                corrupt("central directory entry " + std::to_string(k) + " at offset " + std::to_string(at) + " is malformed");
            }
            const uint8_t* h = p_ + at;
            Entry e;
            e.flags = static_cast<uint16_t>(get(h + 8, 2));
            e.method = static_cast<uint16_t>(get(h + 10, 2));
            e.crc = static_cast<uint32_t>(get(h + 16, 4));
            e.compressed = get(h + 20, 4);
            e.uncompressed = get(h + 24, 4);
            const uint64_t name_len = get(h + 28, 2), extra_len = get(h + 30, 2), comment_len = get(h + 32, 2);
            e.local_offset = get(h + 42, 4);
            if (cd_end - at - central_header_bytes < name_len + extra_len + comment_len) {
                corrupt("central directory entry " + std::to_string(k) + " runs past the directory");
            }
            e.name.assign(reinterpret_cast<const char*>(h + central_header_bytes), name_len);
            read_zip64_extra(e, h + central_header_bytes + name_len, extra_len);
            at += central_header_bytes + name_len + extra_len + comment_len;
            const std::string name = e.name;
            if (!entries_.emplace(name, std::move(e)).second) corrupt("zip entry '" + name + "' appears twice");
        }
    }

    // The zip64 extended information field: 8-byte values for each of the 4-byte fields saturated at 0xffffffff.
    void read_zip64_extra(Entry& e, const uint8_t* extra, uint64_t len) const {
        for (uint64_t at = 0; len - at >= 4;) {
            const uint64_t id = get(extra + at, 2), n = get(extra + at + 2, 2);
            if (n > len - at - 4) corrupt("zip entry '" + e.name + "' has a malformed extra field");
            if (id == 0x0001) {
                const uint8_t* f = extra + at + 4;
                uint64_t used = 0;
                for (uint64_t* field : {&e.uncompressed, &e.compressed, &e.local_offset}) {
                    if (*field != 0xffffffffu) continue;
                    if (n - used < 8) corrupt("zip entry '" + e.name + "' has a truncated zip64 field");
                    *field = get(f + used, 8);
                    used += 8;
                }
            }
            at += 4 + n;
        }
    }

    // Checks an entry's local header and range and points it at its bytes, which must be stored uncompressed.
    const Entry& open_entry(Entry& e) const {
        if (e.data != nullptr) return e;
        if ((e.flags & 1u) != 0) fail(CELLM_ERR_UNSUPPORTED, "zip entry '" + e.name + "' is encrypted");
        if (e.method != 0) {
            fail(CELLM_ERR_UNSUPPORTED, "zip entry '" + e.name + "' is compressed (method " + std::to_string(e.method) +
                                            "); torch.save stores entries uncompressed and cellm maps them as they are: "
                                            "save the checkpoint again with torch.save");
        }
        if (e.compressed != e.uncompressed) {
            corrupt("zip entry '" + e.name + "' is stored with " + std::to_string(e.compressed) + " bytes but claims " +
                    std::to_string(e.uncompressed) + " uncompressed");
        }
        const uint64_t at = e.local_offset;
        if (at > size_ || size_ - at < local_header_bytes || get(p_ + at, 4) != local_header_sig) {
            corrupt("zip entry '" + e.name + "' has no local header at offset " + std::to_string(at));
        }
        const uint64_t start = at + local_header_bytes + get(p_ + at + 26, 2) + get(p_ + at + 28, 2);
        if (start > size_ || e.compressed > size_ - start) {
            corrupt("zip entry '" + e.name + "' claims " + std::to_string(e.compressed) + " bytes at offset " +
                    std::to_string(start) + ", past the end of the file (" + std::to_string(size_) + " bytes)");
        }
        e.data = p_ + start;
        return e;
    }

    const Entry& find_pickle() {
        Entry* found = nullptr;
        for (auto& [name, e] : entries_) {
            const size_t slash = name.find('/');
            if (slash == std::string::npos || name.substr(slash + 1) != "data.pkl") continue;
            if (found != nullptr) corrupt("two pickles, '" + found->name + "' and '" + name + "'");
            found = &e;
        }
        if (found == nullptr) {
            fail(CELLM_ERR_CORRUPT, "zip archive without <folder>/data.pkl: not a torch.save checkpoint");
        }
        top_ = found->name.substr(0, found->name.find('/') + 1);
        const Entry& e = open_entry(*found);
        if (e.uncompressed > max_pickle_entry) {
            fail(CELLM_ERR_UNSUPPORTED, e.name + " " + file_limits::exceeds("size", e.uncompressed, max_pickle_entry, " bytes"));
        }
        if (crc32(e.data, e.uncompressed) != e.crc) corrupt("zip entry '" + e.name + "' fails its CRC-32 check");
        return e;
    }

    void check_byteorder() {
        const auto it = entries_.find(top_ + "byteorder");
        if (it == entries_.end()) return;  // written since PyTorch 1.10; older archives are little-endian
        const Entry& e = open_entry(it->second);
        const std::string_view order(reinterpret_cast<const char*>(e.data), static_cast<size_t>(std::min<uint64_t>(e.uncompressed, 16)));
        if (order != "little") fail(CELLM_ERR_UNSUPPORTED, e.name + " says '" + std::string(order) + "' (cellm reads little-endian storages)");
    }

    const Entry& storage_entry(const PickledStorage& s) {
        const auto it = entries_.find(top_ + "data/" + s.key);
        if (it == entries_.end()) corrupt("storage '" + s.key + "' has no entry " + top_ + "data/" + s.key);
        const Entry& e = open_entry(it->second);
        // A hostile numel can overflow the byte count; such a storage needs more than any file holds.
        const bool representable = s.numel <= UINT64_MAX / s.element_size;
        if (!representable || e.uncompressed != s.numel * s.element_size) {
            corrupt("storage '" + s.key + "' (" + e.name + ") holds " + std::to_string(e.uncompressed) + " bytes, its " +
                    std::to_string(s.numel) + " elements of " + s.type_name + " need " +
                    (representable ? std::to_string(s.numel * s.element_size) : "more than 2^64"));
        }
        return e;
    }

    ShardTensor tensor(const PickledTensor& t, const PickledStorage& s, const Entry& e) const {
        const std::string where = "tensor '" + t.name + "'";
        if (s.type == CELLM_TYPE_COUNT_GGUF) {
            fail(CELLM_ERR_UNSUPPORTED, where + " is stored as " + s.type_name +
                                            " (supported: FloatStorage, HalfStorage, BFloat16Storage)");
        }
        if (t.shape.empty() || t.shape.size() > CELLM_MAX_DIMS) {
            fail(CELLM_ERR_UNSUPPORTED, where + " has " + std::to_string(t.shape.size()) + " dimensions (cellm takes 1.." +
                                            std::to_string(CELLM_MAX_DIMS) + ")");
        }
        uint64_t elements = 1;
        for (const int64_t d : t.shape) {
            const auto n = static_cast<uint64_t>(d);
            if (n == 0 || n > (uint64_t{1} << 40) || elements > (uint64_t{1} << 40) / n) {
                corrupt(where + " has an empty or implausibly large size " + join(t.shape));
            }
            elements *= n;
        }
        // The last element the view reads, offset + sum((size - 1) * stride), must lie inside the storage. Every
        // term is below 2^40 x 2^63, so 128-bit sums cannot wrap.
        unsigned __int128 last = t.offset;
        for (size_t k = 0; k < t.shape.size(); ++k) {
            last += static_cast<unsigned __int128>(t.shape[k] - 1) * static_cast<uint64_t>(t.stride[k]);
        }
        if (last >= s.numel) {
            corrupt(where + " (offset " + std::to_string(t.offset) + ", size " + join(t.shape) + ", stride " +
                    join(t.stride) + ") reads past the " + std::to_string(s.numel) + " elements of its storage '" + s.key + "'");
        }
        uint64_t expected = 1;
        for (size_t k = t.shape.size(); k-- > 0;) {
            if (t.shape[k] != 1 && static_cast<uint64_t>(t.stride[k]) != expected) {
                fail(CELLM_ERR_UNSUPPORTED, where + " is not contiguous (size " + join(t.shape) + ", stride " +
                                                join(t.stride) +
                                                "); cellm serves tensors in place: save tensor.contiguous() instead");
            }
            expected *= static_cast<uint64_t>(t.shape[k]);
        }
        return ShardTensor{t.name, s.type, t.shape, e.data + t.offset * s.element_size, elements * s.element_size};
    }

    // Whether tensor `k` views exactly what an earlier tensor views.
    static bool is_alias_of_another(const PickledStateDict& dict, size_t k) {
        const PickledTensor& t = dict.tensors[k];
        for (size_t j = 0; j < dict.tensors.size(); ++j) {
            const PickledTensor& o = dict.tensors[j];
            if (j != k && o.storage == t.storage && o.offset == t.offset && o.shape == t.shape && o.stride == t.stride) return true;
        }
        return false;
    }

    const std::string& file_;
    const uint8_t* p_;
    uint64_t size_;
    std::map<std::string, Entry> entries_;
    std::string top_;  // "archive/": the folder every entry of a torch.save archive lies in
};

}  // namespace

std::vector<ShardTensor> read_pytorch_zip(const std::string& file, const uint8_t* data, uint64_t size) {
    return Archive(file, data, size).tensors();
}

}  // namespace cellm::safetensors_plugin
