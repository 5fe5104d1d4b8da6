// Broken files: each corruption yields a non-OK status whose message starts with the file name and says
// what is wrong; truncation at every length fails cleanly.
#include "gguf_plugin.h"
#include "gguf_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>

namespace cellm::test {
namespace {

using gguf::Layout;
using gguf::Writer;

// A small valid file with strings, arrays of strings and numbers, a nested array and two tensors.
Writer small_model(uint32_t version = 3) {
    Writer w(version);
    w.add("general.architecture", "llama");
    w.add("llama.block_count", uint32_t{1});
    w.add_array("tokenizer.ggml.tokens", std::vector<std::string>{"a", "b", "Ġthe"});
    w.add_array("tokenizer.ggml.token_type", std::vector<int32_t>{1, 1, 3});
    std::vector<uint8_t> nested;
    Writer::put(nested, static_cast<uint32_t>(CELLM_VALUE_ARRAY));
    Writer::put(nested, uint64_t{1});
    Writer::put(nested, static_cast<uint32_t>(CELLM_VALUE_STRING));
    Writer::put(nested, uint64_t{1});
    Writer::put_string(nested, "x");
    w.add_raw("nested", CELLM_VALUE_ARRAY, nested);
    w.add("scale", 0.5f);
    w.add_tensor("blk.0.attn_q.weight", CELLM_TYPE_Q8_0, {32, 2}, std::vector<uint8_t>(68, 1));
    w.add_tensor("output_norm.weight", CELLM_TYPE_F32, {4}, std::vector<uint8_t>(16, 0));
    return w;
}

template <class T>
void patch(std::vector<uint8_t>& bytes, uint64_t offset, T value) {
    std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

struct Corruption {
    const char* name;
    std::function<std::vector<uint8_t>()> make;
    cellm_status_code code;
    const char* message;  // expected substring
};

const Layout& layout() {
    static const Layout l = small_model().layout();
    return l;
}
std::vector<uint8_t> bytes() { return small_model().to_bytes(); }

template <class T>
std::function<std::vector<uint8_t>()> patched(uint64_t offset, T value) {
    return [=] {
        std::vector<uint8_t> b = bytes();
        patch(b, offset, value);
        return b;
    };
}

// A file from a writer with the tensors of small_model() and extra setup.
std::function<std::vector<uint8_t>()> built(std::function<void(Writer&)> setup) {
    return [=] {
        Writer w;
        setup(w);
        return w.to_bytes();
    };
}

const Corruption corruptions[] = {
    {"bad_magic", patched(Layout::magic, uint32_t{0x4C4D4747}), CELLM_ERR_CORRUPT, "not a GGUF file"},
    {"version1", patched(Layout::version, uint32_t{1}), CELLM_ERR_VERSION, "version 1 is not supported"},
    {"version9", patched(Layout::version, uint32_t{9}), CELLM_ERR_VERSION, "unsupported GGUF version 9"},
    {"big_endian", patched(Layout::version, uint32_t{0x03000000}), CELLM_ERR_VERSION, "big-endian"},
    {"absurd_kv_count", patched(Layout::n_kv, uint64_t{1} << 60), CELLM_ERR_CORRUPT, "metadata count"},
    {"absurd_tensor_count", patched(Layout::n_tensors, uint64_t{1} << 58), CELLM_ERR_CORRUPT, "tensor count"},
    {"key_length_past_end", patched(layout().kvs[1].key, uint64_t{1} << 40), CELLM_ERR_CORRUPT,
     "truncated: key of metadata entry 1"},
    {"string_length_past_end", patched(layout().kvs[0].value, uint64_t{1} << 62), CELLM_ERR_CORRUPT,
     "truncated: string value of metadata entry 0 'general.architecture'"},
    {"unknown_value_type", patched(layout().kvs[1].type, uint32_t{99}), CELLM_ERR_CORRUPT,
     "'llama.block_count' has unknown value type 99"},
    {"unknown_array_type", patched(layout().kvs[3].value, uint32_t{13}), CELLM_ERR_CORRUPT,
     "metadata entry 3 'tokenizer.ggml.token_type': array has unknown element type 13"},
    {"absurd_array_count", patched(layout().kvs[3].value + 4, uint64_t{1} << 61), CELLM_ERR_CORRUPT,
     "array of 2305843009213693952 i32 elements cannot fit"},
    {"absurd_string_array_count", patched(layout().kvs[2].value + 4, uint64_t{1} << 50), CELLM_ERR_CORRUPT,
     "string elements cannot fit"},
    {"unknown_tensor_type", patched(layout().tensors[1].type, uint32_t{77}), CELLM_ERR_UNSUPPORTED,
     "tensor 'output_norm.weight' has unknown type 77"},
    {"unknown_tensor_type_in_gap", patched(layout().tensors[1].type, uint32_t{4}), CELLM_ERR_UNSUPPORTED,
     "unknown type 4"},
    {"row_not_whole_blocks", patched(layout().tensors[0].ne, int64_t{48}), CELLM_ERR_CORRUPT,
     "'blk.0.attn_q.weight' row length 48 is not a multiple of its type's block size 32"},
    {"negative_dim", patched(layout().tensors[0].ne + 8, int64_t{-2}), CELLM_ERR_CORRUPT,
     "dimension 1 is -2 (must be positive)"},
    {"zero_dim", patched(layout().tensors[1].ne, int64_t{0}), CELLM_ERR_CORRUPT, "dimension 0 is 0"},
    {"five_dims", patched(layout().tensors[1].n_dims, uint32_t{5}), CELLM_ERR_CORRUPT,
     "'output_norm.weight' has 5 dimensions (must be 1..4)"},
    {"zero_dims", patched(layout().tensors[1].n_dims, uint32_t{0}), CELLM_ERR_CORRUPT, "has 0 dimensions"},
    {"element_count_overflow",
     built([](Writer& w) { w.add_tensor("huge", CELLM_TYPE_F32, {1ll << 32, 1ll << 32}, {}); }), CELLM_ERR_CORRUPT,
     "tensor 'huge' has more elements than fit in 64 bits"},
    {"byte_size_overflow", built([](Writer& w) { w.add_tensor("wide", CELLM_TYPE_F64, {1ll << 62}, {}); }),
     CELLM_ERR_CORRUPT, "tensor 'wide' size in bytes does not fit in 64 bits"},
    {"data_past_end", patched(layout().tensors[1].offset, uint64_t{4096}), CELLM_ERR_CORRUPT,
     "tensor 'output_norm.weight' data (bytes"},
    {"data_offset_far_past_end", patched(layout().tensors[1].offset, ~uint64_t{31}), CELLM_ERR_CORRUPT,
     "data offset 18446744073709551584 lies far past the end of the file"},
    {"misaligned_offset", patched(layout().tensors[1].offset, uint64_t{72}), CELLM_ERR_CORRUPT,
     "'output_norm.weight' data offset 72 is not a multiple of the alignment 32"},
    {"duplicate_tensor",
     built([](Writer& w) {
         w.add_tensor("t", CELLM_TYPE_F32, {1}, std::vector<uint8_t>(4));
         w.add_tensor("t", CELLM_TYPE_F32, {1}, std::vector<uint8_t>(4));
     }),
     CELLM_ERR_CORRUPT, "duplicate tensor 't'"},
    {"duplicate_key",
     built([](Writer& w) {
         w.add("general.name", "a");
         w.add("general.name", "b");
     }),
     CELLM_ERR_CORRUPT, "duplicate metadata key 'general.name'"},
    {"alignment_not_power_of_two", built([](Writer& w) { w.add("general.alignment", uint32_t{48}); }),
     CELLM_ERR_CORRUPT, "general.alignment 48 is not a power of two"},
    {"alignment_zero", built([](Writer& w) { w.add("general.alignment", uint32_t{0}); }), CELLM_ERR_CORRUPT,
     "general.alignment 0 is not a power of two"},
    {"alignment_wrong_type", built([](Writer& w) { w.add("general.alignment", "32"); }), CELLM_ERR_CORRUPT,
     "general.alignment must be a u32, not string"},
    {"arrays_nested_too_deep",
     built([](Writer& w) {
         std::vector<uint8_t> v;
         for (int i = 0; i < 100; ++i) {
             Writer::put(v, static_cast<uint32_t>(CELLM_VALUE_ARRAY));
             Writer::put(v, uint64_t{1});
         }
         w.add_raw("deep", CELLM_VALUE_ARRAY, v);
     }),
     CELLM_ERR_CORRUPT, "nested deeper than"},
};

std::vector<uint8_t> prefix(const std::vector<uint8_t>& bytes, uint64_t len) {
    return {bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(len)};
}

class CorruptTest : public ::testing::TestWithParam<Corruption> {};

TEST_P(CorruptTest, FailsWithAMessageNamingTheFileAndTheProblem) {
    const Corruption& c = GetParam();
    const std::string path = write_temp_file(std::string(c.name) + ".gguf", c.make());
    const OpenOutcome outcome = try_open(path);
    EXPECT_EQ(outcome.code, c.code) << outcome.message;
    EXPECT_EQ(outcome.message.rfind(path + ": ", 0), 0u) << outcome.message;
    EXPECT_NE(outcome.message.find(c.message), std::string::npos) << outcome.message;
}

INSTANTIATE_TEST_SUITE_P(Gguf, CorruptTest, ::testing::ValuesIn(corruptions),
                         [](const auto& test) { return std::string(test.param.name); });

TEST(GgufTruncation, EveryShorterLengthFailsCleanly) {
    for (uint32_t version : {2u, 3u}) {
        const Writer w = small_model(version);
        const std::vector<uint8_t> full = w.to_bytes();
        ASSERT_EQ(try_open(write_temp_file("full.gguf", full)).code, CELLM_OK);
        // Padding after the last tensor's data is optional; every shorter cut loses part of the file.
        const uint64_t needed = w.layout().tensors.back().data + 16;
        for (size_t len = 0; len < needed; ++len) {
            const std::string path = write_temp_file("truncated.gguf", prefix(full, len));
            const OpenOutcome outcome = try_open(path);
            ASSERT_EQ(outcome.code, CELLM_ERR_CORRUPT) << "length " << len << ": " << outcome.message;
            ASSERT_EQ(outcome.message.rfind(path + ": ", 0), 0u) << outcome.message;
        }
    }
}

// Any single byte of the header and tensor infos overwritten with an extreme value: an error or a valid
// file, never a crash or an out-of-bounds read (run under CELLM_SANITIZE to see the latter).
TEST(GgufCorruption, EveryHeaderByteOverwriteIsHandled) {
    const std::vector<uint8_t> full = bytes();
    for (uint64_t at = 0; at < layout().data_start; ++at) {
        for (uint8_t value : {uint8_t{0x00}, uint8_t{0xFF}}) {
            std::vector<uint8_t> b = full;
            b[at] = value;
            const std::string path = write_temp_file("overwritten.gguf", b);
            const OpenOutcome outcome = try_open(path);
            if (outcome.code != CELLM_OK) {
                ASSERT_EQ(outcome.message.rfind(path + ": ", 0), 0u) << outcome.message;
            }
        }
    }
}

TEST(GgufTruncation, TruncatedMessageSaysWhatWasBeingRead) {
    const std::vector<uint8_t> full = bytes();
    const std::string path = write_temp_file("cut_in_tokens.gguf", prefix(full, layout().kvs[2].value + 20));
    const OpenOutcome outcome = try_open(path);
    EXPECT_NE(outcome.message.find("metadata entry 2 'tokenizer.ggml.tokens'"), std::string::npos) << outcome.message;
}

TEST(GgufOpen, MissingFileIsNotFound) {
    const OpenOutcome outcome = try_open(::testing::TempDir() + "no_such_model.gguf");
    EXPECT_EQ(outcome.code, CELLM_ERR_NOT_FOUND);
    EXPECT_NE(outcome.message.find("no_such_model.gguf: cannot open"), std::string::npos) << outcome.message;
}

TEST(GgufOpen, DirectoryIsAnIoError) {
    const std::string dir = ::testing::TempDir() + "cellm_gguf_dir";
    std::filesystem::create_directories(dir);
    const OpenOutcome outcome = try_open(dir);
    EXPECT_EQ(outcome.code, CELLM_ERR_IO);
    EXPECT_NE(outcome.message.find("not a regular file"), std::string::npos) << outcome.message;
}

}  // namespace
}  // namespace cellm::test
