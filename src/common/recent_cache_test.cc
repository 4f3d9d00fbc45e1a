#include "common/recent_cache.h"

#include <gtest/gtest.h>

#include <string>

namespace delayd {
namespace {

// A key is made once while it is held; N keys are held, and a miss once
// full replaces the oldest.
TEST(RecentCacheTest, AKeyIsMadeOnceWhileHeldAndTheOldestGoesFirst) {
  RecentCache<std::string, 3> cache;
  int made = 0;
  auto make = [&](std::string_view key) {
    ++made;
    return "value of " + std::string(key);
  };
  EXPECT_EQ(cache.Get("a", make), "value of a");
  EXPECT_EQ(cache.Get("a", make), "value of a");
  EXPECT_EQ(made, 1);
  cache.Get("b", make);
  cache.Get("c", make);
  EXPECT_EQ(made, 3);
  EXPECT_EQ(cache.Get("a", make), "value of a");
  EXPECT_EQ(made, 3) << "all three held";
  cache.Get("d", make);  // replaces a, the oldest made
  EXPECT_EQ(made, 4);
  EXPECT_EQ(cache.Get("b", make), "value of b");
  EXPECT_EQ(cache.Get("c", make), "value of c");
  EXPECT_EQ(made, 4) << "b and c still held";
  EXPECT_EQ(cache.Get("a", make), "value of a");
  EXPECT_EQ(made, 5) << "a was replaced, so made anew (replacing b)";
  cache.Get("b", make);
  EXPECT_EQ(made, 6);
}

}  // namespace
}  // namespace delayd
