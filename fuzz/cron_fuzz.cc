// libFuzzer target: the cron schedule parser and next-fire calculator.
// Any input must parse or fail with an error, never crash; a schedule that
// parses must give strictly increasing fire times in every zone tried.

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
  static const delayd::cron::Zone zones[] = {delayd::cron::FindZone("UTC").value(),
                                             delayd::cron::FindZone("America/New_York").value(),
                                             delayd::cron::FindZone("Europe/Berlin").value(),
                                             delayd::cron::FindZone("Asia/Shanghai").value()};
  for (const delayd::cron::Zone& zone : zones) {
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
