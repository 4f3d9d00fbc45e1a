#include "store/stale_reads.h"

#include <gtest/gtest.h>

namespace delayd::store {
namespace {

TEST(StaleReadsTest, AChangeCountsOnlyForReadsThatStartedBeforeIt) {
  StaleReads log;
  log.Changed(1);  // no read in flight: nothing can have seen it before
  const uint64_t first = log.Begin();
  EXPECT_FALSE(log.ChangedSince(1, first));
  log.Changed(2);
  const uint64_t second = log.Begin();
  log.Changed(3);
  EXPECT_TRUE(log.ChangedSince(2, first));
  EXPECT_FALSE(log.ChangedSince(2, second)) << "changed before the second read began";
  EXPECT_TRUE(log.ChangedSince(3, first));
  EXPECT_TRUE(log.ChangedSince(3, second));
  EXPECT_EQ(log.ChangedIdsSince(second), std::vector<uint64_t>{3});
  log.End(first);
  EXPECT_TRUE(log.ChangedSince(3, second)) << "still needed by the second read";
  EXPECT_EQ(log.ChangedIdsSince(0), std::vector<uint64_t>{3}) << "2 predates every read left";
  log.End(second);
  EXPECT_TRUE(log.ChangedIdsSince(0).empty()) << "kept with no read in flight";
}

TEST(StaleReadsTest, ALaterChangeOfTheSameRecordKeepsItMarked) {
  StaleReads log;
  const uint64_t a = log.Begin();
  log.Changed(7);
  const uint64_t b = log.Begin();
  log.Changed(7);
  log.End(a);  // drops the first entry of 7, not the second
  EXPECT_TRUE(log.ChangedSince(7, b));
  log.End(b);
  EXPECT_FALSE(log.ChangedSince(7, 0));
}

}  // namespace
}  // namespace delayd::store
