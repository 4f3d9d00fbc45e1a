// Zone: an IANA time zone as the schedule calculator needs it, read from the
// system's compiled tzdata (/usr/share/zoneinfo) by cctz, the time-zone
// library inside abseil. cctz applies the POSIX TZ rule at the end of each
// TZif file beyond the file's last stored transition; Howard Hinnant's date/tz
// over the OS database ignored it, so daylight-saving zones were an hour off
// from 2038 on. Local times are counted in seconds since 1970-01-01T00:00
// local, so calendar arithmetic stays with the caller.
//
// Thread safety: a Zone is an immutable handle; copies share the loaded rules.
#pragma once

#include <absl/time/time.h>

#include <cstdint>
#include <string>

#include "common/status.h"

namespace delayd::cron {

class Zone {
 public:
  // How a local time maps to instants.
  struct Instant {
    enum class Kind { kUnique, kSkipped, kRepeated } kind;
    // kUnique: the one instant; kRepeated (fall back): the first of the two;
    // kSkipped (spring forward): the end of the gap, when clocks jumped.
    int64_t unix_s;
  };

  Zone() = default;  // UTC

  // The zone named `name` ("Asia/Shanghai", "UTC"), or an error naming the
  // field "timezone".
  static Result<Zone> Find(const std::string& name);

  // The local time, in seconds since the local epoch, at `unix_s`.
  int64_t ToLocal(int64_t unix_s) const;
  // The instant of the local time `local_s`.
  Instant FromLocal(int64_t local_s) const;
  // The offset from UTC, in seconds, at `unix_s`.
  int64_t OffsetAt(int64_t unix_s) const { return ToLocal(unix_s) - unix_s; }

 private:
  explicit Zone(absl::TimeZone tz) : tz_(tz) {}
  absl::TimeZone tz_;  // UTC unless Find() loaded another
};

}  // namespace delayd::cron
