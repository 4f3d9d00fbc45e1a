// The schedule calculator against hand-checked tables. Every expected time
// is local time with its offset, so a table reads like a wall calendar;
// weekdays and DST dates were checked against a calendar and tzdata 2025b.
#include "cron/schedule.h"

#include <date/date.h>
#include <gtest/gtest.h>

#include "common/time_format.h"

namespace delayd::cron {
namespace {

// `ms` as local time with its offset, "2026-03-29T03:00:00+02:00".
std::string Local(int64_t ms, const Zone& zone) {
  const int64_t s = ms / 1000;
  const int64_t offset = zone.OffsetAt(s);
  const date::local_seconds local{std::chrono::seconds{s + offset}};
  char sign = offset < 0 ? '-' : '+';
  const int64_t a = offset < 0 ? -offset : offset;
  char tz[8];
  snprintf(tz, sizeof tz, "%c%02d:%02d", sign, static_cast<int>(a / 3600),
           static_cast<int>(a / 60 % 60));
  return date::format("%FT%T", local) + tz;
}

// The next `n` fire times after `after` (RFC 3339), as local times.
std::vector<std::string> Fires(const std::string& expr, const std::string& zone,
                               const std::string& after, int n = 1) {
  Result<Schedule> s = Schedule::Parse(expr);
  EXPECT_TRUE(s.ok()) << expr << ": " << s.status().ToString();
  Result<Zone> z = FindZone(zone);
  EXPECT_TRUE(z.ok()) << zone;
  if (!s.ok() || !z.ok()) return {};
  std::vector<std::string> out;
  int64_t at = *ParseRfc3339(after);
  for (int i = 0; i < n; ++i) {
    std::optional<int64_t> next = s->Next(at, *z);
    if (!next) {
      out.push_back("never");
      break;
    }
    EXPECT_GT(*next, at) << expr;
    out.push_back(Local(*next, *z));
    at = *next;
  }
  return out;
}

using V = std::vector<std::string>;

TEST(ScheduleTest, MonthEndsAndLeapYears) {
  // The 31st skips the months without one.
  EXPECT_EQ(
      Fires("0 0 31 * *", "UTC", "2026-01-31T00:00:00Z", 3),
      (V{"2026-03-31T00:00:00+00:00", "2026-05-31T00:00:00+00:00", "2026-07-31T00:00:00+00:00"}));
  // L is the last day, whatever its number.
  EXPECT_EQ(
      Fires("0 12 L * *", "UTC", "2026-01-31T12:00:00Z", 3),
      (V{"2026-02-28T12:00:00+00:00", "2026-03-31T12:00:00+00:00", "2026-04-30T12:00:00+00:00"}));
  EXPECT_EQ(Fires("0 12 L 2 *", "UTC", "2027-03-01T00:00:00Z"), V{"2028-02-29T12:00:00+00:00"});
  EXPECT_EQ(Fires("0 0 L-2 * *", "UTC", "2026-02-01T00:00:00Z"), V{"2026-02-26T00:00:00+00:00"});
  // 29 February: every leap year, and 2100 is not one.
  EXPECT_EQ(Fires("0 0 29 2 *", "UTC", "2026-03-01T00:00:00Z"), V{"2028-02-29T00:00:00+00:00"});
  EXPECT_EQ(Fires("0 0 29 2 *", "UTC", "2096-03-01T00:00:00Z"), V{"2104-02-29T00:00:00+00:00"});
  // A day that never comes.
  EXPECT_EQ(Fires("0 0 30 2 *", "UTC", "2026-01-01T00:00:00Z"), V{"never"});
  EXPECT_EQ(Fires("0 0 31 4,6,9,11 *", "UTC", "2026-01-01T00:00:00Z"), V{"never"});
}

TEST(ScheduleTest, NearestWeekdayLastWeekdayAndNthWeekday) {
  // 15 August 2026 is a Saturday: 15W fires on Friday the 14th.
  EXPECT_EQ(Fires("0 9 15W * *", "UTC", "2026-08-01T00:00:00Z"), V{"2026-08-14T09:00:00+00:00"});
  // 1 August 2026 is a Saturday: 1W does not leave the month, so Monday the 3rd.
  EXPECT_EQ(Fires("0 9 1W * *", "UTC", "2026-07-31T00:00:00Z"), V{"2026-08-03T09:00:00+00:00"});
  // 31 May 2026 is a Sunday: the last weekday is Friday the 29th.
  EXPECT_EQ(Fires("0 18 LW * *", "UTC", "2026-05-01T00:00:00Z"), V{"2026-05-29T18:00:00+00:00"});
  // The third Friday of December 2026 is the 18th; the last Friday of November the 27th.
  EXPECT_EQ(Fires("0 10 * * FRI#3", "UTC", "2026-12-01T00:00:00Z"), V{"2026-12-18T10:00:00+00:00"});
  EXPECT_EQ(Fires("0 10 * * 5#3", "UTC", "2026-12-01T00:00:00Z"), V{"2026-12-18T10:00:00+00:00"});
  EXPECT_EQ(Fires("0 10 * * 5L", "UTC", "2026-11-01T00:00:00Z"), V{"2026-11-27T10:00:00+00:00"});
  // 1 March 2026 is a Sunday; 7 is Sunday too.
  EXPECT_EQ(Fires("0 0 * * 7", "UTC", "2026-02-28T00:00:00Z"), V{"2026-03-01T00:00:00+00:00"});
  EXPECT_EQ(Fires("0 0 * * MON-FRI", "UTC", "2026-02-27T00:00:00Z", 2),
            (V{"2026-03-02T00:00:00+00:00", "2026-03-03T00:00:00+00:00"}));
  // Both day fields restricted: either may match (13 Feb and 13 Mar 2026 are Fridays).
  EXPECT_EQ(
      Fires("0 0 13 * FRI", "UTC", "2026-02-12T00:00:00Z", 3),
      (V{"2026-02-13T00:00:00+00:00", "2026-02-20T00:00:00+00:00", "2026-02-27T00:00:00+00:00"}));
}

TEST(ScheduleTest, FieldsStepsNamesAndSeconds) {
  EXPECT_EQ(
      Fires("*/10 * * * * *", "UTC", "2026-11-22T12:00:05Z", 3),
      (V{"2026-11-22T12:00:10+00:00", "2026-11-22T12:00:20+00:00", "2026-11-22T12:00:30+00:00"}));
  EXPECT_EQ(Fires("5/20 * * * *", "UTC", "2026-11-22T12:00:00Z", 4),
            (V{"2026-11-22T12:05:00+00:00", "2026-11-22T12:25:00+00:00",
               "2026-11-22T12:45:00+00:00", "2026-11-22T13:05:00+00:00"}));
  EXPECT_EQ(Fires("0 8-18/4 * jan,Jul ?", "UTC", "2026-06-30T00:00:00Z", 4),
            (V{"2026-07-01T08:00:00+00:00", "2026-07-01T12:00:00+00:00",
               "2026-07-01T16:00:00+00:00", "2026-07-02T08:00:00+00:00"}));
  EXPECT_EQ(Fires("@monthly", "UTC", "2026-11-22T00:00:00Z"), V{"2026-12-01T00:00:00+00:00"});
  EXPECT_EQ(Fires("@yearly", "UTC", "2026-11-22T00:00:00Z"), V{"2027-01-01T00:00:00+00:00"});
  EXPECT_EQ(Fires("@weekly", "UTC", "2026-11-22T00:00:00Z"), V{"2026-11-29T00:00:00+00:00"});
  EXPECT_EQ(Fires("@hourly", "UTC", "2026-11-22T10:59:59.999Z"), V{"2026-11-22T11:00:00+00:00"});
  // Strictly after: a fire time is not its own successor, even mid-second.
  EXPECT_EQ(Fires("@daily", "UTC", "2026-11-22T00:00:00Z"), V{"2026-11-23T00:00:00+00:00"});
  EXPECT_EQ(Fires("@daily", "UTC", "2026-11-21T23:59:59.999Z"), V{"2026-11-22T00:00:00+00:00"});
}

TEST(ScheduleTest, ShanghaiHasOneOffsetAllYear) {
  EXPECT_EQ(Fires("0 9 * * *", "Asia/Shanghai", "2026-11-22T01:00:00Z", 2),
            (V{"2026-11-23T09:00:00+08:00", "2026-11-24T09:00:00+08:00"}));
  EXPECT_EQ(Fires("0 9 * * *", "Asia/Shanghai", "2026-07-01T00:59:59Z"),
            V{"2026-07-01T09:00:00+08:00"});
}

TEST(ScheduleTest, NewYorkSpringForwardFiresAtTheEndOfTheGap) {
  // 8 March 2026: 02:00 EST becomes 03:00 EDT, so 02:30 does not exist.
  EXPECT_EQ(Fires("30 2 * * *", "America/New_York", "2026-03-07T12:00:00-05:00", 2),
            (V{"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}));
  // Every 30 minutes: 02:00 and 02:30 fall into the gap and fire once, at 03:00.
  EXPECT_EQ(
      Fires("*/30 * * * *", "America/New_York", "2026-03-08T01:45:00-05:00", 3),
      (V{"2026-03-08T03:00:00-04:00", "2026-03-08T03:30:00-04:00", "2026-03-08T04:00:00-04:00"}));
}

TEST(ScheduleTest, NewYorkFallBackFiresOnceAtTheFirstOccurrence) {
  // 1 November 2026: 02:00 EDT becomes 01:00 EST, so 01:00-01:59 happen twice.
  EXPECT_EQ(Fires("30 1 * * *", "America/New_York", "2026-10-31T12:00:00-04:00", 2),
            (V{"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}));
  // Hourly: the repeated 01:00 (EST) does not fire again.
  EXPECT_EQ(
      Fires("0 * * * *", "America/New_York", "2026-11-01T00:30:00-04:00", 3),
      (V{"2026-11-01T01:00:00-04:00", "2026-11-01T02:00:00-05:00", "2026-11-01T03:00:00-05:00"}));
  // Asked during the repeated hour, the next fire is after it.
  EXPECT_EQ(Fires("45 1 * * *", "America/New_York", "2026-11-01T01:10:00-05:00"),
            V{"2026-11-02T01:45:00-05:00"});
}

TEST(ScheduleTest, BerlinSpringForwardAndFallBack) {
  // 29 March 2026: 02:00 CET becomes 03:00 CEST.
  EXPECT_EQ(Fires("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00+01:00", 2),
            (V{"2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"}));
  // 25 October 2026: 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
  EXPECT_EQ(Fires("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00+02:00", 2),
            (V{"2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"}));
  // A daily time outside the changes keeps its local time across both.
  EXPECT_EQ(Fires("0 9 * * *", "Europe/Berlin", "2026-03-28T10:00:00+01:00", 2),
            (V{"2026-03-29T09:00:00+02:00", "2026-03-30T09:00:00+02:00"}));
}

TEST(ScheduleTest, EveryIsAFixedIntervalFromItsAnchor) {
  Result<Schedule> s = Schedule::Parse("@every 1m30s");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->is_interval());
  EXPECT_EQ(s->interval_ms(), 90'000);
  const Zone utc = FindZone("UTC").value();
  EXPECT_EQ(s->Next(1'000, utc, 10'000), 10'000) << "before the anchor: the anchor";
  EXPECT_EQ(s->Next(10'000, utc, 10'000), 100'000);
  EXPECT_EQ(s->Next(99'999, utc, 10'000), 100'000);
  EXPECT_EQ(s->Next(100'000, utc, 10'000), 190'000);
}

TEST(ScheduleTest, BadSchedulesSayWhatIsWrong) {
  auto error = [](const std::string& expr) {
    Result<Schedule> s = Schedule::Parse(expr);
    EXPECT_FALSE(s.ok()) << expr;
    if (s.ok()) return std::string();
    EXPECT_EQ(s.status().field(), "schedule") << expr;
    return s.status().message();
  };
  EXPECT_NE(error("61 * * * *").find("minute field: '61' is out of range 0-59"), std::string::npos);
  EXPECT_NE(error("* * * *").find("needs 5 fields"), std::string::npos);
  EXPECT_NE(error("* * * * * * *").find("got 7"), std::string::npos);
  EXPECT_NE(error("").find("got 0"), std::string::npos);
  EXPECT_NE(error("@fortnightly").find("unknown macro"), std::string::npos);
  EXPECT_NE(error("*/0 * * * *").find("step"), std::string::npos);
  EXPECT_NE(error("5-1 * * * *").find("ends before it starts"), std::string::npos);
  EXPECT_NE(error("0 0 * * FOO").find("day-of-week field: 'FOO'"), std::string::npos);
  EXPECT_NE(error("0 0 * 13 *").find("month field"), std::string::npos);
  EXPECT_NE(error("0 24 * * *").find("hour field"), std::string::npos);
  EXPECT_NE(error("0 0 32W * *").find("nW"), std::string::npos);
  EXPECT_NE(error("0 0 * * 5#6").find("d#n"), std::string::npos);
  EXPECT_NE(error("0 0 1,,2 * *").find("empty"), std::string::npos);
  EXPECT_NE(error("@every 0s").find("@every"), std::string::npos);
  EXPECT_NE(error("@every 1500ms").find("whole number of seconds"), std::string::npos);
  EXPECT_NE(error("@every soon").find("@every"), std::string::npos);
  EXPECT_NE(error("@every 367d").find("366d"), std::string::npos);
  EXPECT_NE(error("@every 13h33333666266660m").find("@every"), std::string::npos);
  EXPECT_TRUE(Schedule::Parse("@every 366d").ok());
  Result<Zone> zone = FindZone("Mars/Olympus_Mons");
  ASSERT_FALSE(zone.ok());
  EXPECT_EQ(zone.status().field(), "timezone");
}

}  // namespace
}  // namespace delayd::cron
