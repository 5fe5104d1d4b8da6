// Broken files: each corruption yields a non-OK status whose message starts with the file name and says
// what is wrong; truncation at every length fails cleanly.
#include "gguf_plugin.h"
#include "gguf_writer.h"

#include "error.h"
#include "tokenize/tokenizer.h"
#include "../../plugins/formats/limits.h"

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

// A file holding only the string array `key` ("a", "b"), its element count field overwritten with `count`.
std::function<std::vector<uint8_t>()> array_claiming(std::string key, uint64_t count) {
    return [=] {
        Writer w;
        w.add_array(key, std::vector<std::string>{"a", "b"});
        std::vector<uint8_t> b = w.to_bytes();
        patch(b, w.layout().kvs[0].value + 4, count);
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
    {"absurd_kv_count", patched(Layout::n_kv, uint64_t{1} << 60), CELLM_ERR_CORRUPT,
     "metadata count 1152921504606846976 exceeds the limit of 1048576"},
    {"absurd_tensor_count", patched(Layout::n_tensors, uint64_t{1} << 58), CELLM_ERR_CORRUPT,
     "tensor count 288230376151711744 exceeds the limit of 1048576"},
    // Each limit of formats/limits.h, one past it and (where the file cannot hold that much) at it, where
    // the remaining-bytes check takes over.
    {"kv_count_over_limit", patched(Layout::n_kv, file_limits::max_metadata_entries + 1), CELLM_ERR_CORRUPT,
     "metadata count 1048577 exceeds the limit of 1048576"},
    {"kv_count_at_limit", patched(Layout::n_kv, file_limits::max_metadata_entries), CELLM_ERR_CORRUPT,
     "metadata count 1048576 cannot fit"},
    {"tensor_count_over_limit", patched(Layout::n_tensors, file_limits::max_tensors + 1), CELLM_ERR_CORRUPT,
     "tensor count 1048577 exceeds the limit of 1048576"},
    {"tensor_count_at_limit", patched(Layout::n_tensors, file_limits::max_tensors), CELLM_ERR_CORRUPT,
     "tensor count 1048576 cannot fit"},
    {"key_length_over_limit", patched(layout().kvs[1].key, file_limits::max_string_bytes + 1), CELLM_ERR_CORRUPT,
     "key of metadata entry 1: string length 1048577 exceeds the limit of 1048576 bytes"},
    {"key_length_past_end", patched(layout().kvs[1].key, file_limits::max_string_bytes), CELLM_ERR_CORRUPT,
     "truncated: key of metadata entry 1 needs 1048576 bytes"},
    {"string_length_over_limit", patched(layout().kvs[0].value, uint64_t{1} << 62), CELLM_ERR_CORRUPT,
     "string value of metadata entry 0 'general.architecture': string length 4611686018427387904 exceeds the "
     "limit of 1048576 bytes"},
    {"string_length_past_end", patched(layout().kvs[0].value, file_limits::max_string_bytes), CELLM_ERR_CORRUPT,
     "truncated: string value of metadata entry 0 'general.architecture'"},
    {"token_length_over_limit", patched(layout().kvs[2].value + 4 + 8, file_limits::max_string_bytes + 1),
     CELLM_ERR_CORRUPT,
     "array string of metadata entry 2 'tokenizer.ggml.tokens': string length 1048577 exceeds the limit of 1048576"},
    {"tensor_name_over_limit", patched(layout().tensors[0].name, file_limits::max_string_bytes + 1),
     CELLM_ERR_CORRUPT, "name of tensor info 0: string length 1048577 exceeds the limit of 1048576 bytes"},
    {"array_length_over_limit", array_claiming("tokenizer.ggml.merges", file_limits::max_array_elements + 1),
     CELLM_ERR_CORRUPT, "'tokenizer.ggml.merges': array length 16777217 exceeds the limit of 16777216"},
    {"array_length_at_limit", array_claiming("tokenizer.ggml.merges", file_limits::max_array_elements),
     CELLM_ERR_CORRUPT, "array of 16777216 string elements cannot fit"},
    {"nested_array_length_over_limit", patched(layout().kvs[4].value + 4 + 8 + 4, file_limits::max_array_elements + 1),
     CELLM_ERR_CORRUPT, "'nested': nested array length 16777217 exceeds the limit of 16777216"},
    {"vocabulary_over_limit", array_claiming("tokenizer.ggml.tokens", file_limits::max_vocab + 1), CELLM_ERR_CORRUPT,
     "'tokenizer.ggml.tokens': vocabulary size 4194305 exceeds the limit of 4194304"},
    {"vocabulary_at_limit", array_claiming("tokenizer.ggml.tokens", file_limits::max_vocab), CELLM_ERR_CORRUPT,
     "array of 4194304 string elements cannot fit"},
    {"unknown_value_type", patched(layout().kvs[1].type, uint32_t{99}), CELLM_ERR_CORRUPT,
     "'llama.block_count' has unknown value type 99"},
    {"unknown_array_type", patched(layout().kvs[3].value, uint32_t{13}), CELLM_ERR_CORRUPT,
     "metadata entry 3 'tokenizer.ggml.token_type': array has unknown element type 13"},
    {"absurd_array_count", patched(layout().kvs[3].value + 4, uint64_t{1} << 61), CELLM_ERR_CORRUPT,
     "'tokenizer.ggml.token_type': vocabulary size 2305843009213693952 exceeds the limit of 4194304"},
    {"array_count_cannot_fit", patched(layout().kvs[3].value + 4, uint64_t{1} << 20), CELLM_ERR_CORRUPT,
     "array of 1048576 i32 elements cannot fit"},
    {"string_array_count_cannot_fit", patched(layout().kvs[2].value + 4, uint64_t{1} << 20), CELLM_ERR_CORRUPT,
     "array of 1048576 string elements cannot fit"},
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

TEST(GgufLimits, StringAtTheLimitOpens) {
    Writer w = small_model();
    w.add("tokenizer.chat_template", std::string(file_limits::max_string_bytes, 'x'));
    const OpenOutcome outcome = try_open(write_temp_file("long_string.gguf", w.to_bytes()));
    EXPECT_EQ(outcome.code, CELLM_OK) << outcome.message;
}

// `bytes` written, then the file extended to `size` without writing (a sparse file: no disk space). Returns
// an empty path when the file system refuses such a size.
std::string sparse_file(const std::string& name, const std::vector<uint8_t>& bytes, uint64_t size) {
    const std::string path = write_temp_file(name, bytes);
    std::error_code ec;
    std::filesystem::resize_file(path, size, ec);
    if (ec) {
        std::filesystem::remove(path, ec);
        return {};
    }
    return path;
}

TEST(GgufLimits, FileOverTheModelSizeLimitIsUnsupported) {
    const std::string path = sparse_file("huge.gguf", bytes(), file_limits::max_model_bytes + 1);
    if (path.empty()) GTEST_SKIP() << "the file system cannot hold a sparse file of 4 TiB";
    const OpenOutcome outcome = try_open(path);
    std::filesystem::remove(path);
    EXPECT_EQ(outcome.code, CELLM_ERR_UNSUPPORTED) << outcome.message;
    EXPECT_EQ(outcome.message.rfind(path + ": ", 0), 0u) << outcome.message;
    EXPECT_NE(outcome.message.find("file size 4398046511105 exceeds the limit of 4398046511104 bytes"),
              std::string::npos)
        << outcome.message;
}

// Two F32 tensors that share their bytes, each half the model size limit plus `extra_elements` floats.
OpenOutcome open_aliased_tensors(const std::string& name, int64_t extra_elements) {
    const int64_t elements = static_cast<int64_t>(file_limits::max_model_bytes / 8) + extra_elements;  // F32
    Writer w;
    w.add_tensor("a", CELLM_TYPE_F32, {elements}, {});  // no data written: both start at offset 0
    w.add_tensor("b", CELLM_TYPE_F32, {elements}, {});
    const std::string path = sparse_file(name, w.to_bytes(), w.layout().data_start + static_cast<uint64_t>(elements) * 4);
    if (path.empty()) return {CELLM_ERR_IO, "sparse file refused"};
    const OpenOutcome outcome = try_open(path);
    std::filesystem::remove(path);
    return outcome;
}

TEST(GgufLimits, TensorDataOverTheModelSizeLimitIsUnsupported) {
    const OpenOutcome over = open_aliased_tensors("aliased_over.gguf", 8);
    if (over.message == "sparse file refused") GTEST_SKIP() << "the file system cannot hold a sparse file of 2 TiB";
    EXPECT_EQ(over.code, CELLM_ERR_UNSUPPORTED) << over.message;
    EXPECT_NE(over.message.find("with tensor 'b', total tensor data size 4398046511168 exceeds the limit of "
                                "4398046511104 bytes"),
              std::string::npos)
        << over.message;
    // Exactly at the limit: opens.
    const OpenOutcome at = open_aliased_tensors("aliased_at.gguf", 0);
    EXPECT_EQ(at.code, CELLM_OK) << at.message;
}

// The host checks the vocabulary itself, for a view from a plugin that does not apply the limits.
TEST(HostTokenizerLimits, VocabularyOverTheLimitIsAnError) {
    const cellm_string_ref piece{"a", 1};
    cellm_meta_kv meta[2]{};
    meta[0].key = {"tokenizer.ggml.model", 20};
    meta[0].value.type = CELLM_VALUE_STRING;
    meta[0].value.v.str = {"gpt2", 4};
    meta[1].key = {"tokenizer.ggml.tokens", 21};
    meta[1].value.type = CELLM_VALUE_ARRAY;
    // Only the count is read before the limit rejects it; the elements are never touched.
    meta[1].value.v.arr = {CELLM_VALUE_STRING, file_limits::max_vocab + 1, &piece};
    cellm_model_view view{};
    view.struct_size = sizeof(view);
    view.n_meta = 2;
    view.meta = meta;
    try {
        Tokenizer::from_model(view);
        ADD_FAILURE() << "built a tokenizer with a vocabulary over the limit";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.tokens: vocabulary size 4194305 exceeds the limit of 4194304"),
                  std::string::npos)
            << e.what();
    }
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
