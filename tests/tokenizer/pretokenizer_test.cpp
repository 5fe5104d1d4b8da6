// Every pre-tokenizer pattern set against HF tokenizers' splits of the same texts.
#include "reference_data.h"

#include "error.h"
#include "tokenize/pretokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cellm {
namespace {

TEST(PreTokenizer, MatchesHuggingFaceSplits) {
    const auto& splits = test::tokenizer_reference().at("splits");
    ASSERT_FALSE(splits.empty());
    for (const auto& entry : splits) {
        const auto pre = entry.at("pre").get<std::string>();
        const auto text = entry.at("text").get<std::string>();
        const auto pieces = entry.at("pieces").get<std::vector<std::string>>();
        EXPECT_EQ(PreTokenizer::for_name(pre)->split(text), pieces) << "pre " << pre << ", text: " << text;
    }
}

TEST(PreTokenizer, AliasesShareTheirPatterns) {
    const std::string text = "Hello  world 12345\n\n";
    EXPECT_EQ(PreTokenizer::for_name("llama3")->split(text), PreTokenizer::for_name("llama-bpe")->split(text));
    EXPECT_EQ(PreTokenizer::for_name("refact")->split(text), PreTokenizer::for_name("smollm")->split(text));
    EXPECT_EQ(PreTokenizer::for_name("mpt")->split(text), PreTokenizer::for_name("gpt-2")->split(text));
    EXPECT_EQ(PreTokenizer::for_name("")->split(text), PreTokenizer::for_name("default")->split(text));
    EXPECT_EQ(PreTokenizer::for_name("smollm")->split("12345"),
              (std::vector<std::string>{"1", "2", "3", "4", "5"}));
    EXPECT_EQ(PreTokenizer::for_name("llama-bpe")->split("12345"), (std::vector<std::string>{"123", "45"}));
}

TEST(PreTokenizer, UnknownNameIsAnError) {
    try {
        PreTokenizer::for_name("not-a-tokenizer");
        ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'not-a-tokenizer'"), std::string::npos) << e.what();
    }
}

TEST(PreTokenizer, BadPatternIsAnError) {
    const std::vector<std::string_view> patterns = {"(unclosed"};
    EXPECT_THROW(PreTokenizer{patterns}, Error);
}

}  // namespace
}  // namespace cellm
