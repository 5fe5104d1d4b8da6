// llama.cpp's own vocabulary tests (models/ggml-vocab-*.gguf with .inp / .out pairs, as its test-tokenizer-0
// runs them): every test string of every vocabulary tokenized without BOS or special-token parsing, against
// the ids llama.cpp expects, and those ids decoded back to the string. The files come from the llama-cpp-python 0.3.36 source distribution at test time
// (scripts/fetch_llamacpp_source.sh); one test runs them all and reports per vocabulary.
#include "model/model_file.h"
#include "plugin/plugin_registry.h"
#include "tokenize/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace cellm {
namespace {

namespace fs = std::filesystem;

fs::path llamacpp_models() {
    if (const char* dir = std::getenv("CELLM_LLAMACPP_SRC")) return fs::path(dir) / "models";
    const char* cache = std::getenv("CELLM_CACHE");
    const char* home = std::getenv("HOME");
    const fs::path root = cache ? fs::path(cache) : fs::path(home ? home : "") / ".cache/cellm";
    return root / "llamacpp-src/llama_cpp_python-0.3.36/vendor/llama.cpp/models";
}

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct VocabCase {
    std::string text;
    std::vector<int32_t> ids;
};

// The .inp strings split at "\n__ggml_vocab_test__\n" and the .out lines of space-separated ids, read the way
// test-tokenizer-0.cpp reads them.
std::vector<VocabCase> read_cases(const fs::path& vocab) {
    const std::string inp = read_file(vocab.string() + ".inp");
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    for (size_t pos = 0; pos < inp.size();) {
        const size_t next = inp.find(sep, pos);
        if (next == std::string::npos) {
            texts.push_back(inp.substr(pos));
            break;
        }
        texts.push_back(inp.substr(pos, next - pos));
        pos = next + sep.size();
    }
    std::ifstream out(vocab.string() + ".out");
    std::vector<VocabCase> cases;
    size_t i = 0;
    for (std::string line; std::getline(out, line); ++i) {
        if (i >= texts.size()) break;
        VocabCase c{texts[i], {}};
        std::istringstream ids(line);
        for (int32_t id; ids >> id;) c.ids.push_back(id);
        cases.push_back(std::move(c));
    }
    EXPECT_EQ(cases.size(), texts.size()) << vocab << ": .inp and .out hold different numbers of tests";
    return cases;
}

std::string ids_text(const std::vector<int32_t>& ids) {
    std::string out;
    for (const int32_t id : ids) {
        if (!out.empty()) out += ' ';
        out += std::to_string(id);
    }
    return out;
}

// The vocabularies llama.cpp 0.3.36 ships with test strings: each must be found, so a renamed or missing file
// fails here instead of shrinking the test.
const std::vector<std::string> expected_vocabularies = {
    "bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4", "gpt-2", "llama-bpe",
    "llama-spm", "mpt", "phi-3", "qwen2", "qwen35", "refact", "starcoder"};

// Vocabularies cellm refuses on purpose, with the error it must give. WordPiece ("bert") serves BERT embedding
// models, which no cellm arch runs; it would need Unicode NFD and case tables cellm does not carry.
const std::vector<std::pair<std::string, std::string>> refused_vocabularies = {
    {"bert-bge", "tokenizer model 'bert' is not supported yet"}};

TEST(LlamaCppVocabularies, EveryTestStringGivesLlamaCppsIds) {
    const fs::path dir = llamacpp_models();
    if (!fs::is_directory(dir)) FAIL() << dir << " is missing: run scripts/fetch_llamacpp_source.sh";
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        if (name.starts_with("ggml-vocab-") && name.ends_with(".gguf") && fs::exists(entry.path().string() + ".inp")) {
            found.push_back(name.substr(11, name.size() - 16));
        }
    }
    std::sort(found.begin(), found.end());
    for (const auto& name : expected_vocabularies) {
        EXPECT_TRUE(std::find(found.begin(), found.end(), name) != found.end()) << "ggml-vocab-" << name
                                                                                << ".gguf(.inp) not found in " << dir;
    }

    PluginRegistry registry;
    registry.discover({CELLM_PLUGIN_DIR});
    std::ostringstream report;
    for (const auto& name : found) {
        SCOPED_TRACE(testing::Message() << "vocabulary " << name);
        const fs::path vocab = dir / (std::string("ggml-vocab-").append(name).append(".gguf"));
        const auto cases = read_cases(vocab);
        const auto file = ModelFile::open(registry, vocab);
        const auto refused = std::find_if(refused_vocabularies.begin(), refused_vocabularies.end(),
                                          [&](const auto& r) { return r.first == name; });
        std::unique_ptr<Tokenizer> tokenizer;
        try {
            tokenizer = Tokenizer::from_model(file->view());
        } catch (const std::exception& e) {
            if (refused == refused_vocabularies.end()) ADD_FAILURE() << e.what();
            EXPECT_NE(refused == refused_vocabularies.end() ? std::string::npos
                                                            : std::string(e.what()).find(refused->second),
                      std::string::npos)
                << e.what();
            report << "  " << name << ": refused (" << e.what() << ")\n";
            continue;
        }
        EXPECT_EQ(refused, refused_vocabularies.end()) << "loads, but is listed as refused";
        size_t matched = 0, decoded = 0;
        for (const auto& c : cases) {
            const auto got = tokenizer->encode(c.text, false, false);
            if (got == c.ids) {
                ++matched;
            } else {
                ADD_FAILURE() << "text '" << c.text << "'\n  llama.cpp: " << ids_text(c.ids)
                              << "\n  cellm:     " << ids_text(got);
            }
            // llama.cpp's ids decode back to the text (SentencePiece adds the leading space it prefixed).
            const std::string text = tokenizer->decode(c.ids);
            const bool prefixed = tokenizer->model() == "llama" && text.starts_with(' ');
            if ((prefixed ? text.substr(1) : text) == c.text) {
                ++decoded;
            } else {
                ADD_FAILURE() << "llama.cpp's ids of '" << c.text << "' decode to '" << text << "'";
            }
        }
        report << "  " << name << " (" << tokenizer->model() << ", pre '" << tokenizer->pre() << "'): " << matched
               << "/" << cases.size() << " strings match, " << decoded << " decode back to the text\n";
    }
    std::cout << "llama.cpp vocabulary tests (" << dir.string() << "):\n" << report.str();
}

}  // namespace
}  // namespace cellm
