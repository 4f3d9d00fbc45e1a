// libFuzzer target: the cron schedule parser and next-fire calculator.
// Any input must parse or fail with an error, never crash; a schedule that
// parses must give strictly increasing fire times in every zone tried.
#include <date/tz.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "cron/schedule.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto schedule = delayd::cron::Schedule::Parse(text);
  if (!schedule.ok()) {
    if (schedule.status().field().empty()) abort();  // every error names its field
    return 0;
  }
  static const date::time_zone* zones[] = {
      date::locate_zone("UTC"), date::locate_zone("America/New_York"),
      date::locate_zone("Europe/Berlin"), date::locate_zone("Asia/Shanghai")};
  for (const date::time_zone* zone : zones) {
    int64_t at = 1'795'305'600'000;  // 2026-11-22T00:00:00Z
    for (int i = 0; i < 8; ++i) {
      std::optional<int64_t> next = schedule->Next(at, zone, 1'795'305'600'000);
      if (!next) break;
      if (*next <= at) abort();  // must move forward
      at = *next;
    }
  }
  return 0;
}
