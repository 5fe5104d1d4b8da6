#include "qwen_models.h"

#include "synthetic_model.h"
#include "test_support.h"

#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

namespace fs = std::filesystem;

namespace cellm::testing {
namespace {

struct Edited {
    gguf::Layout layout;
    std::vector<uint8_t> bytes;
};

Edited build(const std::string& preset) {
    const gguf::Writer writer = synthetic::build_model({preset, CELLM_TYPE_F32, 1});
    return {writer.layout(), writer.to_bytes()};
}

// The GGUF string whose u64 length field is at `at`.
std::string string_at(const std::vector<uint8_t>& bytes, uint64_t at) {
    uint64_t len = 0;
    std::memcpy(&len, bytes.data() + at, sizeof(len));
    return std::string(reinterpret_cast<const char*>(bytes.data() + at + sizeof(len)), len);
}

// Replaces the last character of the string at `at` (a GGUF string of `name`'s length).
void rename(std::vector<uint8_t>& bytes, uint64_t at, const std::string& name) {
    bytes[at + sizeof(uint64_t) + name.size() - 1] = '~';
}

const gguf::TensorLayout& tensor(const Edited& e, const std::string& name) {
    for (const gguf::TensorLayout& t : e.layout.tensors) {
        if (string_at(e.bytes, t.name) == name) return t;
    }
    throw std::runtime_error("the synthetic model has no tensor '" + name + "'");
}

fs::path save(const Edited& e, const std::string& file_name) {
    const fs::path path = temp_dir() / file_name;
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(e.bytes.data()), static_cast<std::streamsize>(e.bytes.size()));
    return path;
}

}  // namespace

fs::path qwen_model(const std::string& preset, cellm_dtype type) {
    static std::mutex mutex;
    static std::map<std::pair<std::string, cellm_dtype>, fs::path> written;
    std::lock_guard lock(mutex);
    const auto key = std::make_pair(preset, type);
    if (auto it = written.find(key); it != written.end()) return it->second;
    const fs::path path = temp_dir() / (preset + "-" + std::string(synthetic::weight_type_name(type)) + ".gguf");
    synthetic::write_model(path.string(), {preset, type, 1});
    written[key] = path;
    return path;
}

fs::path model_with_renamed_tensor(const std::string& preset, const std::string& name, const std::string& file_name) {
    Edited e = build(preset);
    rename(e.bytes, tensor(e, name).name, name);
    return save(e, file_name);
}

fs::path model_with_renamed_key(const std::string& preset, const std::string& key, const std::string& file_name) {
    Edited e = build(preset);
    for (const gguf::KvLayout& kv : e.layout.kvs) {
        if (string_at(e.bytes, kv.key) == key) {
            rename(e.bytes, kv.key, key);
            return save(e, file_name);
        }
    }
    throw std::runtime_error("the synthetic model has no key '" + key + "'");
}

fs::path model_with_ne0(const std::string& preset, const std::string& name, int64_t ne0, const std::string& file_name) {
    Edited e = build(preset);
    std::memcpy(e.bytes.data() + tensor(e, name).ne, &ne0, sizeof(ne0));
    return save(e, file_name);
}

}  // namespace cellm::testing
