#include "common/time_format.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

namespace delayd {
namespace {

// Howard Hinnant's days_from_civil / civil_from_days (public domain).
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

void CivilFromDays(int64_t z, int64_t* y, unsigned* m, unsigned* d) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const unsigned doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  *d = doy - (153 * mp + 2) / 5 + 1;
  *m = mp < 10 ? mp + 3 : mp - 9;
  *y = static_cast<int64_t>(yoe) + era * 400 + (*m <= 2);
}

bool IsLeap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }
unsigned DaysInMonth(int64_t y, unsigned m) {
  static constexpr unsigned kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && IsLeap(y) ? 29 : kDays[m - 1];
}

// Reads exactly `n` digits at `pos`.
bool Digits(std::string_view s, size_t& pos, size_t n, int64_t* out) {
  if (pos + n > s.size()) return false;
  int64_t v = 0;
  for (size_t i = 0; i < n; ++i) {
    char c = s[pos + i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  pos += n;
  *out = v;
  return true;
}

bool Expect(std::string_view s, size_t& pos, char c) {
  if (pos >= s.size() || std::toupper(static_cast<unsigned char>(s[pos])) != c) return false;
  ++pos;
  return true;
}

}  // namespace

void AppendRfc3339Ms(std::string& out, int64_t wall_ms) {
  int64_t days = wall_ms >= 0 ? wall_ms / 86'400'000 : -((-wall_ms + 86'399'999) / 86'400'000);
  int64_t ms_of_day = wall_ms - days * 86'400'000;
  int64_t y;
  unsigned m, d;
  CivilFromDays(days, &y, &m, &d);
  if (y < 0 || y > 9999) {
    fmt::format_to(std::back_inserter(out), "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", y, m, d,
                   ms_of_day / 3'600'000, ms_of_day / 60'000 % 60, ms_of_day / 1000 % 60,
                   ms_of_day % 1000);
    return;
  }
  // The common case by hand: fmt's format-string parsing showed in profiles
  // of replies that carry several times per job.
  char buf[] = "0000-00-00T00:00:00.000Z";
  auto put = [&buf](int at, int64_t v, int width) {
    for (int i = width - 1; i >= 0; --i, v /= 10) buf[at + i] = static_cast<char>('0' + v % 10);
  };
  put(0, y, 4);
  put(5, m, 2);
  put(8, d, 2);
  put(11, ms_of_day / 3'600'000, 2);
  put(14, ms_of_day / 60'000 % 60, 2);
  put(17, ms_of_day / 1000 % 60, 2);
  put(20, ms_of_day % 1000, 3);
  out.append(buf, 24);
}

std::string FormatRfc3339Ms(int64_t wall_ms) {
  std::string out;
  AppendRfc3339Ms(out, wall_ms);
  return out;
}

std::optional<int64_t> ParseRfc3339(std::string_view s) {
  size_t pos = 0;
  int64_t y, mo, d, h, mi, sec;
  if (!Digits(s, pos, 4, &y) || !Expect(s, pos, '-') || !Digits(s, pos, 2, &mo) ||
      !Expect(s, pos, '-') || !Digits(s, pos, 2, &d)) {
    return std::nullopt;
  }
  if (pos < s.size() && s[pos] == ' ') {
    ++pos;
  } else if (!Expect(s, pos, 'T')) {
    return std::nullopt;
  }
  if (!Digits(s, pos, 2, &h) || !Expect(s, pos, ':') || !Digits(s, pos, 2, &mi) ||
      !Expect(s, pos, ':') || !Digits(s, pos, 2, &sec)) {
    return std::nullopt;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > DaysInMonth(y, static_cast<unsigned>(mo)) || h > 23 ||
      mi > 59 || sec > 60) {
    return std::nullopt;
  }
  int64_t frac_ms = 0;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    size_t start = pos;
    int64_t scale = 100;
    while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
      frac_ms += (s[pos] - '0') * scale;
      scale /= 10;
      ++pos;
    }
    if (pos == start) return std::nullopt;
  }
  int64_t offset_min = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    int sign = s[pos] == '-' ? -1 : 1;
    ++pos;
    int64_t oh, om;
    if (!Digits(s, pos, 2, &oh) || !Expect(s, pos, ':') || !Digits(s, pos, 2, &om) || oh > 23 ||
        om > 59) {
      return std::nullopt;
    }
    offset_min = sign * (oh * 60 + om);
  } else {
    return std::nullopt;
  }
  if (pos != s.size()) return std::nullopt;
  if (sec == 60) sec = 59;  // a leap second: the epoch has none
  int64_t days = DaysFromCivil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d));
  int64_t secs = days * 86400 + h * 3600 + mi * 60 + sec - offset_min * 60;
  const int64_t ms = secs * 1000 + frac_ms;
  if (ms < 0 || ms > kMaxTimeMs) return std::nullopt;
  return ms;
}

std::optional<int64_t> ParseDurationMs(std::string_view s, bool* overflow) {
  // Exact integer arithmetic, every step checked: a double would round, and
  // an unchecked product could wrap into the past.
  if (s.empty()) return std::nullopt;
  bool too_large = false;
  int64_t total = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t start = pos;
    while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) ++pos;
    std::string_view whole = s.substr(start, pos - start);
    std::string_view frac;
    if (pos < s.size() && s[pos] == '.') {
      const size_t frac_start = ++pos;
      while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) ++pos;
      frac = s.substr(frac_start, pos - frac_start);
      if (frac.empty()) return std::nullopt;
    }
    if (whole.empty() && frac.empty()) return std::nullopt;
    const size_t unit_start = pos;
    while (pos < s.size() && std::isalpha(static_cast<unsigned char>(s[pos]))) ++pos;
    const std::string_view unit = s.substr(unit_start, pos - unit_start);
    int64_t scale;
    if (unit == "ms") {
      scale = 1;
    } else if (unit == "s") {
      scale = 1000;
    } else if (unit == "m") {
      scale = 60'000;
    } else if (unit == "h") {
      scale = 3'600'000;
    } else if (unit == "d") {
      scale = 86'400'000;
    } else {
      return std::nullopt;
    }
    int64_t n = 0;
    if (!whole.empty()) {
      auto [end, ec] = std::from_chars(whole.data(), whole.data() + whole.size(), n);
      if (ec == std::errc::result_out_of_range) {
        too_large = true;
        continue;
      }
      if (ec != std::errc() || end != whole.data() + whole.size()) return std::nullopt;
    }
    int64_t part;
    if (__builtin_mul_overflow(n, scale, &part)) {
      too_large = true;
      continue;
    }
    // The fraction in whole ms, rounded half up; digits past the 9th cannot
    // change it (the largest scale is 8.64e7 ms).
    int64_t frac_num = 0, frac_den = 1;
    for (size_t k = 0; k < frac.size() && k < 9; ++k) {
      frac_num = frac_num * 10 + (frac[k] - '0');
      frac_den *= 10;
    }
    if (__builtin_add_overflow(part, (frac_num * scale + frac_den / 2) / frac_den, &part) ||
        __builtin_add_overflow(total, part, &total)) {
      too_large = true;
    }
  }
  if (too_large) {
    if (overflow != nullptr) *overflow = true;
    return std::nullopt;
  }
  return total;
}

std::optional<int64_t> ParseRetryAfterMs(std::string_view s, int64_t now_ms) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  if (s.empty()) return std::nullopt;
  if (std::isdigit(static_cast<unsigned char>(s.front()))) {
    int64_t secs = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), secs);
    if (ec != std::errc() || end != s.data() + s.size() || secs > 100LL * 365 * 86400) {
      return std::nullopt;
    }
    return secs * 1000;
  }
  // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT".
  static constexpr std::string_view kMonths = "JanFebMarAprMayJunJulAugSepOctNovDec";
  if (s.size() != 29 || s.substr(25) != " GMT") return std::nullopt;
  size_t pos = 5;
  int64_t d, y, h, mi, sec;
  if (!Digits(s, pos, 2, &d)) return std::nullopt;
  size_t month = kMonths.find(s.substr(8, 3));
  if (month == std::string_view::npos || month % 3 != 0) return std::nullopt;
  pos = 12;
  if (!Digits(s, pos, 4, &y) || s[16] != ' ') return std::nullopt;
  pos = 17;
  if (!Digits(s, pos, 2, &h) || !Expect(s, pos, ':') || !Digits(s, pos, 2, &mi) ||
      !Expect(s, pos, ':') || !Digits(s, pos, 2, &sec)) {
    return std::nullopt;
  }
  unsigned m = static_cast<unsigned>(month / 3 + 1);
  if (d < 1 || d > DaysInMonth(y, m) || h > 23 || mi > 59 || sec > 60) return std::nullopt;
  int64_t at =
      (DaysFromCivil(y, m, static_cast<unsigned>(d)) * 86400 + h * 3600 + mi * 60 + sec) * 1000;
  return at > now_ms ? at - now_ms : 0;
}

}  // namespace delayd
