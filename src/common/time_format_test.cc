#include "common/time_format.h"

#include <gtest/gtest.h>

#include <random>

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
  for (int64_t ms = 0; ms < 86'400'000LL * 365 * 400; ms += 7'919'999'937) {
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
  for (const char* bad : {"", "m", "10", "10x", "-5s", "1h-2m", "1e400d", ".s", "1.s", "s5"}) {
    EXPECT_FALSE(ParseDurationMs(bad).has_value()) << bad;
  }
  EXPECT_EQ(ParseDurationMs("0.0015s"), 2) << "a fraction rounds to the nearest ms";
  EXPECT_EQ(ParseDurationMs(".5s"), 500);
}

// Every duration either parses to exactly what it says or is refused: no
// spelling wraps into the past or rounds through a double.
TEST(TimeFormatTest, ExtremeDurationsAreExactOrRefusedAsTooLarge) {
  const std::pair<const char*, int64_t> scales[] = {
      {"ms", 1}, {"s", 1000}, {"m", 60'000}, {"h", 3'600'000}, {"d", 86'400'000}};
  std::mt19937_64 rng(29);
  for (int i = 0; i < 20000; ++i) {
    const auto& [unit, scale] = scales[rng() % 5];
    // Values around every power of two, where wrapping would start.
    const int shift = static_cast<int>(rng() % 64);
    const uint64_t n = (uint64_t{1} << shift) + (rng() % 3) - 1;
    const std::string text = std::to_string(n) + unit;
    bool overflow = false;
    std::optional<int64_t> ms = ParseDurationMs(text, &overflow);
    __int128 exact = static_cast<__int128>(n) * scale;
    if (exact > INT64_MAX) {
      EXPECT_FALSE(ms.has_value()) << text;
      EXPECT_TRUE(overflow) << text;
    } else {
      ASSERT_TRUE(ms.has_value()) << text;
      EXPECT_EQ(*ms, static_cast<int64_t>(exact)) << text;
      EXPECT_FALSE(overflow);
    }
  }
  // A sum of parts that each fit but together do not.
  bool overflow = false;
  EXPECT_FALSE(ParseDurationMs("2562047788000h2562047788000h", &overflow).has_value());
  EXPECT_TRUE(overflow);
  // Issue 29's shift: 292,277 years in ms fits; in microseconds it wrapped.
  // Parsed exactly here, ParseMillis refuses it as past 2^32-1 s.
  EXPECT_EQ(ParseDurationMs("2562047788h"), int64_t{2562047788} * 3'600'000);
  EXPECT_FALSE(ParseDurationMs("99999999999999999999999ms", &overflow).has_value());
  // The largest whole part plus a fraction that carries it past the limit.
  overflow = false;
  EXPECT_FALSE(ParseDurationMs("9223372036854775807ms1.5ms", &overflow).has_value());
  EXPECT_TRUE(overflow);
  overflow = false;
  EXPECT_FALSE(ParseDurationMs("9223372036854775.807999s", &overflow).has_value());
  EXPECT_TRUE(overflow);
  EXPECT_EQ(ParseDurationMs("2562047h"), int64_t{2562047} * 3'600'000);
}

TEST(TimeFormatTest, TimesOutsideTheEpochToYear9999AreRefused) {
  EXPECT_EQ(ParseRfc3339("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(ParseRfc3339("9999-12-31T23:59:59.999Z"), kMaxTimeMs);
  for (const char* bad : {"1969-12-31T23:59:59.999Z", "0000-01-01T00:00:00Z",
                          "1970-01-01T00:00:00+00:01", "9999-12-31T23:59:59.999-00:01"}) {
    EXPECT_FALSE(ParseRfc3339(bad).has_value()) << bad;
  }
  EXPECT_EQ(FormatRfc3339Ms(kMaxTimeMs), "9999-12-31T23:59:59.999Z");
}

}  // namespace
}  // namespace delayd
