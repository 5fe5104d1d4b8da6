// The GBNF parser, the byte-level recognizer and the token masks. Masks are checked against the definition
// (a token is allowed when the recognizer, fed the text so far, can go on with its bytes) on random walks
// through the grammar, over a vocabulary with multi-byte characters and tokens that cross rule boundaries.
#include "grammar/gbnf.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

#include <gtest/gtest.h>

#include <random>

namespace cellm::grammar {
namespace {

bool accepts(const std::string& gbnf, const std::string& text) {
    const Grammar grammar = Grammar::from_gbnf(gbnf);
    Recognizer r(grammar);
    return r.feed(text) && r.accepting();
}

std::string refusal(const std::string& gbnf) {
    try {
        Grammar::from_gbnf(gbnf);
    } catch (const GrammarError& e) {
        return e.what();
    }
    return "";
}

TEST(Gbnf, LiteralsClassesAndRepetitions) {
    const std::string g = R"(root ::= "a" [b-d]* "e" | "x"{2,3} | [^a-z]+ "." )";
    for (const char* ok : {"ae", "abcde", "xx", "xxx", "AB.", "é€😀."}) EXPECT_TRUE(accepts(g, ok)) << ok;
    for (const char* bad : {"", "a", "abx", "x", "xxxx", "ab.", "é"}) EXPECT_FALSE(accepts(g, bad)) << bad;
}

TEST(Gbnf, RulesCommentsEscapesAndLineBreaks) {
    const std::string g = "# a comment\nroot ::= greet (\" \" name)? \"\\n\"   # trailing\n"
                          "greet ::= \"hi\"\n  | \"\\x68ello\" | \"\\u00e9\"\nname ::= [A-Z] [a-z]*\n";
    for (const char* ok : {"hi\n", "hello Bob\n", "\xc3\xa9 X\n"}) EXPECT_TRUE(accepts(g, ok)) << ok;
    for (const char* bad : {"hi", "hi bob\n", "hey\n"}) EXPECT_FALSE(accepts(g, bad)) << bad;
}

TEST(Gbnf, ErrorsNameWhatAndWhere) {
    EXPECT_NE(refusal("root ::= x").find("undefined rule 'x'"), std::string::npos);
    EXPECT_NE(refusal("root ::= [a").find("line 1, column 12: unterminated character class"), std::string::npos);
    EXPECT_NE(refusal("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
    EXPECT_NE(refusal("root ::= a\na ::= a \"x\" | \"y\"").find("left-recursive"), std::string::npos);
    EXPECT_NE(refusal("rot ::= \"a\"").find("no rule 'root'"), std::string::npos);
    EXPECT_NE(refusal("root ::= \"a\"{3,2}").find("maximum below"), std::string::npos);
    EXPECT_NE(refusal("root ::= \"a\"{99999}").find("repetition count"), std::string::npos);
    EXPECT_NE(refusal("root ::= \"\\q\"").find("unknown escape"), std::string::npos);
    EXPECT_NE(refusal(std::string(kMaxGrammarBytes + 1, ' ')).find("limit"), std::string::npos);
    // Right recursion and nullable loops are fine.
    EXPECT_TRUE(accepts("root ::= (\"\")* \"a\" r\nr ::= \"b\" r | ", "abbb"));
}

// A vocabulary of single bytes, ASCII words, pieces of multi-byte characters and JSON-ish punctuation runs.
std::vector<std::string> test_vocabulary() {
    std::vector<std::string> v{"<eos>"};
    for (int c = 1; c < 256; ++c) v.emplace_back(1, static_cast<char>(c));
    for (const char* w : {"\"", "\":", "\",", "\"}", "\"},", "\":\"", "{\"", "}}", "true", "false", "null", "tr",
                          "ue", "12", "3.", ".5", "e+", "-0", "ab", "abc", "name", "\"name\":", "\xc3\xa9", "\xe2\x82",
                          "\xac\"", " \"", ", \"", "\\n", "\\\"", "\\u00", "[]", "[1,", "],", "\n  "}) {
        v.emplace_back(w);
    }
    return v;
}

void check_random_walks(const std::string& gbnf, int walks, int max_tokens) {
    const auto vocabulary = std::make_shared<TokenVocabulary>(test_vocabulary(), std::vector<int32_t>{0});
    const auto compiled = std::make_shared<const CompiledGrammar>(Grammar::from_gbnf(gbnf), vocabulary);
    std::mt19937 rng(7);
    for (int w = 0; w < walks; ++w) {
        GrammarMatcher matcher(compiled);
        Recognizer reference(compiled->grammar());
        std::vector<uint64_t> mask(vocabulary->mask_words());
        for (int step = 0; step < max_tokens; ++step) {
            matcher.fill_mask(mask);
            std::vector<int32_t> allowed;
            for (int32_t t = 0; t < vocabulary->n_vocab(); ++t) {
                const bool in_mask = mask[static_cast<size_t>(t) / 64] >> (t % 64) & 1;
                const bool expected = t == 0 ? reference.accepting() : reference.can_feed(vocabulary->bytes(t));
                ASSERT_EQ(in_mask, expected) << "walk " << w << " step " << step << " token '" << vocabulary->bytes(t) << "'";
                if (in_mask) allowed.push_back(t);
            }
            ASSERT_FALSE(allowed.empty());
            const int32_t t = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
            ASSERT_TRUE(matcher.accept_token(t));
            if (t == 0) break;
            ASSERT_TRUE(reference.feed(vocabulary->bytes(t)));
            ASSERT_EQ(matcher.can_end(), reference.accepting());
        }
    }
}

TEST(TokenMask, EqualsTheRecognizerOnRandomWalks) {
    const std::string json = R"(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9]{1,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
)";
    check_random_walks(json, 12, 50);
    check_random_walks(R"(root ::= "name" ("é" | "€")* ("," [a-c]{1,3})+ "\"")", 12, 20);
}

TEST(TokenMask, RejectsWhatCannotComeAndEndsOnlyWhereTheGrammarMay) {
    const std::vector<std::string> tokens = test_vocabulary();
    const auto vocabulary = std::make_shared<TokenVocabulary>(tokens, std::vector<int32_t>{0});
    GrammarMatcher m(std::make_shared<const CompiledGrammar>(Grammar::from_gbnf(R"(root ::= "ab" "c"?)"), vocabulary));
    EXPECT_FALSE(m.accept_token(0));  // end of generation before the grammar may end
    EXPECT_FALSE(m.accept_token(vocabulary->n_vocab() + 5));
    EXPECT_TRUE(m.accept_token(static_cast<int32_t>(std::find(tokens.begin(), tokens.end(), "ab") - tokens.begin())));
    EXPECT_TRUE(m.can_end());
    EXPECT_FALSE(m.finished());
    EXPECT_TRUE(m.accept_token('c'));
    EXPECT_TRUE(m.finished());
    EXPECT_TRUE(m.accept_token(0));
}

}  // namespace
}  // namespace cellm::grammar
