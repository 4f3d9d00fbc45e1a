// SharedQueue: what cluster mode needs of a store beyond Store
// (doc/cluster.md): the queue is the database's, so reserving is a claim of
// ready rows that no other node can make at the same moment, job ids come
// from blocks that no other node is handed, and every node hears, through
// notices, when jobs become ready and when delayed jobs due soon are written,
// by any node. PgStore implements it; the writes a node makes as the owner
// of a shard are Mutations (change::PromoteDue, change::RequeueExpired).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/job_record.h"
#include "store/timer_record.h"

namespace delayd::store {

// The channels of the notices (PostgreSQL's LISTEN/NOTIFY).
inline constexpr const char* kReadyChannel = "delayd_ready";  // payload: a tube
inline constexpr const char* kDueChannel = "delayd_due";      // payload: DueNotice entries
inline constexpr const char* kTubeChannel = "delayd_tube";    // payload: a tube
inline constexpr const char* kPushChannel = "delayd_push";    // payload: "<shard> <tube>"
inline constexpr const char* kTimerChannel = "delayd_timer";  // payload: a timer id

struct ClaimQuery {
  // Ready jobs of these tubes, best (priority, id) first; tubes paused at
  // now_ms are left out.
  std::vector<std::string> tubes;
  size_t limit = 1;
  int64_t now_ms = 0;  // a claimed job's deadline is now_ms + its ttr
  // Only jobs of these shards (an owner dispatching its push jobs); empty:
  // every shard.
  std::vector<int> shards = {};
  // Push jobs, which only the owner of their shard claims; else pull jobs,
  // which any consumer claims.
  bool push = false;
};

// What a node hears from the others, and from itself.
struct Notice {
  enum class Kind : uint8_t {
    kReady,  // jobs of `tube` became ready (committed)
    kDue,    // delayed job `id` of `shard`, due at `due_ms`, was written
    kTube,   // `tube` was paused, resumed or given settings: read it again
    kPush,   // push jobs of `tube` in `shard` became ready (committed)
    kTimer,  // timer `id` was created, changed or deleted: its owner reads it again
    // The notices' connection was (re)made: notices may have been missed,
    // so whatever they would have said must be read again.
    kListening,
  };
  Kind kind = Kind::kReady;
  std::string tube = {};
  int shard = 0;
  uint64_t id = 0;
  int64_t due_ms = 0;
};

// A delayed job written (put, released, changed) to be due soon: its shard's
// owner must put it on its clock. Entries are "<shard> <id> <due_ms>",
// separated by ';', as many as fit in one notice.
struct DueEntry {
  int shard = 0;
  uint64_t id = 0;
  int64_t due_ms = 0;
  bool operator==(const DueEntry&) const = default;
};
std::string FormatDue(const std::vector<DueEntry>& entries);
// The entries of a payload; malformed entries are skipped.
std::vector<DueEntry> ParseDue(std::string_view payload);

// Delayed jobs of `shards` due in minutes through `through_minute`, by (due
// minute, id) after (`after_minute`, `after_id`): a chunk of what the
// owner of those shards puts on its clock.
struct DueQuery {
  std::vector<int> shards;
  int64_t after_minute = -1;
  uint64_t after_id = 0;
  int64_t through_minute = 0;
  size_t limit = 2048;
};

// Jobs of one tube per state, as the database has them (cluster-wide).
struct TubeCount {
  std::string tube;
  uint64_t ready = 0;
  uint64_t urgent = 0;  // ready with a priority below 1024
  uint64_t delayed = 0;
  uint64_t reserved = 0;
  uint64_t buried = 0;
  int64_t oldest_ready_due_ms = 0;  // due time of the longest-waiting ready job; 0: none
};

// A tube's stored pause and settings.
struct TubeRow {
  std::string tube;
  int64_t pause_ms = 0;
  int64_t unpause_ms = 0;  // wall ms when the pause ends; 0: not paused
  std::string settings;    // stored form; empty: none
};

// Threads: Claim, Due, TakeIds and TakeTimerId answer, and Listen's
// callback hears, through the store's completion executor (the event
// loop); the synchronous reads (BestReady, CountJobs, Tubes, PushTubes,
// TimersDueOf) may be called from one thread at a time, or inside
// Store::ReadAside.
class SharedQueue {
 public:
  virtual ~SharedQueue() = default;

  // This node's id in the cluster (the owner of its leases).
  virtual const std::string& node_id() const = 0;
  virtual int shards() const = 0;
  // The shard of a job (fixed for its life).
  virtual int ShardOf(const JobRecord& j) const = 0;

  // Claims up to `q.limit` ready jobs for this node: each comes back
  // kReserved by it, its version raised, its deadline set and its reserves
  // counted, best first. Jobs another node is claiming at the same moment
  // are skipped, not waited for. `done` runs through the store's executor.
  virtual void Claim(ClaimQuery q, std::function<void(Result<std::vector<JobRecord>>)> done) = 0;
  // The delayed jobs `q` asks for, as due entries (DueQuery); `done` runs
  // through the executor.
  virtual void Due(DueQuery q, std::function<void(Result<std::vector<DueEntry>>)> done) = 0;
  // Hands this node `n` job ids that no node was or will be handed: the
  // first of them.
  virtual void TakeIds(uint64_t n, std::function<void(Result<uint64_t>)> done) = 0;
  // Reads, synchronous like Store's (the engine makes them through
  // Store::ReadAside):
  // The best ready job of `tube`, by (priority, id).
  virtual Result<std::optional<JobRecord>> BestReady(const std::string& tube) = 0;
  // Jobs per tube and state, of `tube` or, without one, of every tube that
  // has any, by tube name. Counts every row: a query of the whole table.
  virtual Result<std::vector<TubeCount>> CountJobs(std::optional<std::string> tube) = 0;
  // The stored pause and settings of `tube`, or of every tube without one.
  virtual Result<std::vector<TubeRow>> Tubes(std::optional<std::string> tube) = 0;
  // The tubes that have ready push jobs in `shards`, by name.
  virtual Result<std::vector<std::string>> PushTubes(const std::vector<int>& shards) = 0;
  // Timers of `shards` whose next fire is before `before_ms`, after
  // (`from_ms`, `after_id`), soonest first: Store::TimersDue for an owner.
  virtual Result<std::vector<TimerRecord>> TimersDueOf(const std::vector<int>& shards,
                                                       int64_t from_ms, uint64_t after_id,
                                                       int64_t before_ms, size_t limit) = 0;
  // The shard of timer `id` (fixed for its life): its owner fires it.
  virtual int TimerShardOf(uint64_t id) const = 0;
  // A timer id that no node was or will be handed.
  virtual void TakeTimerId(std::function<void(Result<uint64_t>)> done) = 0;

  // Starts hearing notices: `fn` gets them in order, through the executor,
  // starting with kListening once listening. Call once.
  virtual Status Listen(std::function<void(std::vector<Notice>)> fn) = 0;
};

}  // namespace delayd::store
