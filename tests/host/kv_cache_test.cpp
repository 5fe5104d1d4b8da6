// The block pool hands out each block once, counts references, and never leaks under random use.
#include "error.h"
#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace cellm {
namespace {

TEST(BlockPool, HandsOutEveryBlockOnceThenRunsOut) {
    BlockPool pool(4);
    std::set<int32_t> got;
    for (int i = 0; i < 4; ++i) got.insert(pool.allocate());
    EXPECT_EQ(got, (std::set<int32_t>{0, 1, 2, 3}));
    EXPECT_EQ(pool.allocate(), -1);
    pool.release(2);
    EXPECT_EQ(pool.allocate(), 2);
}

TEST(BlockPool, SharedBlocksReturnWhenTheLastHolderReleases) {
    BlockPool pool(2);
    const int32_t b = pool.allocate();
    pool.retain(b);
    pool.release(b);
    EXPECT_EQ(pool.n_free(), 1);
    pool.release(b);
    EXPECT_EQ(pool.n_free(), 2);
    EXPECT_THROW(pool.release(b), Error);
}

TEST(BlockPool, RandomAllocateRetainReleaseNeverLeaks) {
    std::mt19937 rng(1234);
    BlockPool pool(64);
    std::vector<int32_t> held;  // one entry per reference
    for (int op = 0; op < 20000; ++op) {
        const auto what = rng() % 3;
        if (what == 0) {
            const int32_t b = pool.allocate();
            if (b >= 0) held.push_back(b);
            else EXPECT_EQ(pool.n_free_committed(), 0);
        } else if (what == 1 && !held.empty()) {
            const int32_t b = held[rng() % held.size()];
            pool.retain(b);
            held.push_back(b);
        } else if (!held.empty()) {
            const size_t i = rng() % held.size();
            pool.release(held[i]);
            held[i] = held.back();
            held.pop_back();
        }
        if (what == 2 && rng() % 8 == 0) {
            // Publish something, or move the top of the committed blocks.
            if (!held.empty()) pool.publish(held[rng() % held.size()], static_cast<BlockHash>(rng() % 100 + 1));
            if (rng() % 2 == 0 && pool.n_committed() < 64) pool.grow(1);
            else if (pool.n_committed() > 0) pool.shrink(1);
        }
        const std::set<int32_t> distinct(held.begin(), held.end());
        ASSERT_EQ(pool.n_free() + static_cast<int32_t>(distinct.size()), 64) << "after operation " << op;
        for (int32_t b : distinct) ASSERT_LT(b, pool.n_committed()) << "a held block above the committed ones";
    }
    for (int32_t b : held) pool.release(b);
    EXPECT_EQ(pool.n_free(), 64);
}

TEST(BlockPool, BlankBlocksGoFirstLowestFirstThenCachedOldestFirst) {
    BlockPool pool(4);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(pool.allocate(), i);
    pool.publish(3, 33);
    pool.publish(1, 11);
    pool.release(3);  // cached, freed first
    pool.release(1);  // cached, freed later
    pool.release(2);  // blank
    EXPECT_EQ(pool.allocate(), 2) << "a blank block must go before any cached content is forgotten";
    EXPECT_EQ(pool.allocate(), 3) << "then the content freed longest ago";
    EXPECT_FALSE(pool.published(3));
    EXPECT_EQ(pool.acquire_cached(11), 1);
    EXPECT_EQ(pool.acquire_cached(33), -1);
}

TEST(BlockPool, UncommittedBlocksCountAsFreeButComeOnlyAfterGrowing) {
    BlockPool pool(8, 2);
    EXPECT_EQ(pool.n_free(), 8);
    EXPECT_EQ(pool.n_free_committed(), 2);
    EXPECT_EQ(pool.allocate(), 0);
    EXPECT_EQ(pool.allocate(), 1);
    EXPECT_EQ(pool.allocate(), -1);
    EXPECT_EQ(pool.n_free(), 6);
    pool.grow(3);
    EXPECT_EQ(pool.allocate(), 2);
    EXPECT_THROW(pool.grow(4), Error);
    // The top can go back only when all of it is free.
    EXPECT_TRUE(pool.shrink(2));
    EXPECT_EQ(pool.n_committed(), 3);
    EXPECT_FALSE(pool.shrink(1)) << "block 2 is held";
    pool.release(2);
    EXPECT_TRUE(pool.shrink(1));
    EXPECT_EQ(pool.n_committed(), 2);
    EXPECT_EQ(pool.n_free(), 6);
}

TEST(BlockPool, ShrinkForgetsTheTopsCachedContent) {
    BlockPool pool(4);
    for (int i = 0; i < 4; ++i) pool.allocate();
    pool.publish(3, 33);
    for (int i = 0; i < 4; ++i) pool.release(i);
    EXPECT_TRUE(pool.shrink(2));
    EXPECT_EQ(pool.acquire_cached(33), -1);
    EXPECT_EQ(pool.n_cached(), 0);
    EXPECT_EQ(pool.allocate(), 0);
    EXPECT_EQ(pool.allocate(), 1);
    EXPECT_EQ(pool.allocate(), -1);
}

TEST(BlockPool, RelocationKeepsTheNewestContentBelowTheTop) {
    // Blocks 0-3 below, 4-5 the top to give back. Cached: 0 (oldest), 4, 1, 5 (newest); 2 blank, 3 held.
    BlockPool pool(6);
    for (int i = 0; i < 6; ++i) pool.allocate();
    for (int b : {0, 4, 1, 5}) pool.publish(b, static_cast<BlockHash>(100 + b));
    for (int b : {0, 4, 1, 5, 2}) pool.release(b);
    std::vector<std::pair<int32_t, int32_t>> copies;
    pool.relocate_top(2, [&](int32_t from, int32_t to) { copies.emplace_back(from, to); });
    // 5 (newest) takes the blank block 2; 4 is newer than 0, so it takes 0's place; 1 stays.
    EXPECT_EQ(copies, (std::vector<std::pair<int32_t, int32_t>>{{5, 2}, {4, 0}}));
    ASSERT_TRUE(pool.shrink(2));
    EXPECT_EQ(pool.acquire_cached(105), 2);
    EXPECT_EQ(pool.acquire_cached(104), 0);
    EXPECT_EQ(pool.acquire_cached(101), 1);
    EXPECT_EQ(pool.acquire_cached(100), -1) << "the oldest content made room";
    EXPECT_EQ(pool.n_free_committed(), 0);
}

TEST(BlockPool, RelocatedContentKeepsItsAgeAmongTheCached) {
    BlockPool pool(4);
    for (int i = 0; i < 4; ++i) pool.allocate();
    for (int b : {0, 3, 1}) pool.publish(b, static_cast<BlockHash>(100 + b));
    pool.release(2);  // blank
    for (int b : {0, 3, 1}) pool.release(b);
    pool.relocate_top(1, [](int32_t, int32_t) {});
    ASSERT_TRUE(pool.shrink(1));
    // Ages now: 0 (oldest), 2 (block 3's content), 1 (newest). Allocation takes the oldest first.
    EXPECT_EQ(pool.allocate(), 0);
    EXPECT_EQ(pool.allocate(), 2);
    EXPECT_EQ(pool.allocate(), 1);
}

}  // namespace
}  // namespace cellm
