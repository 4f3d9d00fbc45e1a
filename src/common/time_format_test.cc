#include "common/time_format.h"

#include <gtest/gtest.h>

namespace delayd {
namespace {

TEST(TimeFormatTest, FormatsWithMilliseconds) {
  EXPECT_EQ(FormatRfc3339Ms(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(FormatRfc3339Ms(1'795'306'980'455), "2026-11-22T00:23:00.455Z");
  EXPECT_EQ(FormatRfc3339Ms(951'825'599'999), "2000-02-29T11:59:59.999Z");
  EXPECT_EQ(FormatRfc3339Ms(-1), "1969-12-31T23:59:59.999Z");
  // Beyond four-digit years the slow path still writes every digit.
  EXPECT_EQ(FormatRfc3339Ms(253'402'300'800'000), "10000-01-01T00:00:00.000Z");
}

TEST(TimeFormatTest, FormattedTimesParseBack) {
  for (int64_t ms = -86'400'000LL * 800; ms < 86'400'000LL * 365 * 400; ms += 7'919'999'937) {
    EXPECT_EQ(ParseRfc3339(FormatRfc3339Ms(ms)), ms) << FormatRfc3339Ms(ms);
  }
}

TEST(TimeFormatTest, ParsesOffsetsFractionsAndRejectsImpossibleDates) {
  EXPECT_EQ(ParseRfc3339("2026-11-22T00:23:00.455Z"), 1'795'306'980'455);
  EXPECT_EQ(ParseRfc3339("2026-11-22T08:23:00.455+08:00"), 1'795'306'980'455);
  EXPECT_EQ(ParseRfc3339("2026-11-22t00:23:00.4z"), 1'795'306'980'400);
  EXPECT_EQ(ParseRfc3339("2024-02-29T00:00:00Z").has_value(), true);
  for (const char* bad : {"2026-02-29T00:00:00Z", "2026-02-30T00:00:00Z", "2026-13-01T00:00:00Z",
                          "2026-11-22T24:00:00Z", "2026-11-22T00:00:00", "2026-11-22",
                          "2026-11-22T00:00:00.Z", "2026-11-22T00:00:00Zjunk", ""}) {
    EXPECT_FALSE(ParseRfc3339(bad).has_value()) << bad;
  }
}

TEST(TimeFormatTest, ParsesDurations) {
  EXPECT_EQ(ParseDurationMs("30m"), 1'800'000);
  EXPECT_EQ(ParseDurationMs("1h30m"), 5'400'000);
  EXPECT_EQ(ParseDurationMs("250ms"), 250);
  EXPECT_EQ(ParseDurationMs("1.5s"), 1500);
  EXPECT_EQ(ParseDurationMs("2d"), 172'800'000);
  for (const char* bad : {"", "m", "10", "10x", "-5s", "1h-2m", "1e400d"}) {
    EXPECT_FALSE(ParseDurationMs(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace delayd
