// Broken .cellm files: each corruption fails with one clear message, through the host API and through
// `cellm-host inspect` (exit code 1, one error line); truncation at every length fails cleanly.
#include "test_support.h"

#include "model/cellm_writer.h"
#include "error.h"
#include "gguf_writer.h"
#include "plugin/host_api.h"
#include "../../plugins/formats/limits.h"

#include <cellm/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>

namespace fs = std::filesystem;

namespace cellm::testing {
namespace {

// Header field offsets (docs/format.md).
constexpr uint64_t h_magic = 0, h_major = 8, h_header_size = 16, h_alignment = 20, h_n_meta = 24,
                   h_meta_size = 40, h_n_tensors = 48, h_table_offset = 56, h_data_offset = 72, h_file_size = 88;

// A small valid model: strings, arrays of strings and numbers, and two tensors ("norm" F32 [64], then
// "proj" Q8_0 [32, 2]), converted from GGUF through the host's own writer. Metadata entries: 0
// general.architecture, 1 llama.block_count, 2 tokenizer.ggml.tokens, 3 tokenizer.ggml.token_type, 4 scale,
// 5 tokenizer.ggml.merges.
struct Sample {
    std::vector<uint8_t> bytes;
    CellmLayout layout;
};

const Sample& sample() {
    static const Sample s = [] {
        gguf::Writer w;
        w.add("general.architecture", "llama");
        w.add("llama.block_count", uint32_t{1});
        w.add_array("tokenizer.ggml.tokens", std::vector<std::string>{"a", "b", "c"});
        w.add_array("tokenizer.ggml.token_type", std::vector<int32_t>{1, 1, 3});
        w.add("scale", 0.5f);
        w.add_array("tokenizer.ggml.merges", std::vector<std::string>{"a b"});
        w.add_tensor("norm", CELLM_TYPE_F32, {64}, std::vector<uint8_t>(256, 0));
        w.add_tensor("proj", CELLM_TYPE_Q8_0, {32, 2}, std::vector<uint8_t>(68, 1));
        const fs::path gguf = temp_dir() / "corrupt-source.gguf";
        w.write(gguf.string());
        auto file = ModelFile::open(registry(), gguf);
        std::vector<std::string> skipped;
        const fs::path cellm = temp_dir() / "corrupt-source.cellm";
        Sample out;
        out.layout = CellmWriter::from_view(file->view(), skipped).write(cellm);
        std::ifstream in(cellm, std::ios::binary);
        out.bytes.assign(std::istreambuf_iterator<char>(in), {});
        return out;
    }();
    return s;
}

// Offset of a field of tensor entry `i` (name length 4: both sample names have four letters; n_dims from
// the sample: 1 for "norm", 2 for "proj").
uint64_t tensor_field(size_t i, const char* field) {
    const uint64_t type = sample().layout.tensor_entries[i] + 8 + 4;
    const uint64_t ne = type + 8;
    const uint64_t n_dims = i == 0 ? 1 : 2;
    if (std::strcmp(field, "type") == 0) return type;
    if (std::strcmp(field, "n_dims") == 0) return type + 4;
    if (std::strcmp(field, "ne") == 0) return ne;
    if (std::strcmp(field, "offset") == 0) return ne + 8 * n_dims;
    return ne + 8 * n_dims + 8;  // size
}

fs::path write_bytes(const std::string& name, const std::vector<uint8_t>& bytes) {
    const fs::path path = temp_dir() / (name + ".cellm");
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return path;
}

template <class T>
std::function<std::vector<uint8_t>()> patched(std::function<uint64_t()> offset, T value) {
    return [=] {
        std::vector<uint8_t> b = sample().bytes;
        std::memcpy(b.data() + offset(), &value, sizeof(T));
        return b;
    };
}
template <class T>
std::function<std::vector<uint8_t>()> patched(uint64_t offset, T value) {
    return patched<T>([=] { return offset; }, value);
}
// The element count of the array in metadata entry `i`, whose key is 21 bytes long (tokenizer.ggml.tokens,
// tokenizer.ggml.merges): key length, key, value type, element type.
std::function<uint64_t()> array_count(size_t i) {
    return [=] { return sample().layout.meta_entries[i] + 8 + 21 + 4 + 4; };
}
std::function<std::vector<uint8_t>()> truncated(uint64_t keep) {
    return [=] { return std::vector<uint8_t>(sample().bytes.begin(), sample().bytes.begin() + static_cast<long>(keep)); };
}

struct Corruption {
    const char* name;
    std::function<std::vector<uint8_t>()> make;
    const char* message;  // expected in the host's error and in cellm-host's error line
};

const Corruption corruptions[] = {
    // No format plugin claims a file without the magic; naming the format shows the plugin's own message
    // (BadMagicNamedFormat below).
    {"bad_magic", patched(h_magic, uint32_t{0x21212121}), "no format plugin recognises this file"},
    {"unsupported_version", patched(h_major, uint32_t{2}), "unsupported .cellm version 2.0 (this reader implements 1.x)"},
    {"truncated_header", truncated(40), "truncated: metadata size of the header needs 8 bytes at offset 40"},
    {"truncated_data", [] {
         auto b = sample().bytes;
         b.resize(b.size() - 10);
         return b;
     }, "(truncated)"},
    {"header_size_too_small", patched(h_header_size, uint32_t{64}), "header size 64 is smaller than the 96 bytes"},
    {"alignment_not_power_of_two", patched(h_alignment, uint32_t{48}), "alignment 48 is not a power of two"},
    {"metadata_past_end", patched(h_meta_size, uint64_t{1} << 40), "metadata (offset 96, 1099511627776 bytes) runs past the end"},
    {"sections_overlap", patched(h_table_offset, uint64_t{96}), "tensor table offset 96 overlaps what precedes it"},
    {"data_overlaps_tensor_table", patched(h_data_offset, uint64_t{0}), "data section offset 0 overlaps what precedes it"},
    {"bad_metadata_count", patched(h_n_meta, uint64_t{1} << 60),
     "metadata count 1152921504606846976 exceeds the limit of 1048576"},
    {"bad_tensor_count", patched(h_n_tensors, uint64_t{1} << 58), "tensor count 288230376151711744 exceeds the limit of 1048576"},
    // Each limit of formats/limits.h, one past it and (where the file cannot hold that much) at it, where
    // the section-size check takes over.
    {"metadata_count_over_limit", patched(h_n_meta, file_limits::max_metadata_entries + 1),
     "metadata count 1048577 exceeds the limit of 1048576"},
    {"metadata_count_at_limit", patched(h_n_meta, file_limits::max_metadata_entries), "metadata count 1048576 cannot fit"},
    {"tensor_count_over_limit", patched(h_n_tensors, file_limits::max_tensors + 1),
     "tensor count 1048577 exceeds the limit of 1048576"},
    {"tensor_count_at_limit", patched(h_n_tensors, file_limits::max_tensors), "tensor count 1048576 cannot fit"},
    {"metadata_count_short", patched(h_n_meta, uint64_t{4}), "metadata entries take"},
    {"key_length_over_limit", patched([] { return sample().layout.meta_entries[1]; }, file_limits::max_string_bytes + 1),
     "key of metadata entry 1: string length 1048577 exceeds the limit of 1048576 bytes"},
    {"key_length_past_end", patched([] { return sample().layout.meta_entries[1]; }, file_limits::max_string_bytes),
     "truncated: key of metadata entry 1"},
    {"string_length_over_limit", patched([] { return sample().layout.meta_entries[0] + 8 + 20 + 4; }, uint64_t{1} << 62),
     "string value of metadata entry 0 'general.architecture': string length 4611686018427387904 exceeds the limit"},
    {"string_length_past_end",
     patched([] { return sample().layout.meta_entries[0] + 8 + 20 + 4; }, file_limits::max_string_bytes),
     "truncated: string value of metadata entry 0 'general.architecture'"},
    {"token_length_over_limit", patched([] { return array_count(2)() + 8; }, file_limits::max_string_bytes + 1),
     "array string of metadata entry 2 'tokenizer.ggml.tokens': string length 1048577 exceeds the limit of 1048576"},
    {"tensor_name_over_limit", patched([] { return sample().layout.tensor_entries[0]; }, file_limits::max_string_bytes + 1),
     "name of tensor entry 0: string length 1048577 exceeds the limit of 1048576 bytes"},
    {"array_length_over_limit", patched(array_count(5), file_limits::max_array_elements + 1),
     "'tokenizer.ggml.merges': array length 16777217 exceeds the limit of 16777216"},
    {"array_length_at_limit", patched(array_count(5), file_limits::max_array_elements),
     "array of 16777216 string elements cannot fit"},
    {"vocabulary_over_limit", patched(array_count(2), file_limits::max_vocab + 1),
     "'tokenizer.ggml.tokens': vocabulary size 4194305 exceeds the limit of 4194304"},
    {"vocabulary_at_limit", patched(array_count(2), file_limits::max_vocab), "array of 4194304 string elements cannot fit"},
    {"unknown_value_type", patched([] { return sample().layout.meta_entries[1] + 8 + 17; }, uint32_t{99}),
     "'llama.block_count' has unknown value type 99"},
    {"unknown_tensor_type", patched([] { return tensor_field(1, "type"); }, uint32_t{77}),
     "tensor 'proj' has unknown type 77"},
    {"bad_dimension_count", patched([] { return tensor_field(0, "n_dims"); }, uint32_t{5}),
     "tensor 'norm' has 5 dimensions (must be 1..4)"},
    {"size_does_not_match_shape", patched([] { return tensor_field(0, "size"); }, uint64_t{252}),
     "tensor 'norm' is stored as 252 bytes but its type and shape need 256"},
    {"tensor_offset_out_of_bounds", patched([] { return tensor_field(1, "offset"); }, uint64_t{1} << 20),
     "tensor 'proj' data (offset 1048576, 68 bytes) runs past the end of the 384-byte data section"},
    {"tensor_offset_misaligned", patched([] { return tensor_field(1, "offset"); }, uint64_t{264}),
     "tensor 'proj' data offset 264 is not a multiple of the alignment 64"},
    {"tensors_overlap", patched([] { return tensor_field(1, "offset"); }, uint64_t{192}),
     "tensor 'norm' and tensor 'proj' overlap in the data section"},
};

class CorruptCellm : public ::testing::TestWithParam<Corruption> {};

TEST_P(CorruptCellm, HostApiAndInspectGiveOneClearError) {
    const Corruption& c = GetParam();
    const fs::path path = write_bytes(c.name, c.make());
    try {
        ModelFile::open(registry(), path);
        ADD_FAILURE() << "opened a corrupt file";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << "names the file: " << e.what();
    }
    const CommandResult r = run_host("inspect " + shell_quote(path.string()));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("cellm-host: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(EveryCase, CorruptCellm, ::testing::ValuesIn(corruptions),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(CorruptCellmFile, BadMagicNamedFormat) {
    const fs::path path = write_bytes("bad_magic_named", patched(h_magic, uint32_t{0x21212121})());
    try {
        ModelFile::open(registry(), path, "cellm");
        ADD_FAILURE() << "opened a file without the magic";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("not a .cellm file"), std::string::npos) << e.what();
    }
}

TEST(CorruptCellmFile, SampleIsValid) {
    auto file = ModelFile::open(registry(), write_bytes("valid", sample().bytes));
    EXPECT_EQ(file->view().n_meta, 6u);
    EXPECT_EQ(file->view().n_tensors, 2u);
}

// Opened through the plugin's C interface, for the status code the host API does not pass on.
std::pair<cellm_status_code, std::string> open_status(const fs::path& path) {
    const Plugin* plugin = registry().find(CELLM_PLUGIN_FORMAT, "cellm");
    if (plugin == nullptr) throw std::runtime_error("the cellm plugin was not built");
    cellm_model_file* file = nullptr;
    cellm_status* status = plugin->format()->open(path.c_str(), &file);
    if (status == nullptr) {
        plugin->format()->close(file);
        return {CELLM_OK, ""};
    }
    std::pair<cellm_status_code, std::string> out{host_api()->status_code(status), host_api()->status_message(status)};
    host_api()->status_free(status);
    return out;
}

TEST(CorruptCellmFile, FileOverTheModelSizeLimitIsUnsupported) {
    // The header states the huge size; the file is extended to it without writing (sparse: no disk space).
    const uint64_t size = file_limits::max_model_bytes + 1;
    const fs::path path = write_bytes("huge", patched(h_file_size, size)());
    std::error_code ec;
    fs::resize_file(path, size, ec);
    if (ec) GTEST_SKIP() << "the file system cannot hold a sparse file of 4 TiB: " << ec.message();
    const auto [code, message] = open_status(path);
    fs::remove(path);
    EXPECT_EQ(code, CELLM_ERR_UNSUPPORTED) << message;
    EXPECT_EQ(message.rfind(path.string() + ": ", 0), 0u) << message;
    EXPECT_NE(message.find("file size 4398046511105 exceeds the limit of 4398046511104 bytes"), std::string::npos)
        << message;
}

TEST(CorruptCellmFile, EveryTruncationFailsCleanly) {
    const std::vector<uint8_t>& bytes = sample().bytes;
    for (size_t keep = 0; keep < bytes.size(); ++keep) {
        const fs::path path = write_bytes("cut", truncated(keep)());
        EXPECT_THROW(ModelFile::open(registry(), path, "cellm"), Error) << keep << " bytes";
    }
}

}  // namespace
}  // namespace cellm::testing
