// TimerService: recurring timers that create jobs.
//
// Each fire of a timer creates one job, keyed `timer:<id>:<fire ms>`, in the
// same store submission that advances the timer to its next fire time and
// records the fire. The submission commits whole or not at all, and the
// store refuses a second record of one fire time, so neither a restart, a
// crash nor a retry creates two jobs for one fire time or skips one.
//
// The job is created ahead of its fire time (TimerOptions::lead_ms) and due
// exactly at it, so it fires with a delayed job's precision. Only timers firing within the
// horizon are held in memory; the rest are rows, loaded as their time nears.
//
// Reads of the store go aside (Store::ReadAside), as the engine's do: the
// event loop never waits for them. A row read while the timer changed (the
// API, or a fire) may be older than the change, so such rows are read again.
//
// In cluster mode (JoinCluster) a node holds and fires only the timers of
// the shards it owns, each fire fenced by its shard's lease; any node may
// create, change or delete a timer, and the owner hears of it
// (doc/cluster.md, "Timers on their shard's owner").
//
// Threading: the engine's loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "cron/schedule.h"
#include "engine/engine.h"
#include "store/ownership.h"
#include "store/shared_queue.h"
#include "store/stale_reads.h"
#include "store/store.h"
#include "timer/timer_spec.h"

namespace delayd::timer {

struct TimerOptions {
  // A fire's job is created ahead of its time by a quarter of the interval
  // since the previous fire, at most this much: a store commit that is
  // slow now and then (a WAL checkpoint) does not make it late, and for a
  // timer that fires every second the previous job still has 750 ms to
  // finish before overlap=skip judges it.
  int64_t lead_ms = 1000;
  int64_t misfire_grace_ms = 60'000;  // a fire later than this is missed
  int64_t horizon_ms = 60'000;        // timers firing within this are in memory
  size_t load_chunk = 1024;           // rows per loader read
  int64_t retry_ms = 1000;            // after a failed store write
};

// A timer as read: its row and its definition.
struct TimerInfo {
  store::TimerRecord record;
  TimerSpec spec;
};

class TimerService {
 public:
  // Called with the wall time (ms) at which Tick() should next run, each
  // time that time moves earlier.
  using WakeFn = std::function<void(int64_t wall_ms)>;
  using Done = std::function<void(const Status&)>;
  using InfoDone = std::function<void(Result<TimerInfo>)>;
  using ListDone = std::function<void(Result<std::vector<TimerInfo>>)>;
  using FiresDone = std::function<void(Result<std::vector<store::TimerFire>>)>;

  TimerService(store::Store& store, engine::Engine& engine, const Clock& clock,
               TimerOptions options, WakeFn wake);
  ~TimerService();
  TimerService(const TimerService&) = delete;
  TimerService& operator=(const TimerService&) = delete;

  // Cluster mode: timers of the shards this node owns only; new timers'
  // ids from `queue`, which must outlive the service. Call before Start.
  void JoinCluster(store::SharedQueue& queue) { shared_ = &queue; }
  // Cluster mode: the shards owned now, with their leases' epochs. Timers of
  // shards lost (or retaken at a new epoch) are let go; the window is loaded
  // again for the rest.
  void SetOwnership(const store::Ownership& owned);
  // Cluster mode: notices heard (a timer changed through any node).
  void Hear(const std::vector<store::Notice>& notices);

  // Reads the next timer id (at once: the server is not serving yet) and
  // starts loading the first window. Call once, after the engine recovered.
  Status Start();
  // Fires what is due and loads timers as their time nears.
  void Tick();

  // Checks a definition: schedule, zone, topic, start and end.
  static Status Validate(const std::string& name, const TimerSpec& spec);
  // Stores a new timer; `done` gets it once durable.
  void Create(std::string name, TimerSpec spec, InfoDone done);
  // Replaces a timer's name and definition; its next fire is counted from now.
  void Replace(uint64_t id, std::string name, TimerSpec spec, InfoDone done);
  // Pauses or resumes. A resumed timer meets the fires it missed while
  // paused under its misfire policy.
  void SetActive(uint64_t id, bool active, InfoDone done);
  void Delete(uint64_t id, Done done);

  void Get(uint64_t id, InfoDone done);
  void List(uint64_t after_id, size_t limit, ListDone done);
  void Fires(uint64_t id, size_t limit, FiresDone done);
  // The next `count` fire times of `spec` after `after_ms`, within its start
  // and end; `anchor_ms` is the @every origin when the spec has no start.
  static Result<std::vector<int64_t>> Preview(const TimerSpec& spec, int64_t after_ms,
                                              int64_t anchor_ms, size_t count);

  size_t loaded() const { return loaded_.size(); }

 private:
  // A definition ready to compute with.
  struct Compiled {
    TimerSpec spec;
    cron::Schedule schedule;
    cron::Zone zone;
  };
  struct Loaded {
    store::TimerRecord record;
    std::shared_ptr<const Compiled> compiled;
    int64_t process_at_ms = 0;  // when Tick handles it next (its key in due_)
    bool in_flight = false;     // a fire's submission is not yet durable
    uint64_t generation = 0;    // bumped by every change through the API
    uint64_t last_job_id = 0;   // the job of its latest fire, for overlap
  };

  static Result<std::shared_ptr<const Compiled>> Compile(const TimerSpec& spec);
  // Validate, keeping what it compiled.
  static Result<std::shared_ptr<const Compiled>> Check(const std::string& name,
                                                       const TimerSpec& spec);
  // The first fire strictly after `after_ms` within start and end; 0: none.
  static int64_t NextFire(const Compiled& c, int64_t after_ms, int64_t created_ms);

  // A timer's row as a load reads it, with the job of its latest fire when
  // its overlap policy needs it.
  struct Row {
    store::TimerRecord record;
    uint64_t last_job_id = 0;
  };
  // Reads aside; `then(result, since)` as in the engine.
  template <class Read, class Then>
  void Aside(Read read, Then then) {
    store::ReadAsyncMarked(store_, changed_, std::move(read), std::move(then));
  }
  // Reads `r`'s row with the job of its latest fire (on the read thread).
  static Row ReadRow(store::Store& store, store::TimerRecord r);

  void Load(int64_t now_ms);
  void LoadRead(Result<std::vector<Row>> rows, uint64_t since, int64_t until, int64_t now_ms,
                uint64_t owned_generation);
  // Whether this node fires timer `id`: always on one node; in cluster
  // mode, when it owns the timer's shard (then `fence` is that lease).
  bool Owns(uint64_t id, store::change::Fence* fence = nullptr) const;
  // Reads `ids` again and holds those in the window.
  void Reload(std::vector<uint64_t> ids);
  // Holds a row read from the store, unless its definition cannot run.
  void HoldRow(const Row& row, int64_t window_end_ms = 0);
  // HoldRow for each row read at mark `since` whose timer is not in memory;
  // returns the timers changed since, whose rows must be read again.
  std::vector<uint64_t> HoldRows(const std::vector<Row>& rows, uint64_t since,
                                 int64_t window_end_ms = 0);
  // Holds `record` in memory if it fires before `window_end_ms` (0: the
  // loaded window's end), else lets it go.
  void Hold(const store::TimerRecord& record, std::shared_ptr<const Compiled> compiled,
            uint64_t last_job_id, int64_t window_end_ms = 0);
  void Drop(uint64_t id);
  int64_t Lead(const store::TimerRecord& r) const;
  void Queue(Loaded& t, int64_t at_ms);
  void Fire(Loaded& t, int64_t now_ms);
  // Fire, knowing whether its latest fire's job still runs.
  void FireNow(Loaded& t, int64_t now_ms, bool still_running);
  void Fired(uint64_t id, uint64_t generation, const Status& s, int64_t next_ms, int64_t last_ms,
             uint64_t job_id);
  // Sets the job of `t`'s latest fire, which the engine's kEnded clears.
  void SetLastJob(uint64_t timer_id, Loaded& t, uint64_t job_id);
  void Put(store::TimerRecord record, std::shared_ptr<const Compiled> compiled, InfoDone done);
  // A new timer's id: the next of this node's, or the database's (cluster).
  void NewId(std::function<void(Result<uint64_t>)> done);
  // Tells the host when to tick next; `force` after a tick, which used up
  // the host's timer.
  void ArmWake(bool force = false);

  store::Store& store_;
  engine::Engine& engine_;
  const Clock& clock_;
  TimerOptions options_;
  WakeFn wake_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Loaded> loaded_;
  // A loaded timer's latest fire job -> the timer, until the job ends.
  std::unordered_map<uint64_t, uint64_t> timer_of_job_;
  size_t subscription_ = 0;                     // to the engine's events
  std::set<std::pair<int64_t, uint64_t>> due_;  // (process_at_ms, id), not in flight
  int64_t loaded_until_ms_ = 0;                 // every timer firing before this is in memory
  // After a failed load (the store unreachable), the next is tried no sooner
  // than this wall time, and the failure is logged once until a load succeeds.
  int64_t load_retry_ms_ = 0;
  bool load_failing_ = false;
  bool loading_ = false;  // a load's read is in flight
  // Timers changed (the API, a fire) while reads aside were in flight.
  store::StaleReads changed_;
  int64_t armed_ms_ = -1;
  uint64_t generation_ = 0;
  // Cluster mode only.
  store::SharedQueue* shared_ = nullptr;
  store::Ownership owned_;          // shards and the epochs of their leases
  std::map<int, int64_t> refused_;  // shard -> the epoch a fire of it was refused at
  uint64_t owned_generation_ = 0;   // raised by each change of owned_ that adds a shard
};

}  // namespace delayd::timer
