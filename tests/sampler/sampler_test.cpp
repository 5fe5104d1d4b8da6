#include "error.h"
#include "schedule/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace cellm {
namespace {

// Only the filter under test is active; the others are set to their no-op values.
SamplingParams plain(float temperature = 1.0f, uint64_t seed = 1) {
    return {.temperature = temperature, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .repeat_penalty = 1.0f,
            .repeat_last_n = 0, .seed = seed};
}

// Logits whose softmax is exactly `probabilities`.
std::vector<float> logits_of(std::vector<double> probabilities) {
    std::vector<float> logits;
    for (double p : probabilities) logits.push_back(static_cast<float>(std::log(p)));
    return logits;
}

// Which tokens come out of `draws` samples, and how often.
std::map<int32_t, int> histogram(const SamplingParams& params, const std::vector<float>& logits, int draws,
                                 const std::vector<int32_t>& recent = {}) {
    Sampler sampler(params);
    std::map<int32_t, int> counts;
    for (int i = 0; i < draws; ++i) ++counts[sampler.sample(logits, recent)];
    return counts;
}

std::set<int32_t> support(const std::map<int32_t, int>& counts) {
    std::set<int32_t> ids;
    for (const auto& [id, n] : counts) ids.insert(id);
    return ids;
}

TEST(Sampler, GreedyPicksTheLargestLogitLowestIdOnTies) {
    Sampler sampler(plain(0.0f));
    const std::vector<float> logits{1.0f, 3.0f, 2.0f, 3.0f};
    EXPECT_EQ(sampler.sample(logits, {}), 1);
    const std::vector<float> single{-5.0f};
    EXPECT_EQ(sampler.sample(single, {}), 0);
}

TEST(Sampler, GreedyNeverPicksNaN) {
    Sampler sampler(plain(0.0f));
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> logits{nan, -1.0f, nan};
    EXPECT_EQ(sampler.sample(logits, {}), 1);
}

// The greedy path reads the row in place; it must choose what max_element chooses with every NaN read as -inf.
TEST(Sampler, GreedyEqualsTheFirstLargestOfEveryRow) {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> level(-20, 20), kind(0, 9);
    Sampler sampler(plain(0.0f));
    for (const size_t vocab : {1u, 15u, 16u, 17u, 33u, 1000u, 49152u})
        for (int row = 0; row < 20; ++row) {
            std::vector<float> logits(vocab);
            for (float& l : logits) {
                const int k = kind(rng);
                l = k == 0 ? nan : k == 1 ? -inf : k == 2 && row % 5 == 0 ? inf : 0.5f * static_cast<float>(level(rng));
            }
            if (row == 1) std::fill(logits.begin(), logits.end(), nan);
            if (row == 2) std::fill(logits.begin(), logits.end(), -inf);
            if (row == 3) logits.back() = 1000.0f;
            std::vector<float> read(logits);
            for (float& l : read) l = std::isnan(l) ? -inf : l;
            const auto expected = static_cast<int32_t>(std::max_element(read.begin(), read.end()) - read.begin());
            ASSERT_EQ(sampler.sample(logits, {}), expected) << "vocabulary " << vocab << ", row " << row;
        }
}

TEST(Sampler, RepeatPenaltyDividesPositiveAndMultipliesNegativeLogits) {
    SamplingParams params = plain(0.0f);
    params.repeat_penalty = 2.0f;
    params.repeat_last_n = 64;
    Sampler sampler(params);
    // 2.0 / 2 = 1.0 falls below 1.9.
    const std::vector<float> positive{2.0f, 1.9f, -1.0f};
    EXPECT_EQ(sampler.sample(positive, std::vector<int32_t>{0}), 1);
    // -1.0 * 2 = -2.0 falls below -1.5.
    const std::vector<float> negative{-1.0f, -1.5f};
    EXPECT_EQ(sampler.sample(negative, std::vector<int32_t>{0}), 1);
}

TEST(Sampler, RepeatPenaltyAppliesOncePerTokenWhateverItsCount) {
    SamplingParams params = plain(0.0f);
    params.repeat_penalty = 2.0f;
    params.repeat_last_n = 64;
    Sampler sampler(params);
    // Once: 4 / 2 = 2 > 1.5. Three times would give 0.5 < 1.5.
    const std::vector<float> logits{4.0f, 1.5f};
    EXPECT_EQ(sampler.sample(logits, std::vector<int32_t>{0, 0, 0}), 0);
}

TEST(Sampler, RepeatPenaltyLooksOnlyAtTheLastNTokens) {
    SamplingParams params = plain(0.0f);
    params.repeat_penalty = 10.0f;
    params.repeat_last_n = 1;
    Sampler sampler(params);
    const std::vector<float> logits{3.0f, 2.0f, 1.0f};
    EXPECT_EQ(sampler.sample(logits, std::vector<int32_t>{1, 2}), 0);  // token 0 is outside the window
    EXPECT_EQ(sampler.sample(logits, std::vector<int32_t>{2, 0}), 1);
}

TEST(Sampler, FrequencyPenaltySubtractsOncePerOccurrence) {
    SamplingParams params = plain(0.0f);
    params.frequency_penalty = 1.0f;
    params.repeat_last_n = 64;
    Sampler sampler(params);
    // Token 0 seen twice: 3.0 - 2 = 1.0 < 1.5; seen once: 3.0 - 1 = 2.0 > 1.5.
    const std::vector<float> logits{3.0f, 1.5f};
    EXPECT_EQ(sampler.sample(logits, std::vector<int32_t>{0, 0}), 1);
    EXPECT_EQ(sampler.sample(logits, std::vector<int32_t>{0}), 0);
}

TEST(Sampler, PresencePenaltySubtractsOnceWhateverTheCount) {
    SamplingParams params = plain(0.0f);
    params.presence_penalty = 1.0f;
    params.repeat_last_n = 64;
    Sampler sampler(params);
    // Three times or once, token 0 loses 1.0: 3.0 - 1 = 2.0 > 1.5, and 2.0 - 1 = 1.0 < 1.5.
    EXPECT_EQ(sampler.sample(std::vector<float>{3.0f, 1.5f}, std::vector<int32_t>{0, 0, 0}), 0);
    EXPECT_EQ(sampler.sample(std::vector<float>{2.0f, 1.5f}, std::vector<int32_t>{0}), 1);
    // Negative penalties make seen tokens more likely, as in OpenAI's API.
    params.presence_penalty = -1.0f;
    Sampler encouraging(params);
    EXPECT_EQ(encouraging.sample(std::vector<float>{1.0f, 1.5f}, std::vector<int32_t>{0}), 0);
}

TEST(Sampler, TopKKeepsOnlyTheKBestTokens) {
    SamplingParams params = plain();
    params.top_k = 2;
    const std::vector<float> logits{0.0f, 5.0f, 4.9f, 4.8f};
    EXPECT_EQ(support(histogram(params, logits, 2000)), (std::set<int32_t>{1, 2}));
}

// The one-pass top-k selection against its definition: every candidate sorted (higher logit first, lower id
// first among equals), the first k kept, then the draw over them, with the engine the sampler seeds. Rows with
// runs of equal logits, NaN and -inf, at vocabulary sizes around the selection's blocks of 64.
TEST(Sampler, TopKSelectionEqualsSortingEveryToken) {
    std::mt19937 rng(5);
    std::uniform_int_distribution<int> level(0, 40);
    for (const size_t vocab : {65u, 130u, 1000u, 49152u})
        for (const int k : {1, 2, 40, 63, 64, 65}) {
            if (static_cast<size_t>(k) >= vocab) continue;
            SamplingParams params = plain(1.0f, 7);
            params.top_k = k;
            Sampler sampler(params);
            std::mt19937_64 engine(7);
            for (int row = 0; row < 5; ++row) {
                std::vector<float> logits(vocab);
                for (float& l : logits) l = 0.25f * static_cast<float>(level(rng));  // many ties
                logits[vocab / 3] = std::numeric_limits<float>::quiet_NaN();
                logits[vocab / 2] = -std::numeric_limits<float>::infinity();
                std::vector<std::pair<float, int32_t>> all;
                for (size_t i = 0; i < vocab; ++i)
                    all.emplace_back(std::isnan(logits[i]) ? -std::numeric_limits<float>::infinity() : logits[i],
                                     static_cast<int32_t>(i));
                std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
                    return a.first != b.first ? a.first > b.first : a.second < b.second;
                });
                all.resize(static_cast<size_t>(k));
                double total = 0.0;
                for (const auto& [logit, id] : all) total += std::exp(double{logit} - all.front().first);
                const double target = static_cast<double>(engine() >> 11) * 0x1.0p-53 * total;
                double cumulative = 0.0;
                int32_t expected = all.back().second;
                for (const auto& [logit, id] : all) {
                    cumulative += std::exp(double{logit} - all.front().first);
                    if (target < cumulative) {
                        expected = id;
                        break;
                    }
                }
                ASSERT_EQ(sampler.sample(logits, {}), expected) << "vocabulary " << vocab << ", k " << k << ", row " << row;
            }
        }
}

TEST(Sampler, TopPKeepsTheSmallestHeadReachingTheMass) {
    const std::vector<float> logits = logits_of({0.5, 0.3, 0.15, 0.05});
    SamplingParams params = plain();
    params.top_p = 0.75f;  // 0.5 + 0.3 reaches it
    EXPECT_EQ(support(histogram(params, logits, 2000)), (std::set<int32_t>{0, 1}));
    params.top_p = 0.85f;  // needs the 0.15 too
    EXPECT_EQ(support(histogram(params, logits, 2000)), (std::set<int32_t>{0, 1, 2}));
    params.top_p = 0.4f;  // the best token alone
    EXPECT_EQ(support(histogram(params, logits, 2000)), (std::set<int32_t>{0}));
}

TEST(Sampler, MinPDropsTokensLessThanAFractionOfTheBest) {
    const std::vector<float> logits = logits_of({0.5, 0.3, 0.15, 0.05});
    SamplingParams params = plain();
    params.min_p = 0.25f;  // threshold 0.125
    EXPECT_EQ(support(histogram(params, logits, 2000)), (std::set<int32_t>{0, 1, 2}));
    params.min_p = 0.5f;  // threshold 0.25
    EXPECT_EQ(support(histogram(params, logits, 2000)), (std::set<int32_t>{0, 1}));
}

TEST(Sampler, DrawFollowsTheSoftmaxAtTheGivenTemperature) {
    const std::vector<float> logits{0.0f, static_cast<float>(std::log(3.0))};
    constexpr int draws = 20000;
    // Temperature 1: p(1) = 3 / 4.
    EXPECT_NEAR(histogram(plain(1.0f, 7), logits, draws)[1] / double(draws), 0.75, 0.015);
    // Temperature 2: p(1) = sqrt(3) / (1 + sqrt(3)).
    EXPECT_NEAR(histogram(plain(2.0f, 7), logits, draws)[1] / double(draws), std::sqrt(3.0) / (1.0 + std::sqrt(3.0)),
                0.015);
    // A tiny temperature is all but greedy.
    EXPECT_EQ(support(histogram(plain(0.01f, 7), logits, 500)), (std::set<int32_t>{1}));
}

TEST(Sampler, TopKOfOneEqualsGreedy) {
    std::mt19937 random(3);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    SamplingParams params{.temperature = 1.5f, .top_k = 1, .top_p = 0.9f, .min_p = 0.05f, .repeat_penalty = 1.0f,
                          .repeat_last_n = 64, .seed = 11};
    Sampler sampled(params);
    Sampler greedy(plain(0.0f));
    for (int step = 0; step < 50; ++step) {
        std::vector<float> logits(1000);
        for (float& l : logits) l = normal(random);
        EXPECT_EQ(sampled.sample(logits, {}), greedy.sample(logits, {}));
    }
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
    const std::vector<float> logits{0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
    SamplingParams params{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .repeat_penalty = 1.0f,
                          .repeat_last_n = 0, .seed = 42};
    const auto run = [&](uint64_t seed) {
        params.seed = seed;
        Sampler sampler(params);
        std::vector<int32_t> tokens;
        for (int i = 0; i < 64; ++i) tokens.push_back(sampler.sample(logits, {}));
        return tokens;
    };
    EXPECT_EQ(run(42), run(42));
    EXPECT_NE(run(42), run(43));
}

// The draw uses only mt19937_64's standardized bits, so this sequence is the same on every platform.
TEST(Sampler, SeededSequenceIsPinned) {
    const std::vector<float> logits{0.0f, 0.0f, 0.0f, 0.0f};
    Sampler sampler(plain(1.0f, 42));
    std::vector<int32_t> tokens;
    for (int i = 0; i < 12; ++i) tokens.push_back(sampler.sample(logits, {}));
    // Uniform weights: token = floor(4 * u), u = (engine() >> 11) * 2^-53.
    std::mt19937_64 engine(42);
    std::vector<int32_t> expected;
    for (int i = 0; i < 12; ++i) expected.push_back(static_cast<int32_t>((engine() >> 11) >> 51));
    EXPECT_EQ(tokens, expected);
    EXPECT_EQ(tokens, (std::vector<int32_t>{3, 2, 3, 0, 3, 0, 2, 1, 1, 1, 0, 2}));
}

TEST(Sampler, LogitBiasForcesAndBansUnderGreedy) {
    const std::vector<float> logits{1.0f, 3.0f, 2.0f, 0.5f};
    SamplingParams forced = plain(0.0f);
    forced.logit_bias = {{3, 100.0f}};
    EXPECT_EQ(Sampler(forced).sample(logits, {}), 3);
    SamplingParams banned = plain(0.0f);
    banned.logit_bias = {{1, -100.0f}};
    EXPECT_EQ(Sampler(banned).sample(logits, {}), 2);
    // A banned token is (in effect) never drawn when sampling either.
    banned.temperature = 1.0f;
    EXPECT_FALSE(histogram(banned, logits, 2000).contains(1));
}

// Bias first, then the penalty: 1 - 3 = -2, times 2 = -4, below token 1's -3. The other order would give
// 1 / 2 - 3 = -2.5 and choose token 0.
TEST(Sampler, LogitBiasComesBeforeThePenalties) {
    const std::vector<float> logits{1.0f, -3.0f};
    SamplingParams params = plain(0.0f);
    params.repeat_penalty = 2.0f;
    params.repeat_last_n = 8;
    params.logit_bias = {{0, -3.0f}};
    EXPECT_EQ(Sampler(params).sample(logits, std::vector<int32_t>{0}), 1);
}

std::vector<uint64_t> mask_of(size_t vocab, const std::vector<int32_t>& ids) {
    std::vector<uint64_t> mask((vocab + 63) / 64, 0);
    for (int32_t id : ids) mask[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
    return mask;
}

TEST(Sampler, MaskedOutTokensAreNeverChosen) {
    std::vector<float> logits(130, 0.0f);
    logits[5] = 10.0f;  // the best, but masked out
    logits[70] = 1.0f;
    logits[129] = 2.0f;
    const std::vector<uint64_t> mask = mask_of(logits.size(), {3, 70, 129});
    Sampler greedy(plain(0.0f));
    EXPECT_EQ(greedy.sample(logits, {}, mask), 129);
    Sampler sampler(plain(1.0f, 5));
    std::set<int32_t> seen;
    for (int i = 0; i < 500; ++i) seen.insert(sampler.sample(logits, {}, mask));
    EXPECT_EQ(seen, (std::set<int32_t>{3, 70, 129}));
    // Every allowed logit -inf (or NaN): still an allowed token, never a better disallowed one.
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> hopeless(130, 1.0f);
    hopeless[70] = -inf;
    hopeless[3] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_EQ(Sampler(plain(0.0f)).sample(hopeless, {}, mask_of(130, {3, 70})), 3);
    EXPECT_EQ(Sampler(plain(1.0f)).sample(hopeless, {}, mask_of(130, {70})), 70);
}

// A mask that allows every token changes nothing: the same seeded sequence with all filters on.
TEST(Sampler, AFullMaskSamplesAsNoMask) {
    std::mt19937 random(7);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    SamplingParams params{.temperature = 0.9f, .top_k = 40, .top_p = 0.9f, .min_p = 0.02f, .repeat_penalty = 1.1f,
                          .repeat_last_n = 16, .seed = 99};
    for (const int32_t top_k : {0, 1, 40}) {
        params.top_k = top_k;
        Sampler plain_sampler(params), masked(params);
        std::vector<int32_t> recent;
        for (int step = 0; step < 100; ++step) {
            std::vector<float> logits(1000);
            for (float& l : logits) l = normal(random);
            const std::vector<uint64_t> all(16, ~uint64_t{0});
            const int32_t a = plain_sampler.sample(logits, recent), b = masked.sample(logits, recent, all);
            ASSERT_EQ(a, b) << "top_k " << top_k << ", step " << step;
            recent.push_back(a);
        }
    }
}

TEST(Sampler, RejectsAMaskThatAllowsNothingOrIsShort) {
    const std::vector<float> logits(100, 0.0f);
    for (const float temperature : {0.0f, 1.0f}) {
        Sampler sampler(plain(temperature));
        try {
            sampler.sample(logits, {}, mask_of(100, {}));
            FAIL() << "expected cellm::Error";
        } catch (const Error& e) {
            EXPECT_STREQ(e.what(), "no token is allowed here");
        }
        const std::vector<uint64_t> one_word{~uint64_t{0}};
        EXPECT_THROW(sampler.sample(logits, {}, one_word), Error);
    }
    SamplingParams biased = plain(0.0f);
    biased.logit_bias = {{100, 1.0f}};
    EXPECT_THROW(Sampler(biased).sample(logits, {}), Error);
}

TEST(Sampler, RejectsBadInputWithAnError) {
    Sampler sampler(plain());
    EXPECT_THROW(sampler.sample({}, {}), Error);
    SamplingParams params = plain();
    params.repeat_penalty = 1.1f;
    params.repeat_last_n = 8;
    Sampler penalized(params);
    const std::vector<float> logits{1.0f, 2.0f};
    try {
        penalized.sample(logits, std::vector<int32_t>{5});
        FAIL() << "expected cellm::Error";
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "sampler: recent token id 5 outside the vocabulary of 2");
    }
}

}  // namespace
}  // namespace cellm
