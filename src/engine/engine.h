// Engine: the job state machine of design.md (delayed, ready, reserved,
// buried), with beanstalkd's semantics, over a Store that is the source of
// truth.
//
// Memory holds the clock, not the data: ready, reserved and buried jobs and
// delayed jobs due within the horizon live in memory; later delayed jobs live
// only in the store (counted per tube) until the loader brings their due
// minute into memory, minute by minute, as time advances.
//
// Durability: every acknowledged put, delete, release, bury, kick and pause is
// in the store first. The engine changes memory at once and calls `done` when
// the store has synced the change; a put becomes visible only then.
// Reservations, touches and ttr expiries are not stored: after a crash a
// reserved job is ready again.
//
// Threading: not thread-safe. Every method, and every callback it makes, runs
// on the one thread that owns the engine (the server's event loop).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "engine/stats.h"
#include "engine/types.h"
#include "store/store.h"

namespace delayd::engine {

struct EngineOptions {
  // Delayed jobs due within this many ms are kept in memory. At least a
  // minute's worth is always loaded, since the store indexes by due minute.
  int64_t horizon_ms = 60'000;
  // Rows read from the store per loader step, so loading never blocks the
  // event loop for long.
  size_t load_chunk = 2048;
  // Seconds before a reservation's deadline at which a blocked reserve of the
  // same client returns DEADLINE_SOON (beanstalkd's safety margin).
  int64_t deadline_soon_ms = 1000;
};

class Engine {
 public:
  // Called with the steady time (us) at which Tick() should next run, each
  // time that time moves earlier. The caller arms a timer and calls Tick().
  using WakeFn = std::function<void(int64_t steady_us)>;
  using Done = std::function<void(const Status&)>;

  // `store` and `clock` must outlive the engine.
  Engine(store::Store& store, const Clock& clock, EngineOptions options, WakeFn wake);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Rebuilds memory from the store. Call once, before anything else.
  Status Recover();

  // Fires everything due by now: delayed jobs, ttr expiries, reserve
  // timeouts, unpauses and loader steps.
  void Tick();

  // --- clients ---
  Client* Connect(ClientObserver* observer);
  // Returns the client's reserved jobs to ready and forgets it.
  void Disconnect(Client* c);

  // --- beanstalk commands; names are checked by the caller ---
  void Put(Client* c, uint32_t priority, int64_t delay_ms, int64_t ttr_ms, std::string body,
           std::function<void(Result<uint64_t>)> done);
  // Ends in exactly one ClientObserver call, possibly before returning.
  // timeout_ms < 0 waits forever.
  void Reserve(Client* c, int64_t timeout_ms);
  // Ends a blocked reserve without an observer call (the client hung up).
  void CancelReserve(Client* c) { StopWaiting(c); }
  Result<JobView> ReserveJob(Client* c, uint64_t id);
  void Delete(Client* c, uint64_t id, Done done);
  void Release(Client* c, uint64_t id, uint32_t priority, int64_t delay_ms, Done done);
  void Bury(Client* c, uint64_t id, uint32_t priority, Done done);
  Status Touch(Client* c, uint64_t id);
  void Kick(Client* c, uint64_t bound, std::function<void(Result<uint64_t>)> done);
  void KickJob(uint64_t id, Done done);
  void PauseTube(const std::string& name, int64_t delay_ms, Done done);

  Result<JobView> Peek(uint64_t id);
  Result<JobView> PeekReady(Client* c);
  Result<JobView> PeekDelayed(Client* c);
  Result<JobView> PeekBuried(Client* c);

  void Use(Client* c, const std::string& name);
  size_t Watch(Client* c, const std::string& name);
  // nullopt: the client watches only this tube (NOT_IGNORED).
  std::optional<size_t> Ignore(Client* c, const std::string& name);
  const std::string& UsedTube(const Client* c) const { return c->use->name; }
  std::vector<std::string> WatchedTubes(const Client* c) const;
  std::vector<std::string> TubeNames() const;

  Result<JobStats> StatsJob(uint64_t id);
  Result<TubeStats> StatsTube(const std::string& name) const;
  EngineStats Stats() const;

  // While draining, puts fail with kUnavailable.
  void SetDraining(bool on) { draining_ = on; }
  bool draining() const { return draining_; }

  size_t jobs_in_memory() const { return jobs_.size(); }

 private:
  // Time.
  uint64_t NowTick() const;
  uint64_t TickAtSteady(int64_t steady_us) const;
  uint64_t TickAtWall(int64_t wall_ms) const;
  void Schedule(EngineTimer& t, uint64_t tick);
  void Fire(EngineTimer* t);
  void ScheduleLoader();
  void LoadStep();
  int64_t loaded_horizon_ms() const;

  // Tubes.
  Tube* FindTube(const std::string& name) const;
  Tube* FindOrMakeTube(const std::string& name);
  void MaybeDropTube(Tube* t);

  // Jobs.
  Job* FindLive(uint64_t id) const;
  // The job if `c` holds its reservation, else null.
  Job* ReservedBy(const Client* c, uint64_t id) const;
  // Wall ms when a delay asked for now ends.
  int64_t DueFromNow(int64_t delay_ms) const;
  Job* AddJob(const store::JobRecord& r, JobState state);
  store::JobRecord Record(const Job& j) const;
  JobView View(const Job& j) const { return {j.id, j.body}; }
  void MakeReady(Job* j);
  void MakeDelayed(Job* j);
  void Detach(Job* j);  // out of the set/timer of its current state
  void Write(Job* j, store::Mutation m, Done done);
  void WriteDone(Job* j);
  Result<std::optional<store::JobRecord>> FindFar(uint64_t id);
  Job* MaterializeFar(const store::JobRecord& r);
  // The job `id` in memory if `allowed` accepts it, or a delayed job beyond
  // the horizon brought into memory (not yet detached from anything).
  Result<Job*> FindOrLoad(uint64_t id, const std::function<bool(const Job&)>& allowed);

  // Waiters.
  void Serve(Tube* t);
  void Grant(Client* c, Job* j);
  void StopWaiting(Client* c);
  void ScheduleClient(Client* c);
  bool DeadlineSoon(const Client* c) const;
  void CheckClient(Client* c);
  void ExpireReservation(Job* j);

  store::Store& store_;
  const Clock& clock_;
  const EngineOptions options_;
  WakeFn wake_;

  int64_t origin_us_;  // steady us of tick 0, aligned to a wall-clock ms boundary
  wheel::TimingWheel wheel_;
  uint64_t armed_tick_ = ~uint64_t{0};

  std::unordered_map<uint64_t, std::unique_ptr<Job>> jobs_;
  std::vector<std::unique_ptr<Tube>> tubes_;  // creation order, swap-removed as beanstalkd does
  std::unordered_map<std::string, Tube*> tube_index_;
  std::vector<std::unique_ptr<Client>> clients_;
  uint64_t next_id_ = 1;
  uint64_t bury_seq_ = 0;
  uint64_t total_jobs_ = 0;
  uint64_t job_timeouts_ = 0;
  uint64_t waiting_ = 0;
  bool draining_ = false;

  // The loader: every delayed job due in minutes <= loaded_minute_ is in
  // memory (or pinned by a pending write); later ones only in the store.
  int64_t loaded_minute_ = 0;
  uint64_t load_cursor_ = 0;  // last id read of loaded_minute_
  bool load_done_ = true;     // loaded_minute_ fully read
  EngineTimer loader_timer_;
};

}  // namespace delayd::engine
