#include "cron/zone.h"

#include <cctype>
#include <string_view>

namespace delayd::cron {
namespace {

const absl::CivilSecond kLocalEpoch(1970, 1, 1, 0, 0, 0);

}  // namespace

namespace {
// "Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+5", "UTC": one
// to three parts of [A-Za-z0-9_+-], each starting with a letter.
bool IanaName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name.rfind("Fixed/", 0) == 0) return false;
  size_t parts = 0;
  size_t start = 0;
  for (;;) {
    const size_t slash = name.find('/', start);
    const std::string_view part =
        std::string_view(name).substr(start, slash == name.npos ? name.npos : slash - start);
    if (part.empty() || !std::isalpha(static_cast<unsigned char>(part.front()))) return false;
    for (char c : part) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '+') {
        return false;
      }
    }
    if (++parts > 3) return false;
    if (slash == name.npos) return true;
    start = slash + 1;
  }
}
}  // namespace

Result<Zone> Zone::Find(const std::string& name) {
  absl::TimeZone tz;
  // LoadTimeZone also accepts fixed offsets such as "Fixed/UTC+01:00", which
  // are no IANA names, and a file path ("/etc/localtime", "../../x"), which
  // it reads from disk: only IANA names (or UTC), made of the letters,
  // digits and punctuation the tz database uses, pass to it.
  if (!IanaName(name) || !absl::LoadTimeZone(name, &tz)) {
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
