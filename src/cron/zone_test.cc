// The zone rules the scheduler uses, checked against an independent reading
// of the same compiled tzdata: glibc's localtime_r with TZ set, which applies
// each TZif file's POSIX footer rule beyond its last stored transition.
#include "cron/zone.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "common/time_format.h"
#include "cron/schedule.h"

namespace delayd::cron {
namespace {

// glibc's view of zone `name` while alive (single-threaded tests only).
class GlibcZone {
 public:
  explicit GlibcZone(const std::string& name) {
    setenv("TZ", name.c_str(), 1);
    tzset();
  }
  ~GlibcZone() {
    unsetenv("TZ");
    tzset();
  }
  std::tm Local(int64_t unix_s) const {
    const time_t t = static_cast<time_t>(unix_s);
    std::tm tm{};
    localtime_r(&t, &tm);
    return tm;
  }
};

std::vector<std::string> AllZones() {
  std::vector<std::string> zones = {"UTC"};
  std::ifstream tab("/usr/share/zoneinfo/zone1970.tab");
  std::string line;
  while (std::getline(tab, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string codes, coordinates, name;
    fields >> codes >> coordinates >> name;
    if (!name.empty()) zones.push_back(name);
  }
  return zones;
}

std::string Utc(int64_t ms) { return FormatRfc3339Ms(ms); }

TEST(ZoneTest, DaylightSavingRulesHoldBeyond2037) {
  // The defect: from 2038 on, date/tz used the last stored offset all year.
  Zone berlin = Zone::Find("Europe/Berlin").value();
  Zone new_york = Zone::Find("America/New_York").value();
  Schedule noon = Schedule::Parse("0 12 1 7 *").value();
  int64_t at = *ParseRfc3339("2036-01-01T00:00:00Z");
  std::vector<std::string> fires;
  for (int i = 0; i < 4; ++i) fires.push_back(Utc(at = *noon.Next(at, berlin)));
  EXPECT_EQ(fires,
            (std::vector<std::string>{"2036-07-01T10:00:00.000Z", "2037-07-01T10:00:00.000Z",
                                      "2038-07-01T10:00:00.000Z", "2039-07-01T10:00:00.000Z"}));
  at = *ParseRfc3339("2099-01-01T00:00:00Z");
  EXPECT_EQ(Utc(*noon.Next(at, new_york)), "2099-07-01T16:00:00.000Z");  // 12:00 EDT
  EXPECT_EQ(berlin.OffsetAt(*ParseRfc3339("2100-07-01T00:00:00Z") / 1000), 7200);
  EXPECT_EQ(berlin.OffsetAt(*ParseRfc3339("2100-12-01T00:00:00Z") / 1000), 3600);
}

TEST(ZoneTest, LocalTimesInGapsAndOverlaps) {
  Zone ny = Zone::Find("America/New_York").value();
  auto local = [](const char* t) { return *ParseRfc3339(t) / 1000; };  // read as if UTC
  Zone::Instant gap = ny.FromLocal(local("2040-03-11T02:30:00Z"));
  EXPECT_EQ(gap.kind, Zone::Instant::Kind::kSkipped);
  EXPECT_EQ(Utc(gap.unix_s * 1000), "2040-03-11T07:00:00.000Z");  // 03:00 EDT
  Zone::Instant twice = ny.FromLocal(local("2040-11-04T01:30:00Z"));
  EXPECT_EQ(twice.kind, Zone::Instant::Kind::kRepeated);
  EXPECT_EQ(Utc(twice.unix_s * 1000), "2040-11-04T05:30:00.000Z");  // the first, EDT
  EXPECT_EQ(ny.FromLocal(local("2040-07-01T12:00:00Z")).kind, Zone::Instant::Kind::kUnique);
}

TEST(ZoneTest, IanaNamesAreFound) {
  for (const char* ok : {"UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+5",
                         "Asia/Shanghai", "America/Port-au-Prince"}) {
    EXPECT_TRUE(Zone::Find(ok).ok()) << ok;
  }
}

TEST(ZoneTest, UnknownNamesAreRefused) {
  // A path would be read from disk: "/etc/localtime" is a real zone file.
  for (const char* bad :
       {"", "Mars/Olympus_Mons", "Fixed/UTC+01:00", "../../etc/passwd", "/etc/localtime",
        "/usr/share/zoneinfo/UTC", "Europe//Berlin", "Europe/Berlin/", "./UTC", "Europe/../UTC"}) {
    Result<Zone> z = Zone::Find(bad);
    ASSERT_FALSE(z.ok()) << bad;
    EXPECT_EQ(z.status().field(), "timezone");
  }
}

// A random cron schedule whose fields are known, to check fires against.
struct RandomSchedule {
  std::string text;
  std::vector<int> minutes, hours;   // one or two values each
  int dom = 0, month = 0, dow = -1;  // 0 / -1: any
  bool hourly = false;               // every hour: started just before a clock change
  bool Matches(const std::tm& tm) const {
    auto in = [](const std::vector<int>& v, int x) {
      return std::find(v.begin(), v.end(), x) != v.end();
    };
    if (tm.tm_sec != 0 || !in(minutes, tm.tm_min) || !in(hours, tm.tm_hour)) return false;
    if (month != 0 && tm.tm_mon + 1 != month) return false;
    const bool dom_ok = dom == 0 || tm.tm_mday == dom;
    const bool dow_ok = dow < 0 || tm.tm_wday == dow;
    return dom != 0 && dow >= 0 ? dom_ok || dow_ok : dom_ok && dow_ok;  // cron's day rule
  }
};

RandomSchedule MakeSchedule(std::mt19937_64& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  RandomSchedule s;
  auto list = [](const std::vector<int>& v) {
    std::string out;
    for (int x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
    return out;
  };
  s.minutes = {pick(0, 59)};
  if (pick(0, 1)) s.minutes.push_back((s.minutes[0] + 30) % 60);
  if (pick(0, 2) == 0) {
    s.hourly = true;
    for (int h = 0; h < 24; ++h) s.hours.push_back(h);
    s.text = list(s.minutes) + " * * * *";
    return s;
  }
  // Half the hours fall where clocks change (00:00-03:59 local in most zones).
  s.hours = {pick(0, 1) ? pick(0, 3) : pick(0, 23)};
  if (pick(0, 2) == 0) s.hours.push_back((s.hours[0] + 12) % 24);
  if (pick(0, 3) == 0) s.dom = pick(1, 28);
  if (pick(0, 2) == 0) s.month = pick(1, 12);
  if (pick(0, 4) == 0) s.dow = pick(0, 6);
  s.text = list(s.minutes) + " " + list(s.hours) + " " + (s.dom ? std::to_string(s.dom) : "*") +
           " " + (s.month ? std::to_string(s.month) : "*") + " " +
           (s.dow >= 0 ? std::to_string(s.dow) : "*");
  return s;
}

TEST(ZoneTest, EveryFireAgreesWithGlibcForRandomSchedulesInEveryZoneUpTo2100) {
  const std::vector<std::string> zones = AllZones();
  ASSERT_GT(zones.size(), 300u) << "zone1970.tab from Debian's tzdata";
  std::mt19937_64 rng(20261122);
  const int64_t first_s = 0;                  // 1970
  const int64_t last_s = 4'133'980'799;       // 2100-12-31T23:59:59Z
  const int64_t start_range = 4'070'908'800;  // starts up to 2099
  int pairs = 0, fires = 0, gap_fires = 0, offset_disagreements = 0, time_disagreements = 0,
      repeat_disagreements = 0, changes_crossed = 0;
  int min_year = 9999, max_year = 0;
  for (int i = 0; i < 6000; ++i) {
    const std::string& name = zones[rng() % zones.size()];
    const RandomSchedule s = MakeSchedule(rng);
    Result<Schedule> schedule = Schedule::Parse(s.text);
    ASSERT_TRUE(schedule.ok()) << s.text;
    Result<Zone> zone = Zone::Find(name);
    ASSERT_TRUE(zone.ok()) << name;
    GlibcZone glibc(name);
    ++pairs;
    int64_t start = std::uniform_int_distribution<int64_t>(first_s, start_range)(rng);
    if (s.hourly) {
      // Start half a day before the zone's next clock change, if it has one
      // within a year, so the fires cross it.
      const long offset = glibc.Local(start).tm_gmtoff;
      for (int64_t t = start; t < start + 366 * 86400; t += 3600) {
        if (glibc.Local(t).tm_gmtoff != offset) {
          start = t - 12 * 3600;
          break;
        }
      }
    }
    int64_t at_ms = start * 1000;
    int64_t last_local = INT64_MIN;
    for (int k = 0; k < (s.hourly ? 24 : 5); ++k) {
      std::optional<int64_t> next = schedule->Next(at_ms, *zone);
      if (!next || *next / 1000 > last_s) break;
      ASSERT_GT(*next, at_ms);
      at_ms = *next;
      const int64_t t = at_ms / 1000;
      const std::tm tm = glibc.Local(t);
      ++fires;
      if (k > 0 && glibc.Local(t - 3600).tm_gmtoff != tm.tm_gmtoff) ++changes_crossed;
      min_year = std::min(min_year, tm.tm_year + 1900);
      max_year = std::max(max_year, tm.tm_year + 1900);
      if (zone->OffsetAt(t) != tm.tm_gmtoff) {
        ++offset_disagreements;
        ADD_FAILURE() << name << " at " << Utc(at_ms) << ": offset " << zone->OffsetAt(t)
                      << " s, glibc says " << tm.tm_gmtoff << " s";
        continue;
      }
      // doc/cron.md: a local time that happens twice fires once, at its first
      // occurrence, so local times only move forward from fire to fire.
      const int64_t local = t + tm.tm_gmtoff;
      if (local <= last_local) {
        ++repeat_disagreements;
        ADD_FAILURE() << "'" << s.text << "' in " << name << " fired again at local time "
                      << Utc(local * 1000) << " (" << Utc(at_ms) << ")";
      }
      last_local = local;
      if (s.Matches(tm)) continue;
      // doc/cron.md: a local time that does not exist fires once, at the end
      // of the gap: the instant the offset changes.
      if (glibc.Local(t - 1).tm_gmtoff < tm.tm_gmtoff) {
        ++gap_fires;
        continue;
      }
      ++time_disagreements;
      char wall[32];
      strftime(wall, sizeof wall, "%FT%T", &tm);
      ADD_FAILURE() << "'" << s.text << "' in " << name << " fired at " << Utc(at_ms) << ", local "
                    << wall << ", which the schedule does not name";
    }
  }
  std::cout << pairs << " random schedule/zone pairs over " << zones.size() << " zones, " << fires
            << " fire times from " << min_year << " to " << max_year << " (" << changes_crossed
            << " just after a clock change, " << gap_fires
            << " at the end of a gap): " << offset_disagreements << " offset, "
            << time_disagreements << " local-time and " << repeat_disagreements
            << " repeated-time disagreements with glibc\n";
  EXPECT_GT(fires, 20'000);
  EXPECT_LE(min_year, 1975);
  EXPECT_GE(max_year, 2099);
  EXPECT_GT(gap_fires, 100) << "the gaps were exercised";
  EXPECT_GT(changes_crossed, 300) << "clock changes were crossed";
}

}  // namespace
}  // namespace delayd::cron
