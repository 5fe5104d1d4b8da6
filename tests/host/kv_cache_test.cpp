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
            else EXPECT_EQ(pool.n_free(), 0);
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
        const std::set<int32_t> distinct(held.begin(), held.end());
        ASSERT_EQ(pool.n_free() + static_cast<int32_t>(distinct.size()), 64) << "after operation " << op;
    }
    for (int32_t b : held) pool.release(b);
    EXPECT_EQ(pool.n_free(), 64);
}

}  // namespace
}  // namespace cellm
