// Byte-level BPE, special tokens, errors and streaming decoding on a tiny hand-built vocabulary.
#include "fake_vocab.h"

#include "error.h"
#include "tokenize/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace cellm {
namespace {

using test::byte_level;
using test::FakeVocab;

// "hello world" spelled with merges; control, user-defined and a normal-typed end-of-turn token.
FakeVocab hello_vocab() {
    FakeVocab v;
    v.model("gpt2").pre("gpt-2").id("tokenizer.ggml.bos_token_id", 0).id("tokenizer.ggml.eos_token_id", 0);
    v.token("<|endoftext|>", 3).token("<|im_start|>", 3).token("<|im_end|>", 1).token("<tool>", 4);
    for (const char* t : {"h", "e", "l", "o", "Ġ", "w", "r", "d", "<", "|", ">", "i", "m", "_", "s", "t", "a"}) {
        v.token(t);
    }
    for (const char* t : {"he", "ll", "hell", "hello", "Ġw", "or", "Ġwor", "Ġworl", "Ġworld"}) v.token(t);
    for (const char* m : {"h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d"}) v.merge(m);
    return v;
}

std::vector<int32_t> ids_of(const FakeVocab& v, std::initializer_list<const char*> texts) {
    std::vector<int32_t> ids;
    for (const char* t : texts) ids.push_back(v.id_of(t));
    return ids;
}

TEST(Tokenizer, MergesWordsByRank) {
    auto v = hello_vocab();
    const auto tok = Tokenizer::from_model(v.view());
    EXPECT_EQ(tok->encode("hello world", false, true), ids_of(v, {"hello", "Ġworld"}));
    EXPECT_EQ(tok->encode("hello", true, true), ids_of(v, {"<|endoftext|>", "hello"}));
    EXPECT_EQ(tok->decode(tok->encode("hello world", false, true)), "hello world");
    EXPECT_EQ(tok->token_bytes(v.id_of("Ġworld")), " world");
}

TEST(Tokenizer, LowerRankMergesFirst) {
    for (const bool el_first : {true, false}) {
        FakeVocab v;
        v.model("gpt2").pre("gpt-2").token("h").token("e").token("l").token("he").token("el");
        if (el_first) v.merge("e l").merge("h e"); else v.merge("h e").merge("e l");
        const auto tok = Tokenizer::from_model(v.view());
        EXPECT_EQ(tok->encode("hel", false, false),
                  el_first ? ids_of(v, {"h", "el"}) : ids_of(v, {"he", "l"}));
    }
}

TEST(Tokenizer, Llama3TakesWholeWordsWithoutMerging) {
    FakeVocab v;
    v.model("gpt2").pre("llama-bpe").token("h").token("i").token("hi").token("Ġ").token("Ġhi");
    const auto tok = Tokenizer::from_model(v.view());
    EXPECT_EQ(tok->encode("hi hi", false, true), ids_of(v, {"hi", "Ġhi"}));  // no merges listed at all
    v.pre("gpt-2");
    EXPECT_EQ(Tokenizer::from_model(v.view())->encode("hi", false, true), ids_of(v, {"h", "i"}));
}

// Gemma 4's vocabulary: BPE over raw UTF-8 with spaces spelled U+2581, merges within lines only, <0xXX> byte
// fallback, a newline run that is a token taken whole, and BOS even where the file says not to add it.
TEST(Tokenizer, Gemma4MergesSentencePieceSpelledLines) {
    FakeVocab v;
    v.model("gemma4").id("tokenizer.ggml.bos_token_id", 1).flag("tokenizer.ggml.add_bos_token", false);
    v.token("<pad>", 3).token("<bos>", 3).token("h").token("i").token("\xe2\x96\x81").token("\xc3\xa9").token("\n");
    v.token("\n\n").token("\n\n\n").token("hi").token("\xe2\x96\x81hi").token("<0x7A>", 6);
    v.merge("h i").merge("\xe2\x96\x81 hi").merge("\n \n");
    const auto tok = Tokenizer::from_model(v.view());
    EXPECT_EQ(tok->pre(), "gemma4");
    EXPECT_TRUE(tok->add_bos());
    EXPECT_EQ(tok->eos(), -1);  // no byte-level default of 11
    const auto ids = tok->encode("hi hi\n\n\nz\xc3\xa9", false, false);
    EXPECT_EQ(ids, ids_of(v, {"hi", "\xe2\x96\x81hi", "\n\n\n", "<0x7A>", "\xc3\xa9"}));
    EXPECT_EQ(tok->decode(ids), "hi hi\n\n\nz\xc3\xa9");
    // Merged instead of taken whole, "\n\n\n" would read as "\n\n" "\n".
    EXPECT_EQ(tok->encode("\n\n\n\n\n", false, false), ids_of(v, {"\n\n", "\n\n", "\n"}));
}

TEST(Tokenizer, BytesMissingFromTheVocabularyAreDropped) {
    auto v = hello_vocab();
    const auto tok = Tokenizer::from_model(v.view());
    EXPECT_EQ(tok->encode("hzo", false, true), ids_of(v, {"h", "o"}));  // llama.cpp drops 'z' too
}

TEST(Tokenizer, SpecialTokensSplitOutOnlyWhenParsed) {
    auto v = hello_vocab();
    const auto tok = Tokenizer::from_model(v.view());
    const int32_t start = v.id_of("<|im_start|>");
    EXPECT_EQ(tok->encode("<|im_start|>hello", false, true), (std::vector<int32_t>{start, v.id_of("hello")}));
    const auto plain = tok->encode("<|im_start|>hello", false, false);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), start), 0);
    EXPECT_EQ(plain.front(), v.id_of("<"));
    // User-defined tokens are matched whole either way.
    for (const bool parse : {true, false}) {
        EXPECT_EQ(tok->encode("he<tool>lo", false, parse), ids_of(v, {"he", "<tool>", "l", "o"}));
    }
    EXPECT_TRUE(tok->is_special(start));
    EXPECT_TRUE(tok->is_special(v.id_of("<tool>")));
    EXPECT_FALSE(tok->is_special(v.id_of("hello")));
    EXPECT_EQ(tok->token_bytes(start), "<|im_start|>");
}

TEST(Tokenizer, EndOfTurnTokensEndGeneration) {
    auto v = hello_vocab();
    const auto tok = Tokenizer::from_model(v.view());
    const int32_t im_end = v.id_of("<|im_end|>");
    EXPECT_TRUE(tok->is_end_of_generation(im_end));
    EXPECT_TRUE(tok->is_end_of_generation(tok->eos()));
    EXPECT_FALSE(tok->is_end_of_generation(v.id_of("hello")));
    // Typed normal in the file, but llama.cpp treats it as control, so it is split out of text.
    EXPECT_TRUE(tok->is_special(im_end));
    EXPECT_EQ(tok->encode("hello<|im_end|>", false, true), (std::vector<int32_t>{v.id_of("hello"), im_end}));
}

TEST(Tokenizer, AddBosFollowsTheFileAndThePreTokenizer) {
    auto v = hello_vocab();
    EXPECT_FALSE(Tokenizer::from_model(v.view())->add_bos());
    v.flag("tokenizer.ggml.add_bos_token", true);
    EXPECT_TRUE(Tokenizer::from_model(v.view())->add_bos());
    auto llama3 = hello_vocab();
    llama3.pre("llama-bpe");
    EXPECT_TRUE(Tokenizer::from_model(llama3.view())->add_bos());
}

void expect_error(FakeVocab& v, const std::string& fragment) {
    try {
        Tokenizer::from_model(v.view());
        ADD_FAILURE() << "expected an error mentioning " << fragment;
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
}

TEST(Tokenizer, MalformedMetadataIsAClearError) {
    auto no_tokens = hello_vocab();
    expect_error(no_tokens.without("tokenizer.ggml.tokens"), "tokenizer.ggml.tokens: missing");
    auto no_merges = hello_vocab();
    expect_error(no_merges.without("tokenizer.ggml.merges"), "tokenizer.ggml.merges: missing");
    auto bad_merge = hello_vocab();
    expect_error(bad_merge.merge("h q"), "tokenizer.ggml.merges[9] 'h q': refers to 'q'");
    auto unmergeable = hello_vocab();
    expect_error(unmergeable.merge("o w"), "refers to 'ow'");
    auto no_space = hello_vocab();
    expect_error(no_space.merge("hello"), "expected two tokens separated by a space");
    auto bad_types = hello_vocab();
    expect_error(bad_types.token_types_as_strings(), "tokenizer.ggml.token_type: expected an array of int32");
    auto unigram = hello_vocab();
    expect_error(unigram.model("t5"), "tokenizer model 't5' is not supported yet");
    auto unknown_pre = hello_vocab();
    expect_error(unknown_pre.pre("klingon"), "unknown pre-tokenizer 'klingon'");
    auto no_model = hello_vocab();
    expect_error(no_model.without("tokenizer.ggml.model"), "tokenizer.ggml.model");
    auto wrong_type = hello_vocab();
    wrong_type.set_string("tokenizer.ggml.bos_token_id", "one");
    expect_error(wrong_type, "tokenizer.ggml.bos_token_id: expected an integer");
}

TEST(Tokenizer, OutOfRangeSpecialIdIsIgnored) {
    auto v = hello_vocab();
    v.id("tokenizer.ggml.eot_token_id", 100000);
    const auto tok = Tokenizer::from_model(v.view());
    EXPECT_EQ(tok->eot(), v.id_of("<|im_end|>"));  // found by its text instead
}

TEST(Tokenizer, BadIdsInDecodeAreAClearError) {
    auto v = hello_vocab();
    const auto tok = Tokenizer::from_model(v.view());
    const std::vector<int32_t> bad = {v.id_of("hello"), tok->n_vocab()};
    const std::vector<int32_t> good = {v.id_of("hello")};
    EXPECT_EQ(tok->decode(good), "hello");
    EXPECT_THROW(tok->decode(bad), Error);
    EXPECT_THROW(tok->token_bytes(-1), Error);
    try {
        tok->decode(bad);
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
    }
}

TEST(Tokenizer, MalformedUtf8ReadsAsReplacementCharacter) {
    auto v = hello_vocab();
    const auto tok = Tokenizer::from_model(v.view());
    EXPECT_EQ(tok->encode("he\xffllo", false, true), ids_of(v, {"he", "ll", "o"}));  // U+FFFD's bytes are not tokens
}

// 😀 is F0 9F 98 80; the vocabulary has each byte and the first two merged.
FakeVocab emoji_vocab() {
    FakeVocab v;
    v.model("gpt2").pre("gpt-2").token("a");
    for (const char* bytes : {"\xF0", "\x9F", "\x98", "\x80", "\xF0\x9F"}) v.token(byte_level(bytes));
    return v;
}

TEST(StreamDecoder, HoldsBackAnEmojiUntilItIsComplete) {
    auto v = emoji_vocab();
    const auto tok = Tokenizer::from_model(v.view());
    StreamDecoder stream(*tok);
    EXPECT_EQ(stream.push(v.id_of("a")), "a");
    EXPECT_EQ(stream.push(v.id_of(byte_level("\xF0\x9F"))), "");
    EXPECT_EQ(stream.push(v.id_of(byte_level("\x98"))), "");
    EXPECT_EQ(stream.push(v.id_of(byte_level("\x80"))), "\xF0\x9F\x98\x80");
    EXPECT_EQ(stream.push(v.id_of("a")), "a");
    EXPECT_EQ(stream.flush(), "");
}

// What leaves the decoder is valid UTF-8 whatever the model generates: an incomplete tail at the end, a stray
// continuation byte and a lead byte cut short by another come out as U+FFFD (one per malformed byte).
TEST(StreamDecoder, ReplacesWhatIsNotUtf8) {
    auto v = emoji_vocab();
    const auto tok = Tokenizer::from_model(v.view());
    StreamDecoder stream(*tok);
    EXPECT_EQ(stream.push(v.id_of("a")), "a");
    EXPECT_EQ(stream.push(v.id_of(byte_level("\xF0"))), "");
    EXPECT_EQ(stream.push(v.id_of(byte_level("\x9F"))), "");
    EXPECT_EQ(stream.flush(), "\uFFFD\uFFFD");
    // A stray continuation byte cannot start a character: it is replaced, not held forever.
    EXPECT_EQ(stream.push(v.id_of(byte_level("\x80"))), "\uFFFD");
    EXPECT_EQ(stream.push(v.id_of(byte_level("\xF0"))), "");
    EXPECT_EQ(stream.push(v.id_of("a")), "\uFFFDa");
    EXPECT_THROW(stream.push(-5), Error);
}

}  // namespace
}  // namespace cellm
