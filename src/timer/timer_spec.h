// TimerSpec: what a recurring timer is (its schedule, zone, policies and the
// job it creates at each fire), and its stored form.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "engine/api_types.h"

namespace delayd::timer {

// What to do with fire times missed while delayd was down or the timer was
// paused (fires later than TimerOptions::misfire_grace_ms).
enum class Misfire : uint8_t {
  kSkip,      // none of them; carry on from now
  kFireOnce,  // one job now, for all of them
  kFireAll,   // a job for each, up to misfire_limit, now
};

// What to do when a fire comes while the previous fire's job is still
// waiting or running (delayed, ready or reserved; a dead letter is over).
enum class Overlap : uint8_t { kAllow, kSkip };

struct TimerSpec {
  std::string topic;
  std::string schedule;  // as given; cron::Schedule::Parse reads it
  std::string timezone = "UTC";
  bool active = true;
  int64_t start_ms = 0;  // no fires before; also the @every anchor. 0: none
  int64_t end_ms = 0;    // no fires after. 0: none
  Misfire misfire = Misfire::kSkip;
  uint32_t misfire_limit = 10;
  Overlap overlap = Overlap::kAllow;
  // The job of each fire: body, encoding, priority, ttr, target and retry.
  // Its key and due time are the timer's to set.
  engine::NewJob job;
};

std::string EncodeTimerSpec(const TimerSpec& spec);
Result<TimerSpec> DecodeTimerSpec(const std::string& text);

const char* MisfireName(Misfire m);
const char* OverlapName(Overlap o);

}  // namespace delayd::timer
