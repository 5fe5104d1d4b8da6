// A small GGUF writer: metadata of every value type and tensors given as already-encoded bytes. It writes
// exactly what it is told (no validation), so tests can also craft broken files; layout() says where each
// field landed so a test can corrupt one precisely.
#pragma once

#include <cellm/tensor.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace cellm::gguf {

static_assert(std::endian::native == std::endian::little, "the GGUF writer assumes a little-endian host");

// Byte offsets in the written file. Header fields sit at fixed offsets.
struct KvLayout {
    uint64_t key;    // the key's u64 length field
    uint64_t type;   // the u32 value type
    uint64_t value;  // first byte of the value (for arrays: the element type)
};
struct TensorLayout {
    uint64_t name;    // the name's u64 length field
    uint64_t n_dims;  // u32
    uint64_t ne;      // n_dims x i64
    uint64_t type;    // u32
    uint64_t offset;  // u64, relative to data_start
    uint64_t data;    // absolute offset of the tensor's first byte
};
struct Layout {
    static constexpr uint64_t magic = 0, version = 4, n_tensors = 8, n_kv = 16;
    std::vector<KvLayout> kvs;        // in the order added
    std::vector<TensorLayout> tensors;  // in the order added
    uint64_t data_start = 0;
    uint64_t size = 0;  // whole file
};

// The GGUF value type of a C++ arithmetic type (bool, u/int8..64, float, double).
template <class T>
constexpr cellm_value_type value_type_of() {
    if constexpr (std::is_same_v<T, bool>) return CELLM_VALUE_BOOL;
    else if constexpr (std::is_same_v<T, uint8_t>) return CELLM_VALUE_U8;
    else if constexpr (std::is_same_v<T, int8_t>) return CELLM_VALUE_I8;
    else if constexpr (std::is_same_v<T, uint16_t>) return CELLM_VALUE_U16;
    else if constexpr (std::is_same_v<T, int16_t>) return CELLM_VALUE_I16;
    else if constexpr (std::is_same_v<T, uint32_t>) return CELLM_VALUE_U32;
    else if constexpr (std::is_same_v<T, int32_t>) return CELLM_VALUE_I32;
    else if constexpr (std::is_same_v<T, uint64_t>) return CELLM_VALUE_U64;
    else if constexpr (std::is_same_v<T, int64_t>) return CELLM_VALUE_I64;
    else if constexpr (std::is_same_v<T, float>) return CELLM_VALUE_F32;
    else if constexpr (std::is_same_v<T, double>) return CELLM_VALUE_F64;
    else static_assert(!sizeof(T), "no GGUF value type for this C++ type");
}

template <class T>
concept Scalar = std::is_arithmetic_v<T>;

class Writer {
public:
    // GGUF version 3 by default; 2 has the same layout (only the number differs).
    explicit Writer(uint32_t version = 3) : version_(version) {}

    template <Scalar T>
    void add(std::string key, T value) {
        std::vector<uint8_t> bytes;
        put(bytes, value);
        add_raw(std::move(key), value_type_of<T>(), std::move(bytes));
    }
    void add(std::string key, std::string_view value);

    template <Scalar T>
    void add_array(std::string key, const std::vector<T>& values) {
        std::vector<uint8_t> bytes;
        put(bytes, static_cast<uint32_t>(value_type_of<T>()));
        put(bytes, static_cast<uint64_t>(values.size()));
        for (T v : values) put(bytes, v);  // element by element: also right for std::vector<bool>
        add_raw(std::move(key), CELLM_VALUE_ARRAY, std::move(bytes));
    }
    void add_array(std::string key, const std::vector<std::string>& values);

    // A value given as its encoded bytes under any type number (nested arrays, unknown types, ...).
    void add_raw(std::string key, uint32_t type, std::vector<uint8_t> value);

    // Adds general.alignment (u32) here and lays tensor data out on that boundary (default 32, no key).
    // Throws std::invalid_argument unless `alignment` is a power of two; add the key by hand to test that case.
    void set_alignment(uint32_t alignment);

    // `ne[0]` innermost; `data` holds the tensor exactly as stored. The type is written as its number, so
    // a test may pass any value.
    void add_tensor(std::string name, cellm_dtype type, std::vector<int64_t> ne, std::vector<uint8_t> data);

    Layout layout() const;
    std::vector<uint8_t> to_bytes() const;
    // Streams the file to `path`; throws std::runtime_error naming the path when writing fails.
    void write(const std::string& path) const;

    // Little-endian encoding helpers, public for tests that build raw values.
    template <class T>
    static void put(std::vector<uint8_t>& out, T value) {
        if constexpr (std::is_same_v<T, bool>) {
            out.push_back(value ? 1 : 0);
        } else {
            const size_t at = out.size();
            out.resize(at + sizeof(T));
            std::memcpy(out.data() + at, &value, sizeof(T));
        }
    }
    static void put_string(std::vector<uint8_t>& out, std::string_view s);

private:
    struct Kv {
        std::string key;
        uint32_t type;
        std::vector<uint8_t> value;
    };
    struct Tensor {
        std::string name;
        uint32_t type;
        std::vector<int64_t> ne;
        std::vector<uint8_t> data;
    };

    // Everything before the data section (padding included), and where each field went.
    std::vector<uint8_t> header(Layout& layout) const;

    uint32_t version_;
    uint32_t alignment_ = 32;
    std::vector<Kv> kvs_;
    std::vector<Tensor> tensors_;
};

}  // namespace cellm::gguf
