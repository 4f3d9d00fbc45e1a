#include "cron/schedule.h"

#include <date/date.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>

#include "common/time_format.h"

namespace delayd::cron {
namespace {

using std::chrono::seconds;

constexpr std::array<const char*, 12> kMonthNames = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                                     "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
constexpr std::array<const char*, 7> kDayNames = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

// How far Next looks before it gives up: 30 years covers every leap-day
// schedule (the longest gap between 29 Februaries is 8 years).
constexpr int kSearchYears = 30;

// The longest @every interval: a year and a day keeps every fire-time sum
// far from overflowing (fuzzing found "@every 13h33333666266660m").
constexpr int64_t kMaxEveryMs = 366LL * 86'400'000;

struct Field {
  const char* name;  // for errors: "minute field"
  int lo, hi;
  const char* const* names = nullptr;  // 3-letter names for lo.. (months, days)
  int name_count = 0;
  int name_base = 0;  // the number of names[0]
};

const Field kSecond{"second field", 0, 59};
const Field kMinute{"minute field", 0, 59};
const Field kHour{"hour field", 0, 23};
const Field kDayOfMonth{"day-of-month field", 1, 31};
const Field kMonth{"month field", 1, 12, kMonthNames.data(), 12, 1};
// 7 is Sunday too, as in every cron.
const Field kDayOfWeek{"day-of-week field", 0, 7, kDayNames.data(), 7, 0};

Status FieldError(const Field& f, std::string_view part, const std::string& why) {
  return Status::InvalidField("schedule",
                              std::string(f.name) + ": '" + std::string(part) + "' " + why);
}

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// A number or (for months and days) a 3-letter name.
Result<int> Value(const Field& f, std::string_view text, std::string_view part) {
  int v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc() && p == text.data() + text.size()) {
    if (v < f.lo || v > f.hi) {
      return FieldError(f, part,
                        "is out of range " + std::to_string(f.lo) + "-" + std::to_string(f.hi));
    }
    return v;
  }
  const std::string name = Upper(text);
  for (int i = 0; i < f.name_count; ++i) {
    if (name == f.names[i]) return f.name_base + i;
  }
  return FieldError(f, part, f.names ? "is not a number or a name" : "is not a number");
}

// "*", "a", "a-b", "*/n", "a/n", "a-b/n" into bits; `star` is set for a bare
// "*" or "?".
Status ParsePart(const Field& f, std::string_view part, std::bitset<64>& bits) {
  std::string_view range = part;
  int step = 1;
  if (size_t slash = part.find('/'); slash != std::string_view::npos) {
    range = part.substr(0, slash);
    std::string_view s = part.substr(slash + 1);
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), step);
    if (ec != std::errc() || p != s.data() + s.size() || step < 1 || step > f.hi) {
      return FieldError(f, part,
                        "has a step that is not a number from 1 to " + std::to_string(f.hi));
    }
  }
  int lo = f.lo, hi = f.hi;
  if (range == "*" || range == "?") {
    // the whole field
  } else if (size_t dash = range.find('-'); dash != std::string_view::npos && dash > 0) {
    Result<int> a = Value(f, range.substr(0, dash), part);
    if (!a.ok()) return a.status();
    Result<int> b = Value(f, range.substr(dash + 1), part);
    if (!b.ok()) return b.status();
    lo = *a;
    hi = *b;
    if (hi < lo) return FieldError(f, part, "is a range that ends before it starts");
  } else {
    Result<int> a = Value(f, range, part);
    if (!a.ok()) return a.status();
    lo = *a;
    // "a/n" runs from a to the end of the field; a plain "a" is just a.
    hi = part.find('/') == std::string_view::npos ? lo : f.hi;
  }
  for (int v = lo; v <= hi; v += step) bits.set(static_cast<size_t>(v));
  return Status::Ok();
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

Status ParseSimple(const Field& f, std::string_view text, std::bitset<64>& bits) {
  for (std::string_view part : Split(text, ',')) {
    if (part.empty()) return FieldError(f, text, "has an empty list item");
    Status s = ParsePart(f, part, bits);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

template <size_t N>
std::bitset<N> Narrow(const std::bitset<64>& wide) {
  std::bitset<N> out;
  for (size_t i = 0; i < N; ++i) out[i] = wide[i];
  return out;
}

int NextBit(const auto& bits, int from) {
  for (int i = from; i < static_cast<int>(bits.size()); ++i) {
    if (bits[static_cast<size_t>(i)]) return i;
  }
  return -1;
}

std::optional<int64_t> ParseIntPrefix(std::string_view s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

Result<Schedule> Schedule::Parse(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  std::string expanded(text);
  if (!text.empty() && text.front() == '@') {
    const std::string word = Upper(text.substr(0, text.find(' ')));
    if (word == "@EVERY") {
      std::string_view rest = text.substr(6);
      while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
      std::optional<int64_t> ms = ParseDurationMs(rest);
      if (!ms || *ms < 1000 || *ms % 1000 != 0 || *ms > kMaxEveryMs) {
        return Status::InvalidField("schedule",
                                    "@every needs a whole number of seconds from 1s to 366d, "
                                    "such as 90s or 1h30m");
      }
      Schedule s;
      s.interval_ms_ = *ms;
      return s;
    }
    static const std::pair<const char*, const char*> kMacros[] = {
        {"@YEARLY", "0 0 1 1 *"}, {"@ANNUALLY", "0 0 1 1 *"}, {"@MONTHLY", "0 0 1 * *"},
        {"@WEEKLY", "0 0 * * 0"}, {"@DAILY", "0 0 * * *"},    {"@MIDNIGHT", "0 0 * * *"},
        {"@HOURLY", "0 * * * *"}};
    auto it = std::find_if(std::begin(kMacros), std::end(kMacros),
                           [&](const auto& m) { return Upper(text) == m.first; });
    if (it == std::end(kMacros)) {
      return Status::InvalidField("schedule", "unknown macro '" + std::string(text) +
                                                  "'; known: @yearly @annually @monthly "
                                                  "@weekly @daily @midnight @hourly @every");
    }
    expanded = it->second;
  }
  std::vector<std::string_view> fields;
  std::string_view rest(expanded);
  while (!rest.empty()) {
    size_t end = rest.find_first_of(" \t");
    fields.push_back(rest.substr(0, end));
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end);
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
  }
  if (fields.size() != 5 && fields.size() != 6) {
    return Status::InvalidField("schedule",
                                "needs 5 fields (minute hour day-of-month month day-of-week), 6 "
                                "with seconds first, or a macro such as @daily; got " +
                                    std::to_string(fields.size()));
  }
  if (fields.size() == 5) fields.insert(fields.begin(), "0");
  Schedule s;
  std::bitset<64> bits;
  for (auto [f, text_of, out] : {std::tuple{&kSecond, fields[0], 0},
                                 {&kMinute, fields[1], 1},
                                 {&kHour, fields[2], 2},
                                 {&kMonth, fields[4], 4}}) {
    bits.reset();
    Status st = ParseSimple(*f, text_of, bits);
    if (!st.ok()) return st;
    if (out == 0) s.seconds_ = Narrow<60>(bits);
    if (out == 1) s.minutes_ = Narrow<60>(bits);
    if (out == 2) s.hours_ = Narrow<24>(bits);
    if (out == 4) s.months_ = Narrow<13>(bits);
  }
  // Day of month: numbers plus L, LW, L-n and nW.
  s.dom_.any = fields[3] == "*" || fields[3] == "?";
  bits.reset();
  for (std::string_view part : Split(fields[3], ',')) {
    const std::string up = Upper(part);
    if (up == "L") {
      s.dom_.last = true;
    } else if (up == "LW") {
      s.dom_.last_weekday = true;
    } else if (up.size() > 2 && up.rfind("L-", 0) == 0) {
      std::optional<int64_t> n = ParseIntPrefix(std::string_view(up).substr(2));
      if (!n || *n < 1 || *n > 30) return FieldError(kDayOfMonth, part, "needs L-n with n 1-30");
      s.dom_.before_last.push_back(static_cast<int>(*n));
    } else if (up.size() > 1 && up.back() == 'W') {
      std::optional<int64_t> n = ParseIntPrefix(std::string_view(up).substr(0, up.size() - 1));
      if (!n || *n < 1 || *n > 31) return FieldError(kDayOfMonth, part, "needs nW with n 1-31");
      s.dom_.nearest_weekday.push_back(static_cast<int>(*n));
    } else {
      if (part.empty()) return FieldError(kDayOfMonth, fields[3], "has an empty list item");
      Status st = ParsePart(kDayOfMonth, part, bits);
      if (!st.ok()) return st;
    }
  }
  s.dom_.days = Narrow<32>(bits);
  // Day of week: numbers and names plus dL and d#n.
  s.dow_.any = fields[5] == "*" || fields[5] == "?";
  bits.reset();
  for (std::string_view part : Split(fields[5], ',')) {
    if (size_t hash = part.find('#'); hash != std::string_view::npos) {
      Result<int> d = Value(kDayOfWeek, part.substr(0, hash), part);
      if (!d.ok()) return d.status();
      std::optional<int64_t> n = ParseIntPrefix(part.substr(hash + 1));
      if (!n || *n < 1 || *n > 5) return FieldError(kDayOfWeek, part, "needs d#n with n 1-5");
      s.dow_.nth.emplace_back(*d % 7, static_cast<int>(*n));
    } else if (part.size() > 1 && (part.back() == 'L' || part.back() == 'l')) {
      Result<int> d = Value(kDayOfWeek, part.substr(0, part.size() - 1), part);
      if (!d.ok()) return d.status();
      s.dow_.last.push_back(*d % 7);
    } else {
      if (part.empty()) return FieldError(kDayOfWeek, fields[5], "has an empty list item");
      Status st = ParsePart(kDayOfWeek, part, bits);
      if (!st.ok()) return st;
    }
  }
  if (bits[7]) bits.set(0);
  s.dow_.days = Narrow<7>(bits);
  return s;
}

bool Schedule::MatchesDay(int year, unsigned month, unsigned day) const {
  using namespace date;
  const year_month_day ymd{date::year{year}, date::month{month}, date::day{day}};
  const int last = static_cast<int>(static_cast<unsigned>(
      year_month_day_last{date::year{year}, month_day_last{date::month{month}}}.day()));
  const int d = static_cast<int>(day);
  const int wd = static_cast<int>(weekday{sys_days{ymd}}.c_encoding());  // 0 = Sunday
  auto weekday_of = [&](int dd) {
    return static_cast<int>(weekday{sys_days{year_month_day{date::year{year}, date::month{month},
                                                            date::day{static_cast<unsigned>(dd)}}}}
                                .c_encoding());
  };
  bool dom = dom_.days[static_cast<size_t>(d)] || (dom_.last && d == last);
  for (int n : dom_.before_last) dom = dom || d == last - n;
  for (int n : dom_.nearest_weekday) {
    if (n > last) continue;  // no such day this month
    int target = n;
    const int w = weekday_of(n);
    if (w == 6) target = n == 1 ? n + 2 : n - 1;     // Saturday: Friday, or Monday the 3rd
    if (w == 0) target = n == last ? n - 2 : n + 1;  // Sunday: Monday, or Friday before
    dom = dom || d == target;
  }
  if (dom_.last_weekday) {
    const int w = weekday_of(last);
    dom = dom || d == (w == 6 ? last - 1 : w == 0 ? last - 2 : last);
  }
  bool dow = dow_.days[static_cast<size_t>(wd)];
  for (auto [w, n] : dow_.nth) dow = dow || (wd == w && (d - 1) / 7 + 1 == n);
  for (int w : dow_.last) dow = dow || (wd == w && d + 7 > last);
  // As in cron: with both fields restricted, either may match.
  if (dom_.any && dow_.any) return true;
  if (dom_.any) return dow;
  if (dow_.any) return dom;
  return dom || dow;
}

bool Schedule::FirstTime(int& h, int& m, int& s) const {
  for (int hh = NextBit(hours_, h); hh >= 0; hh = NextBit(hours_, hh + 1)) {
    const int m0 = hh == h ? m : 0;
    for (int mm = NextBit(minutes_, m0); mm >= 0; mm = NextBit(minutes_, mm + 1)) {
      const int ss = NextBit(seconds_, hh == h && mm == m ? s : 0);
      if (ss >= 0) {
        h = hh;
        m = mm;
        s = ss;
        return true;
      }
    }
  }
  return false;
}

std::optional<int64_t> Schedule::Next(int64_t after_ms, const Zone& zone, int64_t anchor_ms) const {
  using namespace date;
  if (interval_ms_ > 0) {
    if (after_ms < anchor_ms) return anchor_ms;
    return anchor_ms + ((after_ms - anchor_ms) / interval_ms_ + 1) * interval_ms_;
  }
  // Whole seconds strictly after `after_ms`, in local time.
  const int64_t after_s = after_ms >= 0 ? after_ms / 1000 : -((-after_ms + 999) / 1000);
  local_seconds start = local_seconds{seconds{zone.ToLocal(after_s)}} + seconds{1};
  const auto first_year = year_month_day{floor<days>(start)}.year();
  for (;;) {
    const local_days day = floor<days>(start);
    const year_month_day ymd{day};
    if (ymd.year() > first_year + years{kSearchYears}) return std::nullopt;
    const unsigned month = static_cast<unsigned>(ymd.month());
    if (!months_[month]) {
      start = local_days{(ymd.year() / ymd.month() + months{1}) / 1};  // the next month
      continue;
    }
    if (!MatchesDay(static_cast<int>(ymd.year()), month, static_cast<unsigned>(ymd.day()))) {
      start = day + days{1};
      continue;
    }
    const hh_mm_ss<seconds> tod{start - day};
    int h = static_cast<int>(tod.hours().count()), m = static_cast<int>(tod.minutes().count()),
        s = static_cast<int>(tod.seconds().count());
    if (!FirstTime(h, m, s)) {
      start = day + days{1};
      continue;
    }
    const local_seconds candidate =
        day + std::chrono::hours{h} + std::chrono::minutes{m} + seconds{s};
    // Unique; the first of two (fall back); or, in a spring-forward gap, the
    // end of the gap.
    const int64_t at_ms = zone.FromLocal(candidate.time_since_epoch().count()).unix_s * 1000;
    if (at_ms > after_ms) return at_ms;
    start = candidate + seconds{1};  // the second pass of a repeated hour: skip it
  }
}

}  // namespace delayd::cron
