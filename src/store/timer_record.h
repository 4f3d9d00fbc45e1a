// TimerRecord and TimerFire: a recurring timer and the fires it handled, as
// the store keeps them. The timer service (timer/) owns their meaning; the
// store keeps the definition as opaque text.
#pragma once

#include <cstdint>
#include <string>

namespace delayd::store {

struct TimerRecord {
  uint64_t id = 0;
  std::string name;          // unique
  std::string definition;    // stored form of the timer's settings
  int64_t next_fire_ms = 0;  // the next fire time to handle (wall ms); 0: none
  int64_t last_fire_ms = 0;  // the latest fire time handled; 0: none yet
  int64_t created_ms = 0;
};

// One fire time of a timer and what became of it. (timer_id, fire_ms) is
// unique in the store: a fire time is handled at most once, ever.
struct TimerFire {
  uint64_t timer_id = 0;
  int64_t fire_ms = 0;
  uint64_t job_id = 0;  // the job it created; 0 when skipped
  std::string outcome;  // "created", or why it was skipped
  int64_t at_ms = 0;    // wall ms when it was handled
};

// Fires kept per timer (the latest ones).
constexpr int kTimerFiresKept = 100;

}  // namespace delayd::store
