// The real SmolLM2 vocabulary, opened through the GGUF plugin, against llama.cpp's token ids.
#include "reference_data.h"

#include "tokenize/chat_template.h"
#include "model/model_file.h"
#include "plugin/plugin_registry.h"
#include "tokenize/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace cellm {
namespace {

std::filesystem::path models_dir() {
    if (const char* dir = std::getenv("CELLM_MODELS")) return dir;
    const char* home = std::getenv("HOME");
    return std::filesystem::path(home ? home : "") / ".cache/cellm/models";
}

class SmolLM2 : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        const auto path = models_dir() / test::tokenizer_reference().at("model").get<std::string>();
        if (!std::filesystem::exists(path)) {
            missing_ = path.string() + " is missing: run scripts/fetch_models.sh";
            return;
        }
        registry_ = new PluginRegistry();
        registry_->discover({CELLM_PLUGIN_DIR});
        file_ = ModelFile::open(*registry_, path).release();
        tokenizer_ = Tokenizer::from_model(file_->view()).release();
    }
    static void TearDownTestSuite() {
        delete tokenizer_;
        delete file_;
        delete registry_;
    }
    void SetUp() override {
        if (!missing_.empty()) FAIL() << missing_;
        ASSERT_NE(tokenizer_, nullptr);
    }

    static inline std::string missing_;
    static inline PluginRegistry* registry_ = nullptr;
    static inline ModelFile* file_ = nullptr;
    static inline Tokenizer* tokenizer_ = nullptr;
};

TEST_F(SmolLM2, VocabularyFacts) {
    const auto& facts = test::tokenizer_reference().at("tokenizer");
    EXPECT_EQ(tokenizer_->n_vocab(), facts.at("n_vocab").get<int32_t>());
    EXPECT_EQ(tokenizer_->bos(), facts.at("bos").get<int32_t>());
    EXPECT_EQ(tokenizer_->eos(), facts.at("eos").get<int32_t>());
    EXPECT_EQ(tokenizer_->pre(), facts.at("pre").get<std::string>());
    EXPECT_EQ(tokenizer_->chat_template(), facts.at("chat_template").get<std::string>());
    EXPECT_FALSE(tokenizer_->add_bos());
    EXPECT_TRUE(tokenizer_->is_end_of_generation(tokenizer_->find_token("<|im_end|>")));
    EXPECT_TRUE(tokenizer_->is_end_of_generation(tokenizer_->find_token("<|endoftext|>")));
    EXPECT_FALSE(tokenizer_->is_end_of_generation(tokenizer_->find_token("<|im_start|>")));
}

TEST_F(SmolLM2, EncodesLikeLlamaCpp) {
    for (const auto& entry : test::tokenizer_reference().at("encode")) {
        const auto text = entry.at("text").get<std::string>();
        const bool parse_special = entry.at("parse_special").get<bool>();
        EXPECT_EQ(tokenizer_->encode(text, false, parse_special), entry.at("ids").get<std::vector<int32_t>>())
            << "text: " << text << " (parse_special " << parse_special << ")";
        EXPECT_EQ(tokenizer_->decode(tokenizer_->encode(text, false, parse_special)), text);
    }
}

TEST_F(SmolLM2, TokenBytesLikeLlamaCpp) {
    for (const auto& [id, hex] : test::tokenizer_reference().at("pieces_hex").items()) {
        std::string bytes;
        const auto h = hex.get<std::string>();
        for (size_t i = 0; i + 1 < h.size(); i += 2) bytes += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
        EXPECT_EQ(tokenizer_->token_bytes(std::stoi(id)), bytes) << "token " << id;
    }
}

TEST_F(SmolLM2, ChatPromptsEncodeLikeLlamaCpp) {
    const auto kind = detect_chat_template(tokenizer_->chat_template());
    ASSERT_EQ(kind, ChatTemplateKind::ChatML);
    const auto system = default_system_prompt(tokenizer_->chat_template());
    for (const auto& entry : test::tokenizer_reference().at("chat")) {
        if (!entry.contains("ids")) continue;
        std::vector<ChatMessage> messages;
        for (const auto& m : entry.at("messages")) messages.push_back({m.at("role"), m.at("content")});
        const auto prompt = render_chat(*kind, messages, true, system);
        EXPECT_EQ(prompt, entry.at("rendered").get<std::string>());
        EXPECT_EQ(tokenizer_->encode(prompt, tokenizer_->add_bos(), true), entry.at("ids").get<std::vector<int32_t>>());
    }
}

}  // namespace
}  // namespace cellm
