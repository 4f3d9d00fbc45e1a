// The engine's in-memory objects: jobs, tubes and clients, and the timer
// node that ties each of them to the timing wheel. All are owned by Engine and
// touched only on the engine's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/status.h"
#include "engine/job_state.h"
#include "engine/spec.h"
#include "store/job_record.h"
#include "wheel/timing_wheel.h"

namespace delayd::store {
class SetRead;  // store/store.h
}  // namespace delayd::store

namespace delayd::engine {

// Microseconds to whole milliseconds, rounded up (for wall times >= 0).
constexpr int64_t CeilMs(int64_t us) { return (us + 999) / 1000; }

struct Job;
struct Tube;
struct Client;

// What a timer belongs to. EngineTimer is standard-layout with the node first,
// so the wheel's TimerNode* converts back to it.
enum class TimerKind : uint8_t { kJob, kClient, kTube, kLoader, kPushRetry, kInDoubt, kWindow };
struct EngineTimer {
  wheel::TimerNode node;
  TimerKind kind = TimerKind::kJob;
  void* owner = nullptr;
};

// What jobs submitted over HTTP (or put into a topic with settings) carry
// beyond beanstalkd's fields. Plain beanstalk jobs have none, and pay nothing.
struct JobExtra {
  std::string key;                      // business key; empty: none
  std::shared_ptr<const JobSpec> spec;  // target, retry policy, body encoding
  std::string spec_text;                // spec in its stored form
  std::string attempt_log;              // JSON array, latest attempts last
  std::string last_error;
  bool cancelled = false;  // deleted over the API: its key is free once the delete is queued
};

// beanstalkd: priorities below this count as urgent.
constexpr uint32_t kUrgentThreshold = 1024;

struct Job {
  uint64_t id = 0;
  Tube* tube = nullptr;
  uint32_t priority = 0;
  JobState state = JobState::kPending;
  // Wall us when a delayed job becomes ready. The store keeps due_ms(), the
  // millisecond it falls in; memory keeps the exact instant a delay asked for
  // now ends, so a job is not up to 1 ms late for the rounding.
  int64_t due_us = 0;
  int64_t delay_ms = 0;  // the delay last asked for
  int64_t ttr_ms = 0;
  int64_t created_ms = 0;   // wall ms of the put
  int64_t run_at_ms = 0;    // wall ms asked for, before a past time became now
  int64_t deadline_us = 0;  // steady us when a reservation runs out
  uint64_t bury_seq = 0;    // buried jobs are kicked in bury order
  store::JobCounters counters;
  std::shared_ptr<const std::string> body;
  Client* reserver = nullptr;
  uint32_t pending_writes = 0;  // store writes not yet answered; pins the job in memory
  // One of those writes failed: once the last is answered, memory takes the
  // store's record again (Engine::Resync).
  bool diverged = false;
  // Memory knows of it what its row does not: reserve or timeout counts
  // changed since its last write (a reserve, a ttr running out: not stored
  // on one node), or its delay ran out (ready here, still delayed in the
  // row, which the window scans would never find). A job leaving memory
  // for the store is written first (Engine::Evict, StoreBeyondWindow).
  bool unstored = false;
  EngineTimer timer;  // due time when delayed, ttr deadline when reserved
  std::unique_ptr<JobExtra> extra;
  // Cluster mode: the row's version, which the job's next write requires
  // (each write raises it by one).
  uint64_t version = 0;
  // Cluster mode: a ready push job claimed for this node's dispatcher (the
  // row is reserved by this node). Any transition clears it (Detach).
  bool claimed = false;

  // A push job is delivered by the dispatcher; pull consumers never see it.
  bool push() const { return extra && extra->spec && extra->spec->target; }
  // The due time as stored: the first whole ms at or after due_us, so that
  // a job read back from the store (a restart, the horizon loader) is never
  // ready before its delay has passed; memory fires at due_us itself.
  int64_t due_ms() const { return CeilMs(due_us); }
};

struct ReadyOrder {
  bool operator()(const Job* a, const Job* b) const {
    return a->priority != b->priority ? a->priority < b->priority : a->id < b->id;
  }
};
struct DelayOrder {
  bool operator()(const Job* a, const Job* b) const {
    return a->due_us != b->due_us ? a->due_us < b->due_us : a->id < b->id;
  }
};
struct DeadlineOrder {
  bool operator()(const Job* a, const Job* b) const {
    return a->deadline_us != b->deadline_us ? a->deadline_us < b->deadline_us : a->id < b->id;
  }
};
struct BuryOrder {
  bool operator()(const Job* a, const Job* b) const {
    return a->bury_seq != b->bury_seq ? a->bury_seq < b->bury_seq : a->id < b->id;
  }
};

// Delayed jobs per due hour (store::DueHour): the due forecast's counts.
using DueHours = std::map<int64_t, uint64_t>;

// The part of one of a tube's sets (store::JobSet: ready, push-ready,
// buried) that is in the store only (doc/engine.md, "Windows").
struct Window {
  uint64_t cold = 0;         // jobs of the set in the store only
  uint64_t cold_urgent = 0;  // of them, ready ones with a priority below kUrgentThreshold
  // While cold > 0: every job of the set whose key is at or before the edge
  // is in memory, and every cold job's key is after it. So the set's first
  // job in memory is the first of the whole set when its key is at or
  // before the edge (Engine::FirstOf).
  store::SetKey edge;
  bool reading = false;  // a refill's read (aside or ahead) is in flight
  // Writes of Engine::StoreBeyondWindow not yet answered: until they are,
  // Evict does not look for more (each look walks the jobs beyond).
  size_t storing = 0;
  // A refill's read ahead (Store::ScanSetAhead) in flight, with what it
  // asked: taken when it is answered, or at once by a call that cannot wait
  // (Engine::WhenRefilled).
  struct Ahead {
    std::shared_ptr<store::SetRead> read;
    store::SetKey after;
    size_t limit = 0;
    uint64_t since = 0;  // the leave log's mark (Engine::LeftSince)
    uint64_t n = 0;      // which read: its answer may come after it was taken
  };
  std::optional<Ahead> ahead;
  // The least key of the jobs that went cold while the refill read: the
  // rows read may predate them, so the edge stays below it.
  std::optional<store::SetKey> floor;
  // Calls waiting for the refill in flight (a peek, a kick), told whether it
  // could read the store; and those that came while it was being read,
  // which the next refill answers (it reads what they want).
  std::vector<std::function<void(const Status&)>> waiting;
  std::vector<std::function<void(const Status&)>> queued;
  size_t want = 0;  // jobs the next refill reads at least (a kick's)
};

struct Tube {
  std::string name;
  std::set<Job*, ReadyOrder> ready;       // pull jobs
  std::set<Job*, ReadyOrder> push_ready;  // push jobs, taken by the dispatcher
  std::set<Job*, DelayOrder> delayed;     // delayed jobs in memory (due within the horizon)
  std::set<Job*, BuryOrder> buried;
  std::vector<Client*> waiters;  // clients blocked in reserve, first come first served
  uint64_t far_delayed = 0;      // delayed jobs only in the store (beyond the horizon)
  DueHours due_hours;            // delayed jobs (memory's and far) per due hour
  uint64_t jobs = 0;             // jobs in memory naming this tube, any state
  uint64_t reserved = 0;
  uint64_t urgent = 0;                // ready jobs with priority < kUrgentThreshold
  uint64_t total_jobs = 0;            // puts since start
  TopicCounters* counters = nullptr;  // the topic's metrics; null without Engine::SetMetrics
  Window windows[store::kJobSets];    // by store::JobSet
  bool window_due = false;            // Engine::SettleWindows looks at it next
  uint64_t deletes = 0;               // cmd-delete
  uint64_t pauses = 0;                // cmd-pause-tube
  uint32_t using_count = 0;
  uint32_t watching_count = 0;
  bool permanent = false;                         // "default" never goes away
  int64_t pause_ms = 0;                           // the pause asked for; 0 when not paused
  int64_t unpause_us = 0;                         // steady us when the pause ends
  EngineTimer timer;                              // unpause
  std::shared_ptr<const TopicSettings> settings;  // null: none set

  // A pause is over from the moment its end passes, before the unpause timer
  // has run: beanstalkd's `pause-tube T 0` is over at the very next reserve.
  bool PausedAt(int64_t steady_us) const { return unpause_us > steady_us; }
  // What stats and topics count: ready jobs of either kind, and delayed ones
  // in memory or only in the store.
  // Ready and buried jobs are counted in memory and cold alike.
  uint64_t ready_count() const {
    return ready.size() + push_ready.size() + windows[0].cold + windows[1].cold;
  }
  uint64_t urgent_count() const { return urgent + windows[0].cold_urgent + windows[1].cold_urgent; }
  uint64_t buried_count() const { return buried.size() + windows[2].cold; }
  uint64_t delayed_count() const { return delayed.size() + far_delayed; }
  uint64_t refs() const {
    uint64_t cold = 0;
    for (const Window& w : windows) cold += w.cold + (w.reading ? 1 : 0);
    return jobs + far_delayed + cold + using_count + watching_count +
           (permanent || settings || window_due ? 1 : 0);
  }
};

// A job as a reserve or a peek hands it out: its id and body, the body
// shared with memory rather than copied.
struct JobView {
  uint64_t id = 0;
  std::shared_ptr<const std::string> body;
};

// A client's blocked reserve ends in exactly one of these calls, made on the
// engine thread from inside an engine call. Implementations must not call
// back into the engine synchronously; post the follow-up instead.
class ClientObserver {
 public:
  virtual ~ClientObserver() = default;
  virtual void OnReserved(const JobView& job) = 0;
  virtual void OnReserveTimedOut() = 0;
  virtual void OnDeadlineSoon() = 0;
  // The last read aside made on the client's behalf is answered
  // (Engine::Reading): the commands after the one that waited may run.
  virtual void OnReadsAnswered() {}
};

struct Client {
  ClientObserver* observer = nullptr;
  Tube* use = nullptr;
  std::vector<Tube*> watch;  // in watch order, as list-tubes-watched shows it
  // Reserved jobs, soonest deadline first. Erase a job before changing its
  // deadline_us.
  std::set<Job*, DeadlineOrder> reserved;
  bool waiting = false;
  int64_t wait_until_us = -1;  // steady us when a reserve-with-timeout gives up; -1: never
  EngineTimer timer;           // the earlier of wait_until_us and deadline-soon
  uint32_t reads = 0;          // reads aside in flight on its behalf
  uint64_t claim = 0;          // cluster mode: its engine::Claims waiter; 0: none
  bool gone = false;           // disconnected while reads were in flight
};

}  // namespace delayd::engine
