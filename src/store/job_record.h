// JobRecord: a job as the store keeps it. Units are in the field names.
#pragma once

#include <cstdint>
#include <string>

namespace delayd::store {

// The states a job can have in the store. A reservation is never stored: a
// reserved job is stored as ready, so after a crash it is ready again.
enum class StoredState : uint8_t { kReady = 0, kDelayed = 1, kBuried = 2 };

constexpr int64_t kMillisPerMinute = 60'000;
// The due-time index groups jobs by minute, so each minute is one insertion
// front in the B-tree and the loader can read one minute at a time.
constexpr int64_t DueMinute(int64_t due_ms) {
  return due_ms >= 0 ? due_ms / kMillisPerMinute
                     : -((-due_ms + kMillisPerMinute - 1) / kMillisPerMinute);
}

struct JobCounters {
  uint32_t reserves = 0;
  uint32_t timeouts = 0;
  uint32_t releases = 0;
  uint32_t buries = 0;
  uint32_t kicks = 0;
};

struct JobRecord {
  uint64_t id = 0;
  std::string tube;
  uint32_t priority = 0;
  StoredState state = StoredState::kReady;
  int64_t due_ms = 0;      // wall ms since the epoch when a delayed job becomes ready
  int64_t delay_ms = 0;    // the delay last asked for (put or release)
  int64_t ttr_ms = 0;      // time to run of each reservation
  int64_t created_ms = 0;  // wall ms since the epoch of the put
  JobCounters counters;
  std::string body;  // empty in an update: updates never rewrite the body
};

}  // namespace delayd::store
