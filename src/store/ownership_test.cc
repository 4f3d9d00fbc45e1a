// Ownership: what every owner-side part is told after a lease round.
#include "store/ownership.h"

#include <gtest/gtest.h>

namespace delayd::store {
namespace {

TEST(OwnershipTest, SinceNamesShardsLostGainedAndRetakenAtANewEpoch) {
  const Ownership before({{1, 5}, {2, 7}, {3, 9}});
  const Ownership now({{2, 7}, {3, 10}, {4, 1}});
  const Ownership::Change c = now.Since(before);
  EXPECT_EQ(c.lost, std::vector<int>({1}));
  EXPECT_EQ(c.gained, std::vector<int>({4}));
  EXPECT_EQ(c.retaken, std::vector<int>({3}));  // 2 is held at the same epoch: unchanged
}

TEST(OwnershipTest, AFenceIsTheShardAtTheEpochHeldAndNoneForAShardNotOwned) {
  const Ownership owned({{3, 10}});
  ASSERT_TRUE(owned.FenceFor(3).has_value());
  EXPECT_EQ(owned.FenceFor(3)->shard, 3);
  EXPECT_EQ(owned.FenceFor(3)->epoch, 10);
  EXPECT_FALSE(owned.FenceFor(4).has_value());
  EXPECT_TRUE(owned.Owns(3));
  EXPECT_FALSE(owned.Owns(4));
  EXPECT_EQ(owned.shards(), std::vector<int>({3}));
}

TEST(OwnershipTest, FromNothingEveryShardIsGainedAndToNothingEveryShardIsLost) {
  const Ownership some({{0, 1}, {5, 2}});
  EXPECT_EQ(some.Since(Ownership()).gained, std::vector<int>({0, 5}));
  EXPECT_EQ(Ownership().Since(some).lost, std::vector<int>({0, 5}));
  EXPECT_TRUE(some.Since(some).gained.empty());
  EXPECT_TRUE(some.Since(some).lost.empty());
  EXPECT_TRUE(some.Since(some).retaken.empty());
}

}  // namespace
}  // namespace delayd::store
