// Broken model folders: each case yields one clear status (the expected code, a message naming the file and
// what is wrong), never a crash; a shard cut at every length fails cleanly.
#include "hf_folder_writer.h"
#include "open_outcome.h"
#include "test_support.h"

#include "plugin/host_api.h"
#include "../../plugins/formats/limits.h"

#include <cellm/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

namespace fs = std::filesystem;
using nlohmann::json;

namespace cellm::testing {
namespace {


const json config = {{"model_type", "llama"},   {"hidden_size", 8},           {"num_hidden_layers", 1},
                     {"intermediate_size", 16}, {"num_attention_heads", 2},   {"num_key_value_heads", 1},
                     {"max_position_embeddings", 32}, {"vocab_size", 4}, {"rms_norm_eps", 1e-5}};

StTensor norm(const std::string& name = "model.norm.weight") { return {name, "F32", {8}, std::vector<uint8_t>(32, 0)}; }

// A shard whose header is `header` verbatim, followed by `data_bytes` zero bytes.
std::vector<uint8_t> raw_shard(const std::string& header, size_t data_bytes) {
    const uint64_t len = header.size();
    std::vector<uint8_t> out(8 + header.size() + data_bytes);
    std::memcpy(out.data(), &len, 8);
    std::memcpy(out.data() + 8, header.data(), header.size());
    return out;
}

// A fresh folder with config.json and a one-tensor model.safetensors, then `change` applied.
fs::path folder(const std::string& name, const std::function<void(const fs::path&)>& change) {
    const fs::path dir = temp_dir() / ("corrupt-" + name);
    fs::create_directories(dir);
    write_json(dir / "config.json", config);
    write_bytes(dir / "model.safetensors", safetensors_bytes({norm()}));
    change(dir);
    return dir;
}

struct Corruption {
    const char* name;
    std::function<void(const fs::path&)> change;
    cellm_status_code code;
    const char* file;     // expected in the message: the file at fault
    const char* message;  // expected substring
};

void shard(const fs::path& dir, const std::vector<uint8_t>& bytes) { write_bytes(dir / "model.safetensors", bytes); }

void two_shards(const fs::path& dir, const json& weight_map, const std::vector<StTensor>& a, const std::vector<StTensor>& b) {
    fs::remove(dir / "model.safetensors");
    write_bytes(dir / "a.safetensors", safetensors_bytes(a));
    write_bytes(dir / "b.safetensors", safetensors_bytes(b));
    write_json(dir / "model.safetensors.index.json", {{"weight_map", weight_map}});
}

// A header naming `count` tensors ("t0": 0, ...): the count limit rejects it as the names are read, before any
// entry is looked at.
std::string header_with_tensors(uint64_t count) {
    std::string header = "{";
    for (uint64_t i = 0; i < count; ++i) header += (i == 0 ? "\"t" : ",\"t") + std::to_string(i) + "\":0";
    return header + "}";
}

// tokenizer.json with a GPT-2 byte-level pre-tokenizer, `vocab` and `merges`.
json tokenizer(const json& vocab, const json& merges = json::array()) {
    return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}, {"pre_tokenizer", {{"type", "ByteLevel"}}}};
}

const std::string over_string(file_limits::max_string_bytes + 1, 'x');

const Corruption corruptions[] = {
    {"missing_config", [](const fs::path& d) { fs::remove(d / "config.json"); }, CELLM_ERR_NOT_FOUND, "config.json",
     "missing"},
    {"config_bad_json", [](const fs::path& d) { write_bytes(d / "config.json", {'{', '"'}); }, CELLM_ERR_CORRUPT,
     "config.json", "not valid JSON"},
    {"config_number_overflow", [](const fs::path& d) {
         const std::string text = R"({"model_type": "llama", "hidden_size": 1e605})";
         write_bytes(d / "config.json", std::vector<uint8_t>(text.begin(), text.end()));
     }, CELLM_ERR_CORRUPT, "config.json", "not valid JSON"},
    {"config_missing_key", [](const fs::path& d) { json c = config; c.erase("hidden_size"); write_json(d / "config.json", c); },
     CELLM_ERR_NOT_FOUND, "config.json", "missing 'hidden_size'"},
    {"unsupported_model_type", [](const fs::path& d) { json c = config; c["model_type"] = "mamba"; write_json(d / "config.json", c); },
     CELLM_ERR_UNSUPPORTED, "config.json", "model_type \"mamba\" is not supported"},
    {"no_weights", [](const fs::path& d) { fs::remove(d / "model.safetensors"); }, CELLM_ERR_NOT_FOUND, "corrupt-no_weights",
     "has no weights (model.safetensors, pytorch_model.bin, an index of their shards, or one .pt file)"},
    {"truncated_header_length", [](const fs::path& d) { shard(d, {1, 0, 0}); }, CELLM_ERR_CORRUPT, "model.safetensors",
     "truncated: the 8-byte header length"},
    {"header_length_beyond_file", [](const fs::path& d) {
         std::vector<uint8_t> b = safetensors_bytes({norm()});
         const uint64_t len = uint64_t{1} << 40;
         std::memcpy(b.data(), &len, 8);
         shard(d, b);
     }, CELLM_ERR_CORRUPT, "model.safetensors", "header length 1099511627776 runs past the end of the file"},
    {"header_bad_json", [](const fs::path& d) { shard(d, raw_shard("{\"model.norm.weight\": {", 32)); }, CELLM_ERR_CORRUPT,
     "model.safetensors", "header is not valid JSON"},
    // Found by fuzz/fuzz_safetensors: a number beyond double's range made nlohmann::json throw out_of_range
    // (not parse_error), which escaped as CELLM_ERR_INTERNAL.
    {"header_number_overflow", [](const fs::path& d) {
         shard(d, raw_shard(R"({"model.norm.weight": {"dtype": "F32", "shape": [1e605], "data_offsets": [0, 32]}})", 32));
     }, CELLM_ERR_CORRUPT, "model.safetensors", "header is not valid JSON"},
    {"header_not_object", [](const fs::path& d) { shard(d, raw_shard("[1, 2]", 0)); }, CELLM_ERR_CORRUPT,
     "model.safetensors", "header is not a JSON object"},
    {"tensor_entry_malformed", [](const fs::path& d) { shard(d, raw_shard("{\"model.norm.weight\": {\"dtype\": \"F32\"}}", 32)); },
     CELLM_ERR_CORRUPT, "model.safetensors", "needs a string dtype, a shape array and two data_offsets"},
    {"offsets_out_of_bounds", [](const fs::path& d) {
         shard(d, raw_shard(R"({"model.norm.weight": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}})", 16));
     }, CELLM_ERR_CORRUPT, "model.safetensors", "data_offsets [0, 32) lie outside the 16 data bytes"},
    {"offsets_far_out_of_bounds", [](const fs::path& d) {
         shard(d, raw_shard(R"({"model.norm.weight": {"dtype": "F32", "shape": [8], "data_offsets": [18446744073709551584, 0]}})", 32));
     }, CELLM_ERR_CORRUPT, "model.safetensors", "lie outside"},
    {"offsets_negative", [](const fs::path& d) {
         shard(d, raw_shard(R"({"model.norm.weight": {"dtype": "F32", "shape": [8], "data_offsets": [-8, 24]}})", 32));
     }, CELLM_ERR_CORRUPT, "model.safetensors", "data_offsets[0] is not a non-negative integer"},
    {"shape_does_not_match_size", [](const fs::path& d) {
         shard(d, raw_shard(R"({"model.norm.weight": {"dtype": "F32", "shape": [4], "data_offsets": [0, 32]}})", 32));
     }, CELLM_ERR_CORRUPT, "model.safetensors", "data_offsets span 32 bytes, its shape and dtype need 16"},
    {"shape_empty_dimension", [](const fs::path& d) {
         shard(d, raw_shard(R"({"model.norm.weight": {"dtype": "F32", "shape": [8, 0], "data_offsets": [0, 0]}})", 0));
     }, CELLM_ERR_CORRUPT, "model.safetensors", "empty or implausibly large shape"},
    {"unknown_dtype", [](const fs::path& d) { shard(d, safetensors_bytes({{"model.norm.weight", "F8_E4M3", {8}, std::vector<uint8_t>(8)}})); },
     CELLM_ERR_UNSUPPORTED, "model.safetensors", "dtype 'F8_E4M3' (supported: F32, F16, BF16, U32)"},
    {"duplicate_tensor_in_header", [](const fs::path& d) {
         shard(d, raw_shard(R"({"model.norm.weight": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]},)"
                            R"( "model.norm.weight": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}})", 32));
     }, CELLM_ERR_CORRUPT, "model.safetensors", "duplicate tensor 'model.norm.weight' in the header"},
    {"duplicate_tensor_across_shards", [](const fs::path& d) {
         two_shards(d, {{"model.norm.weight", "a.safetensors"}, {"lm_head.weight", "b.safetensors"}}, {norm()},
                    {norm(), norm("lm_head.weight")});
     }, CELLM_ERR_CORRUPT, "corrupt-duplicate_tensor_across_shards", "duplicate tensor 'model.norm.weight' in a.safetensors and b.safetensors"},
    {"missing_shard", [](const fs::path& d) {
         two_shards(d, {{"model.norm.weight", "a.safetensors"}, {"lm_head.weight", "c.safetensors"}}, {norm()}, {});
     }, CELLM_ERR_NOT_FOUND, "c.safetensors", "missing (a shard model.safetensors.index.json names)"},
    {"shard_outside_folder", [](const fs::path& d) {
         two_shards(d, {{"model.norm.weight", "../a.safetensors"}}, {norm()}, {});
     }, CELLM_ERR_CORRUPT, "model.safetensors.index.json", "shard name '../a.safetensors' is not a file in the folder"},
    {"index_names_absent_tensor", [](const fs::path& d) {
         two_shards(d, {{"model.norm.weight", "a.safetensors"}, {"lm_head.weight", "b.safetensors"}}, {norm()}, {});
     }, CELLM_ERR_CORRUPT, "model.safetensors.index.json", "tensor 'lm_head.weight' is not in b.safetensors"},
    {"index_bad_json", [](const fs::path& d) { write_bytes(d / "model.safetensors.index.json", {'{'}); }, CELLM_ERR_CORRUPT,
     "model.safetensors.index.json", "not valid JSON"},
    {"unknown_tensor_name", [](const fs::path& d) { shard(d, safetensors_bytes({norm("vision_tower.patch.weight")})); },
     CELLM_ERR_UNSUPPORTED, "model.safetensors", "tensor 'vision_tower.patch.weight' has no counterpart"},
    {"q_rows_not_whole_heads", [](const fs::path& d) {
         shard(d, safetensors_bytes({{"model.layers.0.self_attn.q_proj.weight", "F32", {6, 8}, std::vector<uint8_t>(192)}}));
     }, CELLM_ERR_CORRUPT, "model.safetensors", "has 6 rows, not a multiple of 2 x 2 heads"},
    // Llama's Q/K get a rewritten copy each, in an area sized by the shards: Q and K sharing bytes overran it,
    // which failed as CELLM_ERR_INTERNAL.
    {"q_and_k_share_bytes", [](const fs::path& d) {
         shard(d, raw_shard(R"({"model.layers.0.self_attn.q_proj.weight": {"dtype": "F32", "shape": [1024, 8], "data_offsets": [0, 32768]},)"
                            R"( "model.layers.0.self_attn.k_proj.weight": {"dtype": "F32", "shape": [1024, 8], "data_offsets": [16384, 49152]}})",
                            49152));
     }, CELLM_ERR_CORRUPT, "model.safetensors",
     "tensor 'model.layers.0.self_attn.q_proj.weight' shares bytes with 'model.layers.0.self_attn.k_proj.weight'"},
    // BF16 tensors get a widened copy each, in the same area: aliased ones are refused too.
    {"bf16_tensors_share_bytes", [](const fs::path& d) {
         shard(d, raw_shard(R"({"lm_head.weight": {"dtype": "BF16", "shape": [2, 8], "data_offsets": [0, 32]},)"
                            R"( "model.norm.weight": {"dtype": "BF16", "shape": [8], "data_offsets": [16, 32]}})",
                            32));
     }, CELLM_ERR_CORRUPT, "model.safetensors", "tensor 'model.norm.weight' shares bytes with 'lm_head.weight'"},
    {"tokenizer_bad_json", [](const fs::path& d) { write_bytes(d / "tokenizer.json", {'['}); }, CELLM_ERR_CORRUPT,
     "tokenizer.json", "not valid JSON"},
    {"tokenizer_number_overflow", [](const fs::path& d) {
         const std::string text = R"({"model": {"type": "BPE", "vocab": {"a": -1e605}}})";
         write_bytes(d / "tokenizer.json", std::vector<uint8_t>(text.begin(), text.end()));
     }, CELLM_ERR_CORRUPT, "tokenizer.json", "not valid JSON"},
    {"tokenizer_not_bpe", [](const fs::path& d) { write_json(d / "tokenizer.json", {{"model", {{"type", "Unigram"}}}}); },
     CELLM_ERR_UNSUPPORTED, "tokenizer.json", "model.type \"Unigram\" is not supported"},
    // The limits of formats/limits.h, one past each.
    {"tensor_count_over_limit", [](const fs::path& d) { shard(d, raw_shard(header_with_tensors(file_limits::max_tensors + 1), 0)); },
     CELLM_ERR_CORRUPT, "model.safetensors", "tensor count 1048577 exceeds the limit of 1048576"},
    {"tensor_name_over_limit", [](const fs::path& d) { shard(d, raw_shard("{\"" + over_string + "\": 0}", 0)); },
     CELLM_ERR_CORRUPT, "model.safetensors", "tensor name length 1048577 exceeds the limit of 1048576 bytes"},
    {"vocabulary_over_limit", [](const fs::path& d) { write_json(d / "tokenizer.json", tokenizer({{"a", file_limits::max_vocab}})); },
     CELLM_ERR_CORRUPT, "tokenizer.json", "vocabulary size 4194305 exceeds the limit of 4194304 (token 'a' has id 4194304)"},
    {"token_length_over_limit", [](const fs::path& d) { write_json(d / "tokenizer.json", tokenizer({{over_string, 0}})); },
     CELLM_ERR_CORRUPT, "tokenizer.json", "token length 1048577 exceeds the limit of 1048576 bytes (token id 0)"},
    {"merge_length_over_limit", [](const fs::path& d) {
         write_json(d / "tokenizer.json", tokenizer({{"a", 0}}, {"a " + over_string.substr(2)}));
     }, CELLM_ERR_CORRUPT, "tokenizer.json", "model.merges entry 0 length 1048577 exceeds the limit of 1048576 bytes"},
    {"chat_template_over_limit", [](const fs::path& d) {
         write_json(d / "tokenizer.json", tokenizer({{"a", 0}}));
         write_json(d / "tokenizer_config.json", {{"chat_template", over_string}});
     }, CELLM_ERR_CORRUPT, "tokenizer_config.json", "chat_template length 1048577 exceeds the limit of 1048576 bytes"},
    {"chat_template_file_over_limit", [](const fs::path& d) {
         write_json(d / "tokenizer.json", tokenizer({{"a", 0}}));
         write_bytes(d / "chat_template.jinja", std::vector<uint8_t>(file_limits::max_string_bytes + 1, 'x'));
     }, CELLM_ERR_CORRUPT, "chat_template.jinja", "chat template length exceeds the limit of 1048576 bytes"},
    {"tokenizer_unknown_pre", [](const fs::path& d) {
         write_json(d / "tokenizer.json", {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}}}, {"pre_tokenizer", {{"type", "Whitespace"}}}});
     }, CELLM_ERR_UNSUPPORTED, "tokenizer.json", "pre_tokenizer is not one cellm recognises"},
};

class CorruptFolder : public ::testing::TestWithParam<Corruption> {};

TEST_P(CorruptFolder, FailsWithAClearStatus) {
    const Corruption& c = GetParam();
    const Outcome outcome = try_open(folder(c.name, c.change));
    EXPECT_EQ(outcome.code, c.code) << outcome.message;
    EXPECT_NE(outcome.message.find(c.file), std::string::npos) << outcome.message;
    EXPECT_NE(outcome.message.find(c.message), std::string::npos) << outcome.message;
}

INSTANTIATE_TEST_SUITE_P(Cases, CorruptFolder, ::testing::ValuesIn(corruptions),
                         [](const ::testing::TestParamInfo<Corruption>& p) { return std::string(p.param.name); });

TEST(CorruptFolder, ValidFolderOpens) {
    const Outcome outcome = try_open(folder("valid", [](const fs::path&) {}));
    EXPECT_EQ(outcome.code, CELLM_OK) << outcome.message;
}

// Just under the limits: the same files open.
TEST(CorruptFolder, AtTheLimitsOpens) {
    const Outcome outcome = try_open(folder("at_limits", [](const fs::path& d) {
        const std::string longest(file_limits::max_string_bytes, 'x');
        write_json(d / "tokenizer.json", tokenizer({{"a", 0}, {longest, 1}}, {"a " + longest.substr(2)}));
        write_bytes(d / "chat_template.jinja", std::vector<uint8_t>(longest.begin(), longest.end()));
    }));
    EXPECT_EQ(outcome.code, CELLM_OK) << outcome.message;
}

// A shard of `size` bytes: `bytes`, then a hole (a sparse file: no disk space). False when the file system
// refuses such a size.
bool sparse_shard(const fs::path& dir, const std::vector<uint8_t>& bytes, uint64_t size) {
    shard(dir, bytes);
    std::error_code ec;
    fs::resize_file(dir / "model.safetensors", size, ec);
    return !ec;
}

TEST(CorruptFolder, ShardsOverTheModelSizeLimitAreUnsupported) {
    const fs::path dir = folder("huge_shard", [](const fs::path&) {});
    if (!sparse_shard(dir, safetensors_bytes({norm()}), file_limits::max_model_bytes + 1)) {
        GTEST_SKIP() << "the file system cannot hold a sparse file of 4 TiB";
    }
    const Outcome outcome = try_open(dir);
    fs::remove(dir / "model.safetensors");
    EXPECT_EQ(outcome.code, CELLM_ERR_UNSUPPORTED) << outcome.message;
    EXPECT_NE(outcome.message.find("model.safetensors: total size of the shards 4398046511105 exceeds the limit of "
                                   "4398046511104 bytes"),
              std::string::npos)
        << outcome.message;
}

// Two F32 tensors that share their bytes, each half the model size limit plus `extra_elements` floats.
Outcome open_aliased_tensors(const std::string& name, uint64_t extra_elements) {
    const uint64_t elements = file_limits::max_model_bytes / 8 + extra_elements;
    const std::string entry = R"({"dtype": "F32", "shape": [)" + std::to_string(elements) + R"(], "data_offsets": [0, )" +
                              std::to_string(elements * 4) + "]}";
    const std::string header = R"({"lm_head.weight": )" + entry + R"(, "model.norm.weight": )" + entry + "}";
    const fs::path dir = folder(name, [](const fs::path& d) {
        json c = config;
        c["model_type"] = "qwen2";  // Llama's Q/K rewrite would reserve room for a copy of the shard
        write_json(d / "config.json", c);
    });
    if (!sparse_shard(dir, raw_shard(header, 0), 8 + header.size() + elements * 4)) return {CELLM_ERR_IO, "sparse file refused"};
    const Outcome outcome = try_open(dir);
    fs::remove(dir / "model.safetensors");
    return outcome;
}

TEST(CorruptFolder, TensorDataOverTheModelSizeLimitIsUnsupported) {
    const Outcome over = open_aliased_tensors("aliased_over", 8);
    if (over.message == "sparse file refused") GTEST_SKIP() << "the file system cannot hold a sparse file of 2 TiB";
    EXPECT_EQ(over.code, CELLM_ERR_UNSUPPORTED) << over.message;
    EXPECT_NE(over.message.find("model.safetensors: with tensor 'model.norm.weight', total tensor data size "
                                "4398046511168 exceeds the limit of 4398046511104 bytes"),
              std::string::npos)
        << over.message;
    const Outcome at = open_aliased_tensors("aliased_at", 0);
    EXPECT_EQ(at.code, CELLM_OK) << at.message;
}

TEST(CorruptFolder, EveryTruncationFails) {
    const std::vector<uint8_t> whole =
        safetensors_bytes({norm(), {"model.layers.0.self_attn.q_proj.weight", "BF16", {4, 8}, std::vector<uint8_t>(64, 1)}});
    const fs::path dir = folder("truncated", [](const fs::path&) {});
    for (size_t n = 0; n < whole.size(); ++n) {
        shard(dir, std::vector<uint8_t>(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(n)));
        const Outcome outcome = try_open(dir);
        EXPECT_EQ(outcome.code, CELLM_ERR_CORRUPT) << "length " << n << ": " << outcome.message;
    }
    shard(dir, whole);
    EXPECT_EQ(try_open(dir).code, CELLM_OK);
}

}  // namespace
}  // namespace cellm::testing
