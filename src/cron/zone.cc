#include "cron/zone.h"

namespace delayd::cron {
namespace {

const absl::CivilSecond kLocalEpoch(1970, 1, 1, 0, 0, 0);

}  // namespace

Result<Zone> Zone::Find(const std::string& name) {
  absl::TimeZone tz;
  // LoadTimeZone also accepts fixed offsets such as "Fixed/UTC+01:00", which
  // are no IANA names; refuse what the zoneinfo directory does not hold.
  if (name.empty() || name.rfind("Fixed/", 0) == 0 || !absl::LoadTimeZone(name, &tz)) {
    return Status::InvalidField("timezone", "unknown time zone '" + name +
                                                "'; use an IANA name such as Europe/Berlin or UTC");
  }
  return Zone(tz);
}

int64_t Zone::ToLocal(int64_t unix_s) const {
  return absl::ToCivilSecond(absl::FromUnixSeconds(unix_s), tz_) - kLocalEpoch;
}

Zone::Instant Zone::FromLocal(int64_t local_s) const {
  const absl::TimeZone::TimeInfo info = tz_.At(kLocalEpoch + local_s);
  switch (info.kind) {
    case absl::TimeZone::TimeInfo::SKIPPED:
      return {Instant::Kind::kSkipped, absl::ToUnixSeconds(info.trans)};
    case absl::TimeZone::TimeInfo::REPEATED:
      return {Instant::Kind::kRepeated, absl::ToUnixSeconds(info.pre)};
    case absl::TimeZone::TimeInfo::UNIQUE:
      break;
  }
  return {Instant::Kind::kUnique, absl::ToUnixSeconds(info.pre)};
}

}  // namespace delayd::cron
