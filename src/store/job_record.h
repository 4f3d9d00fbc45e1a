// JobRecord: a job as the store keeps it. Units are in the field names.
#pragma once

#include <compare>
#include <cstdint>
#include <string>

namespace delayd::store {

// The states a job can have in the store. A done job is a finished job kept
// as history (and to hold its key) for a while. On one node a reservation is
// never stored: a reserved job is stored as ready, so after a crash it is
// ready again. In cluster mode (doc/cluster.md) the queue is the database's,
// so a claimed job is stored as kReserved, with the node holding it and its
// deadline.
enum class StoredState : uint8_t {
  kReady = 0,
  kDelayed = 1,
  kBuried = 2,
  kDone = 3,
  kReserved = 4
};

constexpr int64_t kMillisPerMinute = 60'000;
// The due-time index groups jobs by minute, so each minute is one insertion
// front in the B-tree and the loader can read one minute at a time.
constexpr int64_t DueMinute(int64_t due_ms) {
  return due_ms >= 0 ? due_ms / kMillisPerMinute
                     : -((-due_ms + kMillisPerMinute - 1) / kMillisPerMinute);
}
// Delayed jobs are counted per due hour (for the due forecast): minutes
// since the epoch / 60, rounded down.
constexpr int64_t DueHourOfMinute(int64_t minute) {
  return minute >= 0 ? minute / 60 : -((-minute + 59) / 60);
}
constexpr int64_t DueHour(int64_t due_ms) { return DueHourOfMinute(DueMinute(due_ms)); }

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
  int64_t done_ms = 0;     // wall ms when a done job finished
  // Wall ms the job was asked to run at (put, submission or patch), before a
  // time already past became "now": a timer job's fire time. 0: not known (a
  // row from before 0.2).
  int64_t run_at_ms = 0;
  JobCounters counters;
  std::string key;          // business key, unique per tube; empty: none
  std::string spec;         // engine::JobSpec in its stored form; empty: a plain job
  std::string attempt_log;  // JSON array of the latest delivery attempts; empty: none
  std::string last_error;   // why the last attempt failed; empty: none
  std::string body;         // an update never rewrites body, key or spec
  // A buried job's place in kick order (larger: buried later); 0 otherwise.
  // Kept by a store that ScansSets (Store::ScansSets).
  uint64_t bury_seq = 0;

  // Cluster mode only (PostgreSQL; SQLite keeps none of these).
  // The row's version, raised by every change: a write made on what was read
  // at one version can require that nobody changed the row since
  // (Mutation::IfVersion).
  uint64_t version = 0;
  std::string reserved_by;  // kReserved: the node holding the reservation
  int64_t deadline_ms = 0;  // kReserved: wall ms when the reservation runs out
  // A push job (its spec has a target): delivered by the owner of its shard,
  // never claimed by a consumer. Set by the engine on every write.
  bool push = false;
};

// A tube's ready or buried jobs that the engine may keep in the store beyond
// a window of them in memory (doc/engine.md, "Windows"). Ready jobs of each
// kind in beanstalkd's order, priority then id; buried ones in bury order.
enum class JobSet : uint8_t { kReady = 0, kPushReady = 1, kBuried = 2 };
inline constexpr int kJobSets = 3;

// A place in a JobSet's order: (priority, id) for ready jobs, (bury_seq, id)
// for buried ones. Ids are unique, so no two jobs share a key.
struct SetKey {
  uint64_t major = 0;
  uint64_t id = 0;
  friend auto operator<=>(const SetKey&, const SetKey&) = default;
};

// The latest wall time a job may carry: 9999-12-31T23:59:59.999Z, the last
// instant RFC 3339 can write (common/time_format.h's kMaxTimeMs).
inline constexpr int64_t kMaxWallMs = 253'402'300'799'999;

// What the engine relies on in a stored row, checked on every row it reads
// before placing it in memory: an id of at least 1, a tube of 1 to 200
// printable bytes, a known state, times from the epoch to kMaxWallMs and
// durations from 0 to 2^32-1 s. A store's own constraints do not promise
// all of it (a PostgreSQL database edited by hand, or written by two
// processes, can hold anything its column types allow). Returns "" for a
// sound row, else what is wrong with it.
std::string RecordFault(const JobRecord& r);

}  // namespace delayd::store
