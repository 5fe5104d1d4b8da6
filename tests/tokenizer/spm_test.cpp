// SentencePiece ("llama" tokenizer model): merges by score, the whitespace marker, byte fallback and bad
// metadata on hand-built vocabularies, then the real Gemma 3 vocabulary against llama.cpp's ids.
#include "fake_vocab.h"
#include "reference_data.h"

#include "tokenize/chat_template.h"
#include "error.h"
#include "model/model_file.h"
#include "plugin/plugin_registry.h"
#include "tokenize/prompt.h"
#include "tokenize/tokenizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace cellm {
namespace {

using test::FakeVocab;

const std::string marker = "\xe2\x96\x81";  // U+2581, SentencePiece's space

// <unk> <s> </s>, a control and a user-defined token, the three byte tokens of "€", and a few pieces.
FakeVocab spm_vocab(bool space_prefix = false) {
    FakeVocab v;
    v.model("llama").flag("tokenizer.ggml.add_space_prefix", space_prefix);
    v.token("<unk>", 2).token("<s>", 3).token("</s>", 3).token("<turn>", 3).token("<tool>", 4);
    for (const char* byte : {"<0xE2>", "<0x82>", "<0xAC>"}) v.token(byte, 6);
    for (const char* t : {"a", "b", "c", "h", "i"}) v.token(t, 1, -10.0f);
    v.token(marker, 1, -10.0f).token("ab", 1, -2.0f).token("bc", 1, -1.0f).token("hi", 1, -3.0f);
    v.token(marker + "hi", 1, -4.0f);
    return v;
}

std::vector<int32_t> ids_of(const FakeVocab& v, std::initializer_list<std::string> texts) {
    std::vector<int32_t> ids;
    for (const auto& t : texts) ids.push_back(v.id_of(t));
    return ids;
}

std::string error_of(FakeVocab& v) {
    try {
        Tokenizer::from_model(v.view());
    } catch (const Error& e) {
        return e.what();
    }
    return "no error";
}

TEST(SentencePiece, HighestScoreMergesFirst) {
    auto v = spm_vocab();
    const auto tok = Tokenizer::from_model(v.view());
    EXPECT_EQ(tok->model(), "llama");
    // "bc" (-1) beats "ab" (-2); with "ab" scored higher the other pair wins.
    EXPECT_EQ(tok->encode("abc", false, false), ids_of(v, {"a", "bc"}));
    v.set_score("ab", -0.5f);
    const auto flipped = Tokenizer::from_model(v.view());
    EXPECT_EQ(flipped->encode("abc", false, false), ids_of(v, {"ab", "c"}));
}

TEST(SentencePiece, EqualScoresMergeLeftmostFirst) {
    auto v = spm_vocab();
    v.set_score("ab", -1.0f);
    const auto tok = Tokenizer::from_model(v.view());
    EXPECT_EQ(tok->encode("abc", false, false), ids_of(v, {"ab", "c"}));
}

TEST(SentencePiece, SpacesBecomeTheWhitespaceMarker) {
    auto v = spm_vocab();
    const auto tok = Tokenizer::from_model(v.view());
    const auto ids = tok->encode("a hi", false, false);
    EXPECT_EQ(ids, ids_of(v, {"a", marker + "hi"}));
    EXPECT_EQ(tok->decode(ids), "a hi");
    EXPECT_EQ(tok->token_bytes(v.id_of(marker + "hi")), " hi");
    EXPECT_EQ(tok->token_text(v.id_of(marker + "hi")), marker + "hi");
}

TEST(SentencePiece, SpacePrefixAtTheStartAndAfterSpecialTokens) {
    auto v = spm_vocab(true);
    const auto tok = Tokenizer::from_model(v.view());
    EXPECT_EQ(tok->encode("hi", false, false), ids_of(v, {marker + "hi"}));
    EXPECT_EQ(tok->encode("hi<turn>hi", false, true), ids_of(v, {marker + "hi", "<turn>", marker + "hi"}));
    // Without the key SentencePiece adds the prefix too, as llama.cpp does.
    auto plain = spm_vocab();
    plain.without("tokenizer.ggml.add_space_prefix");
    EXPECT_EQ(Tokenizer::from_model(plain.view())->encode("hi", false, false), ids_of(v, {marker + "hi"}));
}

TEST(SentencePiece, MissingCharactersFallBackToBytesOrUnknown) {
    auto v = spm_vocab();
    const auto tok = Tokenizer::from_model(v.view());
    const auto euro = tok->encode("a\xe2\x82\xac", false, false);  // €: E2 82 AC
    EXPECT_EQ(euro, ids_of(v, {"a", "<0xE2>", "<0x82>", "<0xAC>"}));
    EXPECT_EQ(tok->decode(euro), "a\xe2\x82\xac");
    // é (C3 A9) has no byte tokens: each byte becomes the unknown token.
    EXPECT_EQ(tok->encode("\xc3\xa9", false, false), ids_of(v, {"<unk>", "<unk>"}));
}

TEST(SentencePiece, SpecialTokensAndDefaults) {
    auto v = spm_vocab();
    const auto tok = Tokenizer::from_model(v.view());
    // Without ids in the file: BOS 1, EOS 2, and BOS is added.
    EXPECT_EQ(tok->bos(), v.id_of("<s>"));
    EXPECT_EQ(tok->eos(), v.id_of("</s>"));
    EXPECT_TRUE(tok->add_bos());
    EXPECT_EQ(tok->encode("hi", true, false), ids_of(v, {"<s>", "hi"}));
    // Control tokens are text unless parse_special; user-defined ones are always split out.
    EXPECT_EQ(tok->encode("<turn>", false, true), ids_of(v, {"<turn>"}));
    EXPECT_NE(tok->encode("<turn>", false, false), ids_of(v, {"<turn>"}));
    EXPECT_EQ(tok->encode("hi<tool>", false, false), ids_of(v, {"hi", "<tool>"}));
    EXPECT_EQ(tok->decode(ids_of(v, {"<s>", "hi", "<tool>"})), "<s>hi<tool>");
    EXPECT_EQ(tok->encode("", false, true), std::vector<int32_t>{});
}

TEST(SentencePiece, BadMetadataIsOneClearError) {
    // Each case breaks one thing in an otherwise good vocabulary and expects the error naming it.
    const auto expect_error = [](void (*spoil)(FakeVocab&), const std::string& message) {
        auto v = spm_vocab();
        spoil(v);
        const auto error = error_of(v);
        EXPECT_NE(error.find(message), std::string::npos) << error;
    };
    expect_error([](FakeVocab& v) { v.without("tokenizer.ggml.scores"); }, "tokenizer.ggml.scores: missing");
    expect_error([](FakeVocab& v) { v.drop_last_score(); }, "tokenizer.ggml.scores: 17 entries for 18 tokens");
    expect_error([](FakeVocab& v) { v.scores_as_strings(); }, "tokenizer.ggml.scores: expected an array of float32");
    expect_error([](FakeVocab& v) { v.set_score("ab", std::nanf("")); }, "tokenizer.ggml.scores[14] is NaN");
    expect_error([](FakeVocab& v) { v.without("tokenizer.ggml.tokens"); }, "tokenizer.ggml.tokens: missing");
    expect_error([](FakeVocab& v) { v.token_types_as_strings(); },
                 "tokenizer.ggml.token_type: expected an array of int32");
    expect_error([](FakeVocab& v) { v.model("bert"); },
                 "tokenizer model 'bert' is not supported yet (supported: gpt2, gemma4, llama)");
}

// ---- The real Gemma 3 vocabulary ----------------------------------------------------------------------------

std::filesystem::path models_dir() {
    if (const char* dir = std::getenv("CELLM_MODELS")) return dir;
    const char* home = std::getenv("HOME");
    return std::filesystem::path(home ? home : "") / ".cache/cellm/models";
}

class Gemma3 : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        const auto path = models_dir() / test::gemma3_reference().at("model").get<std::string>();
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

TEST_F(Gemma3, VocabularyFacts) {
    const auto& facts = test::gemma3_reference().at("tokenizer");
    EXPECT_EQ(tokenizer_->model(), facts.at("model").get<std::string>());
    EXPECT_EQ(tokenizer_->n_vocab(), facts.at("n_vocab").get<int32_t>());
    EXPECT_EQ(tokenizer_->bos(), facts.at("bos").get<int32_t>());
    EXPECT_EQ(tokenizer_->eos(), facts.at("eos").get<int32_t>());
    EXPECT_EQ(tokenizer_->add_bos(), facts.at("add_bos").get<bool>());
    EXPECT_EQ(tokenizer_->chat_template(), facts.at("chat_template").get<std::string>());
    EXPECT_TRUE(tokenizer_->is_end_of_generation(tokenizer_->find_token("<end_of_turn>")));
    EXPECT_TRUE(tokenizer_->is_end_of_generation(tokenizer_->find_token("<eos>")));
    EXPECT_FALSE(tokenizer_->is_end_of_generation(tokenizer_->find_token("<start_of_turn>")));
}

TEST_F(Gemma3, EncodesAndDecodesLikeLlamaCpp) {
    int checked = 0;
    for (const auto& entry : test::gemma3_reference().at("encode")) {
        const auto text = entry.at("text").get<std::string>();
        const bool add_bos = entry.at("add_bos").get<bool>();
        const bool parse_special = entry.at("parse_special").get<bool>();
        const auto ids = tokenizer_->encode(text, add_bos, parse_special);
        EXPECT_EQ(ids, entry.at("ids").get<std::vector<int32_t>>())
            << "text: " << text << " (add_bos " << add_bos << ", parse_special " << parse_special << ")";
        EXPECT_EQ(tokenizer_->decode(ids), entry.at("decoded").get<std::string>());
        EXPECT_EQ(tokenizer_->decode(ids), (add_bos ? "<bos>" : "") + text);
        ++checked;
    }
    EXPECT_EQ(checked, 44);
}

TEST_F(Gemma3, TokenBytesLikeLlamaCpp) {
    for (const auto& [id, hex] : test::gemma3_reference().at("pieces_hex").items()) {
        std::string bytes;
        const auto h = hex.get<std::string>();
        for (size_t i = 0; i + 1 < h.size(); i += 2) bytes += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
        EXPECT_EQ(tokenizer_->token_bytes(std::stoi(id)), bytes) << "token " << id;
    }
}

TEST_F(Gemma3, ChatPromptsRenderAndEncodeLikeJinjaAndLlamaCpp) {
    const PromptBuilder prompt(*tokenizer_, ChatConfig{});
    ASSERT_EQ(prompt.kind(), ChatTemplateKind::Gemma);  // "auto": the file has no template, but Gemma's tokens
    for (const auto& entry : test::gemma3_reference().at("chat")) {
        std::vector<ChatMessage> messages;
        for (const auto& m : entry.at("messages")) messages.push_back({m.at("role"), m.at("content")});
        EXPECT_EQ(prompt.render(messages), entry.at("rendered").get<std::string>());
        EXPECT_EQ(prompt.chat_tokens(messages), entry.at("ids").get<std::vector<int32_t>>());
    }
}

}  // namespace
}  // namespace cellm
