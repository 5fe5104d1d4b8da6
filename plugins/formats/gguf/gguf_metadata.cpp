#include "gguf_metadata.h"

#include <string>
#include <unordered_set>

namespace cellm::gguf_plugin {
namespace {

// Nested arrays are skipped, not exposed; the limit keeps a hostile file from exhausting the stack.
constexpr int max_array_depth = 8;

// Smallest encoding of one value of each type: the bound that rejects absurd counts before allocating.
uint64_t min_encoded_size(uint32_t type) {
    switch (type) {
    case CELLM_VALUE_U8: case CELLM_VALUE_I8: case CELLM_VALUE_BOOL: return 1;
    case CELLM_VALUE_U16: case CELLM_VALUE_I16: return 2;
    case CELLM_VALUE_U32: case CELLM_VALUE_I32: case CELLM_VALUE_F32: return 4;
    case CELLM_VALUE_U64: case CELLM_VALUE_I64: case CELLM_VALUE_F64: return 8;
    case CELLM_VALUE_STRING: return 8;     // the length field
    case CELLM_VALUE_ARRAY: return 4 + 8;  // element type and count
    default: return 0;
    }
}

bool is_numeric(uint32_t type) { return type != CELLM_VALUE_STRING && type != CELLM_VALUE_ARRAY; }

// The arrays with one element per token are held to the vocabulary limit, every other array to the array limit.
ArrayLimit array_limit(std::string_view key) {
    if (key == "tokenizer.ggml.tokens" || key == "tokenizer.ggml.token_type" || key == "tokenizer.ggml.scores") {
        return {file_limits::max_vocab, "vocabulary size"};
    }
    return {file_limits::max_array_elements, "array length"};
}

}  // namespace

std::string name_of_value_type(uint32_t type) {
    static constexpr const char* names[] = {"u8",  "i8",   "u16",    "i16",   "u32", "i32", "f32",
                                            "bool", "string", "array", "u64", "i64", "f64"};
    if (type < std::size(names)) return names[type];
    return "type " + std::to_string(type);
}

const cellm_meta_kv* Metadata::find(std::string_view key) const {
    for (const cellm_meta_kv& kv : entries_) {
        if (std::string_view(kv.key.data, kv.key.len) == key) return &kv;
    }
    return nullptr;
}

void Metadata::read(Cursor& cursor, uint64_t count) {
    if (count > file_limits::max_metadata_entries) {
        cursor.fail(file_limits::exceeds("metadata count", count, file_limits::max_metadata_entries));
    }
    // Key (8-byte length), type (4) and at least one byte of value per entry.
    if (count > cursor.remaining() / 13) {
        cursor.fail("metadata count " + std::to_string(count) + " cannot fit in the " +
                    std::to_string(cursor.remaining()) + " bytes that follow the header");
    }
    entries_.reserve(count);
    std::unordered_set<std::string_view> keys;
    for (uint64_t i = 0; i < count; ++i) {
        cursor.set_context("metadata entry " + std::to_string(i));
        cellm_meta_kv kv{};
        kv.key = cursor.read_string("key");
        const std::string key = to_string(kv.key);
        cursor.set_context("metadata entry " + std::to_string(i) + " '" + key + "'");
        if (!keys.emplace(kv.key.data, kv.key.len).second) cursor.fail("duplicate metadata key '" + key + "'");
        const auto type = cursor.read<uint32_t>("value type");
        if (min_encoded_size(type) == 0) {
            cursor.fail("metadata key '" + key + "' has unknown value type " + std::to_string(type));
        }
        kv.value = read_value(cursor, type, key);
        entries_.push_back(kv);
    }
    cursor.set_context({});
}

cellm_meta_value Metadata::read_value(Cursor& cursor, uint32_t type, std::string_view key) {
    cellm_meta_value v{};
    v.type = static_cast<cellm_value_type>(type);
    switch (type) {
    case CELLM_VALUE_U8: v.v.u64 = cursor.read<uint8_t>("u8 value"); break;
    case CELLM_VALUE_I8: v.v.i64 = cursor.read<int8_t>("i8 value"); break;
    case CELLM_VALUE_U16: v.v.u64 = cursor.read<uint16_t>("u16 value"); break;
    case CELLM_VALUE_I16: v.v.i64 = cursor.read<int16_t>("i16 value"); break;
    case CELLM_VALUE_U32: v.v.u64 = cursor.read<uint32_t>("u32 value"); break;
    case CELLM_VALUE_I32: v.v.i64 = cursor.read<int32_t>("i32 value"); break;
    case CELLM_VALUE_F32: v.v.f64 = cursor.read<float>("f32 value"); break;
    case CELLM_VALUE_BOOL: v.v.u64 = cursor.read<uint8_t>("bool value") != 0 ? 1 : 0; break;
    case CELLM_VALUE_STRING: v.v.str = cursor.read_string("string value"); break;
    case CELLM_VALUE_ARRAY: return read_array(cursor, 0, array_limit(key));
    case CELLM_VALUE_U64: v.v.u64 = cursor.read<uint64_t>("u64 value"); break;
    case CELLM_VALUE_I64: v.v.i64 = cursor.read<int64_t>("i64 value"); break;
    case CELLM_VALUE_F64: v.v.f64 = cursor.read<double>("f64 value"); break;
    default: cursor.fail("unknown value type " + std::to_string(type));
    }
    return v;
}

cellm_meta_value Metadata::read_array(Cursor& cursor, int depth, const ArrayLimit& limit) {
    const auto elem_type = cursor.read<uint32_t>("array element type");
    const auto count = cursor.read<uint64_t>("array length");
    const uint64_t elem_size = min_encoded_size(elem_type);
    if (elem_size == 0) {
        cursor.fail(cursor.context() + ": array has unknown element type " + std::to_string(elem_type));
    }
    if (count > limit.max) cursor.fail(cursor.context() + ": " + file_limits::exceeds(limit.what, count, limit.max));
    if (count > cursor.remaining() / elem_size) {
        cursor.fail(cursor.context() + ": array of " + std::to_string(count) + " " + name_of_value_type(elem_type) +
                    " elements cannot fit in the " + std::to_string(cursor.remaining()) +
                    " bytes left at offset " + std::to_string(cursor.offset()));
    }
    cellm_meta_value v{};
    v.type = CELLM_VALUE_ARRAY;
    v.v.arr.elem_type = static_cast<cellm_value_type>(elem_type);
    v.v.arr.count = count;
    if (is_numeric(elem_type)) {
        v.v.arr.data = cursor.take(count * elem_size, "array data");
    } else if (elem_type == CELLM_VALUE_STRING) {
        std::vector<cellm_string_ref> strings;
        strings.reserve(count);
        for (uint64_t i = 0; i < count; ++i) strings.push_back(cursor.read_string("array string"));
        v.v.arr.data = strings.data();
        string_arrays_.push_back(std::move(strings));
    } else {
        if (depth + 1 >= max_array_depth) {
            cursor.fail(cursor.context() + ": arrays nested deeper than " + std::to_string(max_array_depth) +
                        " levels");
        }
        const ArrayLimit nested{file_limits::max_array_elements, "nested array length"};
        for (uint64_t i = 0; i < count; ++i) read_array(cursor, depth + 1, nested);
        v.v.arr.data = nullptr;
    }
    return v;
}

}  // namespace cellm::gguf_plugin
