// JobEvent: what happens to jobs, as the components around the engine hear
// of it. The engine's own waiters (blocked reserves), the dispatcher and the
// timer service all learn of ready, reserved and ended jobs this one way,
// rather than through calls the transitions make to each.
#pragma once

#include <cstdint>
#include <string_view>

namespace delayd::engine {

enum class JobEventKind : uint8_t {
  kReady,     // a job became ready; job_id 0: a paused topic resumed
  kReserved,  // a job was reserved (by a client, over HTTP or by the dispatcher)
  kEnded,     // a job was finished or cancelled, and the store has it so
};

struct JobEvent {
  JobEventKind kind;
  uint64_t job_id;
  std::string_view topic;  // valid during the call only
  bool push;               // a push job (delivered by the dispatcher)
};

}  // namespace delayd::engine
