// A Hugging Face folder converted from a synthetic GGUF model runs exactly like the GGUF file: identical
// logits (bit for bit) for the weight types a folder serves as stored (F32, F16), sharded or not, for llama (Q/K
// permuted on load), qwen2 and qwen3; the same tokenizer; and a folder without tokenizer.json still opens. BF16
// folders are widened to F32 on load, so they equal F32 folders instead of BF16 GGUF files: widen_test.cpp.
#include "hf_folder_writer.h"
#include "test_support.h"

#include "model/model_file.h"
#include "synthetic_model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

namespace fs = std::filesystem;

namespace cellm::testing {
namespace {

fs::path gguf_model(const std::string& preset, cellm_dtype type) {
    const fs::path path = temp_dir() / (preset + "-" + std::string(synthetic::weight_type_name(type)) + ".gguf");
    if (!fs::exists(path)) synthetic::write_model(path.string(), {preset, type, 7});
    return path;
}

std::vector<float> all_logits(const fs::path& model, const std::vector<int32_t>& tokens) {
    EngineOptions options;
    options.context_length = 64;
    Stack s = make_stack(model, "scalar", options);
    const int32_t seq = s.engine->create_sequence();
    std::vector<float> logits;
    const Engine::Work work{seq, tokens, LogitsWanted::All};
    s.engine->step({&work, 1}, logits);
    return logits;
}

struct Case {
    const char* preset;
    cellm_dtype type;
    int shards;
};

class FolderParity : public ::testing::TestWithParam<Case> {};

TEST_P(FolderParity, LogitsEqualTheGgufFileBitForBit) {
    const Case c = GetParam();
    const fs::path gguf = gguf_model(c.preset, c.type);
    const fs::path folder = temp_dir() / (std::string(c.preset) + "-" + std::string(synthetic::weight_type_name(c.type)) +
                                          "-" + std::to_string(c.shards) + "-hf");
    write_hf_folder(gguf, folder, {c.shards, true});

    const std::vector<int32_t> tokens = {1, 17, 42, 99, 3, 250, 7, 64, 128, 5, 11};
    const std::vector<float> expected = all_logits(gguf, tokens);
    const std::vector<float> got = all_logits(folder, tokens);
    ASSERT_EQ(got.size(), expected.size());
    ASSERT_FALSE(expected.empty());
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Models, FolderParity,
                         ::testing::Values(Case{"tiny", CELLM_TYPE_F32, 1}, Case{"tiny", CELLM_TYPE_F16, 1},
                                           Case{"tiny", CELLM_TYPE_F32, 2},
                                           Case{"qwen2-tiny", CELLM_TYPE_F16, 2}, Case{"qwen3-tiny", CELLM_TYPE_F32, 1}),
                         [](const ::testing::TestParamInfo<Case>& p) {
                             std::string name = std::string(p.param.preset) + "_" +
                                                std::string(synthetic::weight_type_name(p.param.type)) + "_" +
                                                std::to_string(p.param.shards) + "shard";
                             for (char& ch : name) ch = ch == '-' ? '_' : ch;
                             return name;
                         });

TEST(FolderTokenizer, MatchesTheGgufTokenizer) {
    const fs::path gguf = gguf_model("tiny", CELLM_TYPE_F32);
    const fs::path folder = temp_dir() / "tokenizer-hf";
    write_hf_folder(gguf, folder, {1, true});
    const auto a = Model::load(registry(), gguf);
    const auto b = Model::load(registry(), folder);
    const Tokenizer& want = a->tokenizer();
    const Tokenizer& got = b->tokenizer();
    const std::string text = "<|im_start|>user\nThe 2024 answer is 42, isn't it?<|im_end|>";
    EXPECT_EQ(got.encode(text, false, true), want.encode(text, false, true));
    EXPECT_EQ(got.bos(), want.bos());
    EXPECT_EQ(got.eos(), want.eos());
    EXPECT_EQ(got.add_bos(), want.add_bos());
    EXPECT_EQ(got.chat_template(), want.chat_template());
    EXPECT_EQ(b->file().get_string("tokenizer.ggml.pre"), "smollm");
}

TEST(FolderTokenizer, Qwen2SplitIsRecognised) {
    const fs::path folder = temp_dir() / "qwen2-tokenizer-hf";
    write_hf_folder(gguf_model("qwen2-tiny", CELLM_TYPE_F16), folder, {1, true});
    EXPECT_EQ(ModelFile::open(registry(), folder)->get_string("tokenizer.ggml.pre"), "qwen2");
}

// Newer exports (tokenizers >= 0.20, some MLX conversions) write merges as pairs, [["a", "b"], ...].
TEST(FolderTokenizer, PairMergesReadLikeStringMerges) {
    const fs::path gguf = gguf_model("tiny", CELLM_TYPE_F32);
    const fs::path folder = temp_dir() / "pair-merges-hf";
    write_hf_folder(gguf, folder, {1, true});
    nlohmann::json tokenizer;
    {
        std::ifstream in(folder / "tokenizer.json");
        tokenizer = nlohmann::json::parse(in);
    }
    auto& merges = tokenizer["model"]["merges"];
    ASSERT_FALSE(merges.empty());
    for (auto& merge : merges) {
        const std::string text = merge.get<std::string>();
        const size_t space = text.find(' ', 1);
        merge = nlohmann::json::array({text.substr(0, space), text.substr(space + 1)});
    }
    write_json(folder / "tokenizer.json", tokenizer);
    const auto a = Model::load(registry(), gguf);
    const auto b = Model::load(registry(), folder);
    const std::string text = "The 2024 answer is 42, isn't it? Yes: merges merge.";
    EXPECT_EQ(b->tokenizer().encode(text, false, false), a->tokenizer().encode(text, false, false));
}

// Qwen 3.5's tokenizer.json splits like Qwen2's but keeps combining marks (\\p{M}) inside words.
TEST(FolderTokenizer, Qwen35SplitIsRecognised) {
    const fs::path folder = temp_dir() / "qwen35-tokenizer-hf";
    write_hf_folder(gguf_model("qwen2-tiny", CELLM_TYPE_F16), folder, {1, true});
    std::string text;
    {
        std::ifstream in(folder / "tokenizer.json");
        text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    for (const auto& [from, to] : {std::pair<std::string, std::string>{"]?\\\\p{L}+|", "]?[\\\\p{L}\\\\p{M}]+|"},
                                   {"[^\\\\s\\\\p{L}\\\\p{N}]+", "[^\\\\s\\\\p{L}\\\\p{M}\\\\p{N}]+"}}) {
        const size_t at = text.find(from);
        ASSERT_NE(at, std::string::npos) << from;
        text.replace(at, from.size(), to);
    }
    std::ofstream(folder / "tokenizer.json") << text;
    EXPECT_EQ(ModelFile::open(registry(), folder)->get_string("tokenizer.ggml.pre"), "qwen35");
}

TEST(FolderTokenizer, FolderWithoutTokenizerOpensWithoutTokenizerKeys) {
    const fs::path folder = temp_dir() / "no-tokenizer-hf";
    write_hf_folder(gguf_model("tiny", CELLM_TYPE_F32), folder, {1, false});
    const auto file = ModelFile::open(registry(), folder);
    EXPECT_EQ(file->format().name(), std::string("safetensors"));
    EXPECT_FALSE(file->get_string("tokenizer.ggml.model").has_value());
    EXPECT_NE(file->tensor("blk.0.attn_q.weight"), nullptr);
    // The host then reports the missing tokenizer as for a GGUF file without one.
    try {
        Model::load(registry(), folder);
        ADD_FAILURE() << "loaded without a tokenizer";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("no tokenizer"), std::string::npos) << e.what();
    }
}

TEST(FolderCli, PluginsListsSafetensors) {
    const CommandResult r = run_host("plugins");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("safetensors"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace cellm::testing
