// The payload of due notices: what one node writes, another reads back, and
// a malformed entry (a payload is plain text anyone may NOTIFY) is skipped
// without taking its neighbours with it.
#include "store/shared_queue.h"

#include <gtest/gtest.h>

namespace delayd::store {
namespace {

TEST(DueNoticeTest, EntriesComeBackAsWritten) {
  const std::vector<DueEntry> entries = {
      {0, 1, 0}, {255, 18446744073709551615ull, 1'700'000'000'123}, {7, 42, -5}};
  const std::string payload = FormatDue(entries);
  EXPECT_EQ(payload, "0 1 0;255 18446744073709551615 1700000000123;7 42 -5");
  EXPECT_EQ(ParseDue(payload), entries);
  EXPECT_TRUE(ParseDue("").empty());
  EXPECT_EQ(FormatDue({}), "");
}

TEST(DueNoticeTest, AMalformedEntryIsSkippedAlone) {
  const auto parsed = ParseDue("1 2 3;x;4 5;6 7 8 9;;1 2 3x;10 11 12;-1 2 3");
  // "-1 2 3" is a negative shard: from_chars reads it, and the owner of no
  // shard -1 ignores it; the rest are not entries.
  ASSERT_EQ(parsed.size(), 3u);
  EXPECT_TRUE((parsed[0] == DueEntry{1, 2, 3}));
  EXPECT_TRUE((parsed[1] == DueEntry{10, 11, 12}));
  EXPECT_EQ(parsed[2].shard, -1);
}

TEST(DueNoticeTest, TheMostEntriesANoticeCarriesFitItsLimit) {
  // PgStore sends 150 entries per notice; PostgreSQL takes 8000 bytes.
  std::vector<DueEntry> worst(150, DueEntry{32767, 18446744073709551615ull, INT64_MIN});
  EXPECT_LT(FormatDue(worst).size(), 8000u);
  EXPECT_EQ(ParseDue(FormatDue(worst)).size(), 150u);
}

}  // namespace
}  // namespace delayd::store
