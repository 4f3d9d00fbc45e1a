// Schedule: a recurring timer's schedule, parsed from text, and the
// calculation of its next fire time in an IANA time zone.
//
// Accepted (the grammar and the DST rules are in doc/cron.md):
//   5 fields  "min hour day-of-month month day-of-week"    "30 9 * * MON-FRI"
//   6 fields  "sec min hour day-of-month month day-of-week" "*/10 * * * * *"
//   macros    @yearly @annually @monthly @weekly @daily @midnight @hourly
//   interval  "@every 90s", "@every 1h30m" (fixed, from the timer's anchor)
// with lists, ranges, steps, month and day names, 7 for Sunday, `?` for
// `*`, and in the day fields L, LW, nW, L-n, d#n and dL.
//
// Time zone rules, in short: a schedule names local wall-clock times. A
// local time that happens twice (fall back) fires once, at its first
// occurrence; one that does not exist (spring forward) fires once, at the
// end of the gap. `@every` ignores the zone.
#pragma once

#include <bitset>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "cron/zone.h"

namespace delayd::cron {

class Schedule {
 public:
  // Parses `text`; an error names the part at fault ("minute field: 61 is
  // out of range 0-59").
  static Result<Schedule> Parse(std::string_view text);

  // The first fire time strictly after `after_ms` (wall ms), or nullopt when
  // there is none within 30 years (a 30th of February). `anchor_ms` is the
  // origin of an @every interval (fires at anchor + k * interval); cron
  // fields ignore it.
  std::optional<int64_t> Next(int64_t after_ms, const Zone& zone, int64_t anchor_ms = 0) const;

  bool is_interval() const { return interval_ms_ > 0; }
  int64_t interval_ms() const { return interval_ms_; }

 private:
  struct DayRules {
    std::bitset<32> days;              // day of month 1-31
    bool last = false;                 // L
    std::vector<int> before_last;      // L-n
    std::vector<int> nearest_weekday;  // nW
    bool last_weekday = false;         // LW
    bool any = true;                   // * or ?
  };
  struct WeekdayRules {
    std::bitset<7> days;                   // 0 = Sunday
    std::vector<std::pair<int, int>> nth;  // d#n: weekday, 1-5
    std::vector<int> last;                 // dL: last such weekday of the month
    bool any = true;
  };

  bool MatchesDay(int year, unsigned month, unsigned day) const;
  // The first time of day at or after (h, m, s) that the fields allow.
  bool FirstTime(int& h, int& m, int& s) const;

  int64_t interval_ms_ = 0;
  std::bitset<60> seconds_, minutes_;
  std::bitset<24> hours_;
  std::bitset<13> months_;  // 1-12
  DayRules dom_;
  WeekdayRules dow_;
};

// The zone named `name` ("Asia/Shanghai", "UTC"), or an error naming it.
inline Result<Zone> FindZone(const std::string& name) { return Zone::Find(name); }

}  // namespace delayd::cron
