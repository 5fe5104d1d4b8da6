#include "schedule/sampler.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cellm {
namespace {

// Feeds the pieces in order and returns everything released (finish() included unless stopped) and whether it
// stopped.
std::pair<std::string, bool> run(std::vector<std::string> stops, const std::vector<std::string>& pieces) {
    StopMatcher matcher(std::move(stops));
    std::string printed;
    for (const std::string& piece : pieces) printed += matcher.feed(piece).printable;
    printed += matcher.finish();
    return {printed, matcher.stopped()};
}

TEST(StopMatcher, PassesTextThroughWithoutStopStrings) {
    EXPECT_EQ(run({}, {"Hello", ", ", "world"}), std::make_pair(std::string("Hello, world"), false));
}

TEST(StopMatcher, StopsInsideOnePieceAndDropsTheRest) {
    StopMatcher matcher({"\n\nUser:"});
    const StopMatcher::Step step = matcher.feed("Hello\n\nUser: more");
    EXPECT_EQ(step.printable, "Hello");
    EXPECT_TRUE(step.stopped);
    EXPECT_EQ(matcher.feed("ignored").printable, "");
    EXPECT_TRUE(matcher.feed("ignored").stopped);
    EXPECT_EQ(matcher.finish(), "");
}

TEST(StopMatcher, HoldsBackAPossibleStopSplitAcrossPieces) {
    StopMatcher matcher({"\n\nUser:"});
    StopMatcher::Step step = matcher.feed("Hello\n");
    EXPECT_EQ(step.printable, "Hello");
    EXPECT_FALSE(step.stopped);
    step = matcher.feed("\nUs");
    EXPECT_EQ(step.printable, "");
    EXPECT_FALSE(step.stopped);
    step = matcher.feed("er:");
    EXPECT_EQ(step.printable, "");
    EXPECT_TRUE(step.stopped);
}

TEST(StopMatcher, ReleasesHeldTextOnceItCannotBeAStop) {
    StopMatcher matcher({"\n\nUser:"});
    EXPECT_EQ(matcher.feed("Hello\n").printable, "Hello");
    EXPECT_EQ(matcher.feed("world").printable, "\nworld");
    EXPECT_EQ(matcher.feed("\n\nUse").printable, "");
    EXPECT_EQ(matcher.finish(), "\n\nUse");
    EXPECT_FALSE(matcher.stopped());
}

TEST(StopMatcher, HandlesOverlappingPrefixes) {
    // "aaab" holds "aab" after the first "a".
    EXPECT_EQ(run({"aab"}, {"a", "a", "a", "b", "tail"}), std::make_pair(std::string("a"), true));
}

TEST(StopMatcher, EarliestOfSeveralStopStringsWins) {
    EXPECT_EQ(run({"END", "STOP"}, {"xST", "OPyEND"}), std::make_pair(std::string("x"), true));
    EXPECT_EQ(run({"END", "STOP"}, {"xEN", "D", "STOP"}), std::make_pair(std::string("x"), true));
}

TEST(StopMatcher, IgnoresEmptyStopStrings) {
    EXPECT_EQ(run({"", "</s>"}, {"ab", "</", "s>"}), std::make_pair(std::string("ab"), true));
}

TEST(StopMatcher, ByteAtATimeMatchesWholeText) {
    const std::string text = "The answer is 42.<|im_end|>ignored";
    std::vector<std::string> bytes;
    for (char c : text) bytes.emplace_back(1, c);
    EXPECT_EQ(run({"<|im_end|>"}, bytes), std::make_pair(std::string("The answer is 42."), true));
}

}  // namespace
}  // namespace cellm
