// Engine: the job state machine of design.md (delayed, ready, reserved,
// buried), with beanstalkd's semantics, over a Store that is the source of
// truth.
//
// Memory holds the clock, not the data: reserved jobs, delayed jobs due
// within the horizon, and each tube's ready and buried jobs up to a window
// (EngineOptions::ready_window) live in memory; later delayed jobs live only
// in the store (counted per tube) until the loader brings their due minute
// into memory, minute by minute, as time advances, and ready and buried jobs
// beyond the windows until the windows drain to them (windows.cc).
//
// Durability: every acknowledged put, delete, release, bury, kick and pause is
// in the store first. The engine changes memory at once and calls `done` when
// the store has the change; a put becomes visible only then. A change whose
// write fails is undone: the job takes the store's record again before
// `done` reports the failure, so memory never holds what a restart would undo
// once the write is answered.
// Reservations, touches and ttr expiries are not stored: after a crash a
// reserved job is ready again.
//
// Files, by concept: engine.cc (tubes, clients, jobs in memory, the write
// path), transitions.cc (the state machine), commands.cc (what clients ask
// for), reads.cc, waiters.cc (blocked reserves), timing.cc (ticks and the
// wheel), horizon.cc (recovery, the loader, jobs beyond the horizon),
// windows.cc (ready and buried jobs beyond their windows), local_home.cc and
// shared_home*.cc (the two homes).
//
// Reads: jobs memory does not hold (delayed beyond the horizon, ready or
// buried beyond a window, done, or looked up by key) are read from the store
// aside (Store::ReadAside), so that the event loop never waits for a store
// across the network; the calls that may need one answer through a callback,
// at once when memory has the answer. A row read aside may be older than a
// change memory made meanwhile: the engine notes the jobs that leave memory
// while reads are in flight, and reads again a row of such a job.
//
// Where jobs live between transitions is the engine's JobHome (job_home.h):
// memory and the horizon as above (LocalHome), or in cluster mode
// (doc/cluster.md, JoinCluster) the database's rows, shared by every node
// (SharedHome, shared_home.h). The engine itself has one path for both.
//
// Threading: not thread-safe. Every method, and every callback it makes, runs
// on the one thread that owns the engine (the server's event loop).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/metrics.h"
#include "common/status.h"
#include "engine/api_types.h"
#include "engine/events.h"
#include "engine/job_home.h"
#include "engine/shared_seams.h"
#include "engine/spec_codec.h"
#include "engine/stats.h"
#include "engine/types.h"
#include "store/ownership.h"
#include "store/shared_queue.h"
#include "store/stale_reads.h"
#include "store/store.h"

namespace delayd::engine {

// The longest pause, and the one a pause without an end gets: beanstalkd's
// largest delay, 2^32-1 s.
constexpr int64_t kPauseForeverMs = kMaxDurationMs;

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
  // ttr of a job submitted without one, when its topic sets none.
  int64_t default_ttr_ms = 60'000;
  // How long a finished job with a key, target or attempt history stays
  // readable as "done", and keeps its key taken.
  int64_t done_retention_ms = 3'600'000;
  // Attempts kept per job in its history (the latest ones).
  size_t attempt_log_size = 20;
  // Added to a push job's target timeout to make its reservation's ttr.
  int64_t push_ttr_margin_ms = 5000;
  // Ready jobs of each kind, and buried jobs, held in memory per tube; the
  // rest wait in the store, read back in order as the window drains
  // (doc/engine.md, "Windows"). 0: all in memory. A store that does not
  // ScansSets keeps them all in memory whatever this says.
  size_t ready_window = 4096;
};

class Engine {
 public:
  // Called with the steady time (us) at which Tick() should next run, each
  // time that time moves earlier. The caller arms a timer and calls Tick().
  using WakeFn = std::function<void(int64_t steady_us)>;
  using Done = std::function<void(const Status&)>;
  template <class T>
  using Reply = std::function<void(Result<T>)>;

  // `store` and `clock` must outlive the engine.
  Engine(store::Store& store, const Clock& clock, EngineOptions options, WakeFn wake);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Cluster mode: the queue is `queue`'s (the store's SharedQueue), waiters
  // are served by `claimer` and puts take ids from `ids`. Call before
  // Recover; all three must outlive the engine.
  void JoinCluster(store::SharedQueue& queue, Claims& claimer, IdSource& ids);
  bool clustered() const { return home_->shared(); }
  // Cluster mode: notices heard from the database (a tube changed, push jobs
  // of an owned shard became ready).
  void Hear(const std::vector<store::Notice>& notices) { home_->Hear(notices); }
  // Cluster mode: the shards this node owns now; their ready push jobs are
  // its dispatcher's (TakePush claims them). Those gained or retaken at a
  // new epoch are read for ready push jobs no notice told of.
  void SetOwnership(const store::Ownership& owned) { home_->SetOwnership(owned); }
  // Cluster mode, at shutdown: push jobs claimed for the dispatcher and not
  // yet taken go back to ready, for the shards' next owners. Call once no
  // claim is in flight (PushClaimsInFlight), or its jobs stay claimed until
  // their ttr runs out.
  void ReturnClaimed() { home_->ReturnClaimed(); }
  size_t PushClaimsInFlight() const { return home_->PushClaimsInFlight(); }

  // Records submissions, fires and fire lateness in `metrics`, which must
  // outlive the engine. Call before Recover.
  void SetMetrics(Metrics* metrics);

  // Rebuilds memory from the store (in cluster mode, only tubes' pauses and
  // settings). Call once, before anything else.
  Status Recover();

  // Fires everything due by now: delayed jobs, ttr expiries, reserve
  // timeouts, unpauses and loader steps.
  void Tick();

  // --- clients ---
  Client* Connect(ClientObserver* observer);
  // Returns the client's reserved jobs to ready and forgets it.
  void Disconnect(Client* c);

  // --- beanstalk commands; names are checked by the caller ---
  // Every `done` runs once, possibly before the call returns, after the store
  // has the change (Durability per transition: doc/engine.md). A failed
  // write answers the store's error and leaves the job as the store has it.

  // A new job in the client's used tube, ready at once or delayed; `done`
  // gets its id once it is synced (kUnavailable while draining). The job is
  // visible to reserves only then.
  void Put(Client* c, uint32_t priority, int64_t delay_ms, int64_t ttr_ms, std::string body,
           std::function<void(Result<uint64_t>)> done);
  // Whether a command of `c` waits for a read aside before it takes effect
  // in memory (a kick or a peek reading jobs beyond a window or the
  // horizon, a change of a job only in the store). The client's next
  // command must wait until ClientObserver::OnReadsAnswered, or it could
  // overtake this one: a delete of a job that an unanswered kick would
  // have kicked. (SQLite answers reads at once; PostgreSQL aside.)
  bool Reading(const Client* c) const { return c->reads > 0; }
  // Ends in exactly one ClientObserver call, possibly before returning.
  // timeout_ms < 0 waits forever.
  void Reserve(Client* c, int64_t timeout_ms);
  // Ends a blocked reserve without an observer call (the client hung up).
  void CancelReserve(Client* c) { StopWaiting(c); }
  // reserve-job: any job not reserved by someone, whatever its state
  // (kNotFound otherwise). Changes memory only, like every reservation.
  void ReserveJob(Client* c, uint64_t id, Reply<JobView> done);
  // The job this client holds finishes; a job not reserved is cancelled (no
  // done record, key freed). kNotFound for a job held by another client.
  void Delete(Client* c, uint64_t id, Done done);
  // A job this client holds goes back to ready or, with a delay, delayed.
  void Release(Client* c, uint64_t id, uint32_t priority, int64_t delay_ms, Done done);
  // A job this client holds is buried (a dead letter) with `priority`.
  void Bury(Client* c, uint64_t id, uint32_t priority, Done done);
  // Restarts the ttr of a job this client holds. Not stored on one node; in
  // cluster mode the new deadline is written as this node's reservation (for
  // the owners' sweeps), `done` once that write is queued (WriteHeld).
  void Touch(Client* c, uint64_t id, Done done);
  // Up to `bound` jobs of the used tube become ready: its buried jobs if it
  // has any, else its delayed ones (soonest first, beyond the horizon too).
  // `done` gets the number the store took.
  void Kick(Client* c, uint64_t bound, std::function<void(Result<uint64_t>)> done);
  // kick-job: one buried or delayed job becomes ready (kNotFound otherwise).
  void KickJob(uint64_t id, Done done);
  // No job of the tube is reserved for `delay_ms` (a moment at least, even
  // for 0, as in beanstalkd); kNotFound for a tube that does not exist.
  void PauseTube(const std::string& name, int64_t delay_ms, Done done);

  // A job in any state but done, from memory or, beyond the horizon, the
  // store; the peek-* variants take the client's used tube. In cluster mode
  // from the database.
  void Peek(uint64_t id, Reply<JobView> done);
  void PeekReady(Client* c, Reply<JobView> done);
  void PeekDelayed(Client* c, Reply<JobView> done);
  void PeekBuried(Client* c, Reply<JobView> done);
  // From memory, or a window's refill: one node only.
  void PeekFirst(Client* c, store::JobSet s, Reply<JobView> done);

  void Use(Client* c, const std::string& name);
  size_t Watch(Client* c, const std::string& name);
  // nullopt: the client watches only this tube (NOT_IGNORED).
  std::optional<size_t> Ignore(Client* c, const std::string& name);
  const std::string& UsedTube(const Client* c) const { return c->use->name; }
  std::vector<std::string> WatchedTubes(const Client* c) const;
  // The tubes of this node's memory (in creation order), then in cluster
  // mode those only the database has jobs of.
  void TubeNames(Reply<std::vector<std::string>> done);
  std::vector<std::string> TubeNames() const;  // this node's

  void StatsJob(uint64_t id, Reply<JobStats> done);
  // Job counts from memory, or in cluster mode the cluster's from the
  // database; the rest is this node's.
  void StatsTube(const std::string& name, Reply<TubeStats> done);
  void Stats(Reply<EngineStats> done);
  // From memory: every count on one node, this node's alone in cluster mode.
  Result<TubeStats> StatsTube(const std::string& name) const;
  EngineStats Stats() const;
  // EngineStats::unsound_rows, without counting the jobs.
  uint64_t unsound_rows() const { return unsound_rows_; }
  // Cluster mode: changes of held jobs answered once queued (WriteHeld)
  // whose commit then failed.
  uint64_t held_write_failures() const { return home_->held_write_failures(); }

  // --- the HTTP API ---
  // Submits jobs to one topic, all durable or none. Jobs whose key is taken
  // come back as duplicates of the job holding it and are not created.
  // `also`, when given, adds store mutations that commit with the jobs (a
  // timer's advance); it is called with the outcome of each job, ids known.
  using AlsoFn = std::function<std::vector<store::Mutation>(const std::vector<Submitted>&)>;
  void Submit(const std::string& topic, std::vector<NewJob> jobs,
              std::function<void(Result<std::vector<Submitted>>)> done, AlsoFn also = nullptr);
  void GetJob(uint64_t id, Reply<JobInfo> done);
  // Each of `ids` as GetJob finds it, in one read of the store at most.
  void GetJobs(std::vector<uint64_t> ids, std::function<void(std::vector<Result<JobInfo>>)> done);
  // The live job, or done job within its retention, holding `key`.
  void GetByKey(const std::string& topic, const std::string& key, Reply<JobInfo> done);
  void List(const ListFilter& f, Reply<ListPage> done);
  // The due forecast: delayed jobs (of `topic`, or all) due from now on, per
  // bucket of `bucket_minutes`. Buckets of whole hours start at the current
  // hour and are counted in memory, at once (one node); other buckets start
  // at the current minute and are read from the store, as are all in cluster
  // mode (memory holds only this node's part there).
  void DueForecast(int64_t bucket_minutes, size_t buckets, std::optional<std::string> topic,
                   Reply<Forecast> done);
  bool ForecastInMemory(int64_t bucket_minutes) const {
    return home_->CountsDueInMemory() && bucket_minutes % 60 == 0;
  }
  // Dead letters (of `topic`, or all) grouped by last error, largest first,
  // read from the store: a job buried by a write not yet answered may be
  // missing.
  void DeadLetterGroups(std::optional<std::string> topic, size_t limit,
                        Reply<std::vector<store::ErrorGroup>> done);
  // kConflict when reserved.
  void Modify(uint64_t id, const JobPatch& patch, Done done);
  // Deletes a job that is not reserved, leaving no record (a cancel), or
  // the record of a done job, freeing its key.
  void Remove(uint64_t id, Done done);
  // A delayed job becomes ready now; a ready one stays so.
  void RunNow(uint64_t id, Done done);
  // A buried job (dead letter) becomes ready with a fresh attempt budget.
  void Retry(uint64_t id, Done done);
  // An operator parks a ready or delayed job as buried (kick or retry bring
  // it back); a job reserved over HTTP is buried as its holder would.
  // kConflict for one a beanstalk consumer or the dispatcher holds.
  void BuryJob(uint64_t id, std::optional<uint32_t> priority, Done done);
  // Pull over HTTP: the reservation `c` won moves to the HTTP holder, which
  // keeps it until settled or its ttr runs out.
  Result<JobInfo> AdoptReservation(Client* c, uint64_t id);
  enum class Settle : uint8_t { kFinish, kRelease, kBury, kTouch };
  // Settles an HTTP-held reservation; `lease` 0 skips the lease check. A
  // release or bury without `priority` keeps the job's.
  void SettleHttp(uint64_t id, uint32_t lease, Settle how, std::optional<uint32_t> priority,
                  int64_t delay_ms, Done done);
  // Topics as this node's memory has them (every topic on one node).
  std::vector<TopicInfo> Topics() const;
  Result<TopicInfo> Topic(const std::string& name) const;
  // Every topic with jobs, a pause or settings, or topic `name` (kNotFound
  // when none): in cluster mode the cluster's, read from the database, else
  // as above.
  void Topics(Reply<std::vector<TopicInfo>> done);
  void Topic(const std::string& name, Reply<TopicInfo> done);
  // Null settings remove them.
  void SetTopicSettings(const std::string& name, std::shared_ptr<const TopicSettings> settings,
                        Done done);
  void ResumeTube(const std::string& name, Done done);
  // Removes done jobs past their retention (runs in the store's writer).
  void PurgeDone();

  // --- events ---
  // `fn` hears of every JobEvent from now on, on the engine's thread, from
  // inside engine calls (after the engine's own waiters are served). It must
  // not call back into the engine synchronously; post the follow-up instead.
  // Returns the subscription, for Unsubscribe.
  using Listener = std::function<void(const JobEvent&)>;
  size_t Subscribe(Listener fn);
  void Unsubscribe(size_t subscription);

  // --- push delivery ---
  // Reserves the topic's next due push job for the dispatcher; nullopt when
  // none is ready or the topic is paused. In cluster mode, when it has none,
  // it claims the topic's push jobs of the owned shards and emits a ready
  // event (push) once they are in.
  std::optional<PushLease> TakePush(const std::string& topic);
  // Records a delivery: `a.number` names the lease (kConflict when it ran
  // out), `a.outcome` what follows: the job finishes (kOk), is delayed by
  // `retry_delay_ms` (kRetry) or is buried as a dead letter (kDead).
  void PushDone(uint64_t id, const Attempt& a, int64_t retry_delay_ms, Done done);
  std::shared_ptr<const TopicSettings> SettingsOf(const std::string& topic) const {
    Tube* t = FindTube(topic);
    return t != nullptr ? t->settings : nullptr;
  }
  // Topics that have push jobs ready now.
  std::vector<std::string> PushReadyTopics() const;

  // While draining, puts fail with kUnavailable.
  void SetDraining(bool on) { draining_ = on; }
  bool draining() const { return draining_; }

  size_t jobs_in_memory() const { return jobs_.size(); }

 private:
  friend class LocalHome;
  friend class SharedHome;

  // Time.
  uint64_t NowTick() const;
  uint64_t TickAtSteady(int64_t steady_us) const;
  uint64_t TickAtWall(int64_t wall_us) const;
  int64_t SteadyAtTick(uint64_t tick) const;
  void Schedule(EngineTimer& t, uint64_t tick);
  void Fire(EngineTimer* t);
  void ScheduleLoader();
  // A new job whose insert answered kUnknown (Publish): kept pinned until
  // ReadInDoubt learns whether the store has it.
  void Doubt(Job* j);
  void ReadInDoubt();
  void LoadStep();
  void Loaded(Result<std::vector<store::JobRecord>> rows, uint64_t since);
  // Drops a job from memory (deleted, or its next due time is beyond the
  // loaded horizon).
  void Forget(Job* j);
  int64_t loaded_horizon_ms() const;

  // Tubes.
  bool Paused(const Tube* t) const { return t->PausedAt(clock_.SteadyMicros()); }
  Tube* FindTube(const std::string& name) const;
  Tube* FindOrMakeTube(const std::string& name);
  void MaybeDropTube(Tube* t);

  // Jobs.
  // "tube\0key": the key of a keyed job, unique across tubes.
  static std::string KeyOf(const std::string& tube, const std::string& key);
  Job* FindLive(uint64_t id) const;
  // The job if `c` holds its reservation, else null.
  Job* ReservedBy(const Client* c, uint64_t id) const;
  // Wall us when a delay asked for now ends.
  int64_t DueFromNow(int64_t delay_ms) const;
  // `spec`, when given, is `r.spec` already decoded.
  Job* AddJob(const store::JobRecord& r, JobState state,
              std::shared_ptr<const JobSpec> spec = nullptr);
  JobInfo Info(const Job& j) const;
  static JobInfo Info(store::JobRecord r);
  // The transitions. Each changes memory, then writes the change (Write);
  // every front door goes through them.
  // ready -> reserved by `holder` for `ttr_ms` (not stored).
  void Hold(Job* j, Client* holder, int64_t ttr_ms);
  // reserved -> finished: a done record when it has extras, else gone.
  void Finish(Job* j, Done done);
  // not reserved -> gone from the store with no record, its key free.
  void Cancel(Job* j, Done done);
  // The kEnded event of `j`, once its end is written; then `done`.
  Done Ended(Job* j);
  Done EndedThen(Job* j, Done done);
  // reserved -> ready, or delayed by `delay_ms`.
  void Requeue(Job* j, uint32_t priority, int64_t delay_ms, Done done);
  // reserved -> buried.
  void BuryHeld(Job* j, uint32_t priority, Done done);
  // ready or delayed -> buried, by an operator.
  void Park(Job* j, uint32_t priority, Done done);
  // buried or delayed -> ready; `fresh_budget` also restarts its attempts
  // (a dead letter retried).
  void KickOne(Job* j, bool fresh_budget, Done done);
  // reserved -> reserved until a ttr from now (touch).
  void Extend(Job* j, Done done);
  // reserved -> ready, not stored on one node: its ttr ran out
  // (`timed_out`), or its client hung up.
  void Unhold(Job* j, bool timed_out);
  // delayed -> ready now (run-now).
  void RunEarly(Job* j, Done done);
  // any but reserved -> the same, or delayed, or ready as its new due time
  // says (an edit: PATCH /v1/jobs/{id}).
  void Edit(Job* j, const JobPatch& p, Done done);
  // The topic's defaults applied to a job being created in `t`.
  void ApplyDefaults(const Tube* t, JobSpec& spec, int64_t& ttr_ms) const;
  void SetExtra(Job* j, const store::JobRecord& r, std::shared_ptr<const JobSpec> spec = nullptr);
  // Serves the tube's waiters on kReady, then tells the listeners. `j` null:
  // the tube itself (it resumed).
  void Emit(Tube* t, JobEventKind kind, const Job* j);
  store::JobRecord Record(const Job& j) const;
  JobView View(const Job& j) const { return {j.id, j.body}; }
  void MakeReady(Job* j);
  void MakeDelayed(Job* j);
  // Counts `delta` delayed jobs of `t` due in `hour` (Tube::due_hours, the
  // forecast's counts); every change of a tube's delayed set or far_delayed
  // comes with one.
  void CountDue(Tube* t, int64_t hour, int64_t delta);
  void MakeBuried(Job* j);  // REQUIRES: detached from its previous state
  // Back among the buried at its old place (an edit of a buried job).
  void Rebury(Job* j);
  // A job stored as delayed, whose write was just answered: ready if its
  // time has come, delayed in memory if due within the loaded horizon, and
  // otherwise left in state kDelayed for WriteDone to hand to the store.
  void PlaceDelayed(Job* j);
  // Puts `j`, read from the store and in no state's set, where its stored
  // `state` says: buried; delayed (PlaceDelayed: ready, and counted as
  // fired, if its time has come); else ready (one node keeps no
  // reservation across a restart or a failed write). Recovery, the loader
  // and a resync all place a record through it; SharedHome::AdoptRow, whose
  // rows stay the database's (no timers, no events), does not.
  void Place(Job* j, store::StoredState state);
  // A delayed job (detached) has just become ready at (or after) its due
  // time: counted as fired, and ready in memory only (Job::unstored).
  void Fired(Job* j);
  // A submitted job's insert is durable (ok) or failed: make it visible in
  // its state, or drop it unseen.
  void Publish(Job* j, const Status& s);
  void Detach(Job* j);  // out of the set/timer of its current state
  // Writes `m`, the change just made to `j` in memory; see engine.cc.
  void Write(Job* j, store::Mutation m, Done done);
  // Writes a change of a job this node's client held (finish, release,
  // bury, touch; kWritten): `reply` once the store has it, in cluster mode
  // once queued; `committed` (may be null) once the store has it.
  void WriteHeld(Job* j, store::Mutation m, Done committed, Done reply);
  // Memory takes the store's record of `j` again after a failed write, then
  // `then` runs.
  void Resync(Job* j, std::function<void()> then);
  void WriteDone(Job* j);
  // Memory takes the store's record `read` of `j` (Resync's second half).
  void TakeStored(Job* j, const Result<std::optional<store::JobRecord>>& read);
  // Whether the store's record `r` is of a job memory does not hold (on one
  // node a delayed job beyond the loaded horizon, not yet being loaded).
  bool IsFar(const store::JobRecord& r) const { return home_->IsFar(r); }
  // Whether a row read from the store may be placed in memory: it is sound
  // (store::RecordFault) and its id is not in memory already. An unsound row
  // is logged and counted (EngineStats::unsound_rows), and left in the store.
  bool Sound(const store::JobRecord& r);
  // The store's record of `id` when it is such a job; nullopt otherwise, and
  // for a job in memory by the time the read is answered.
  void ReadFar(uint64_t id, Reply<std::optional<store::JobRecord>> done);
  // `live(job)` for a job in memory (now, or by the time a read of the
  // store is answered), `far(record)` for a delayed job beyond the horizon,
  // kNotFound otherwise.
  template <class T, class Live, class Far>
  void LiveOrFar(uint64_t id, Live live, Far far, Reply<T> done) {
    if (Job* j = FindLive(id)) return done(live(*j));
    ReadFar(id, [this, id, live, far,
                 done = std::move(done)](Result<std::optional<store::JobRecord>> r) mutable {
      if (Job* j = FindLive(id)) return done(live(*j));  // came into memory meanwhile
      if (!r.ok()) return done(r.status());
      if (!r.value()) return done(Status::NotFound("no such job"));
      done(far(std::move(*r.value())));
    });
  }
  Job* MaterializeFar(const store::JobRecord& r);
  // The job `id` in memory if `allowed` accepts it, or a delayed job beyond
  // the horizon brought into memory (not yet detached from anything). On
  // behalf of client `c`, if given: kUnavailable if it hangs up meanwhile.
  void FindOrLoad(uint64_t id, std::function<bool(const Job&)> allowed, Reply<Job*> done,
                  Client* c = nullptr);
  // A kick of client `c` in tube `name`, pinning `c` while it reads
  // (Reading).
  void KickBuried(Client* c, const std::string& name, uint64_t bound, Reply<uint64_t> done,
                  std::optional<size_t> had = std::nullopt);
  void KickTube(Client* c, const std::string& name, uint64_t bound,
                std::optional<std::pair<std::vector<store::JobRecord>, uint64_t>> far,
                Reply<uint64_t> done);
  // Kicks each of `kicked`; `done` gets how many the store took.
  void KickAll(std::vector<Job*> kicked, Reply<uint64_t> done);
  void PeekFar(const std::string& tube, Reply<JobView> done);
  // Keyed submissions, one at a time: their keys are looked up in the store
  // aside, and a later one must see the jobs an earlier one created.
  struct KeyedSubmit {
    std::string topic;
    std::vector<NewJob> jobs;
    std::function<void(Result<std::vector<Submitted>>)> done;
    AlsoFn also;
  };
  using KeyRows = std::vector<Result<std::optional<store::JobRecord>>>;
  void LookUpKeys();
  // Submit, with the store's job for each key of `keys` (by key) at hand.
  void SubmitNow(const std::string& topic, std::vector<NewJob> jobs,
                 const std::unordered_map<std::string, std::optional<store::JobRecord>>& keys,
                 std::function<void(Result<std::vector<Submitted>>)> done, AlsoFn also);
  void SettleKey(const std::string& key, uint64_t id);
  // `key` is no longer pending: the submissions waiting on it queue for
  // their key lookup (which the caller starts when `start` is false).
  void FreeKey(const std::string& key, bool start);

  // Reads aside: `then(result, since)` gets what `read` returned, with the
  // mark to ask LeftSince about. `read` runs on the store's read thread and
  // must touch nothing of the engine.
  template <class Read, class Then>
  void Aside(Read read, Then then) {
    store::ReadAsyncMarked(store_, left_, std::move(read), std::move(then));
  }
  // Whether job `id` left memory after mark `since`: a row read since may
  // be older than the change that made it leave.
  bool LeftSince(uint64_t id, uint64_t since) const { return left_.ChangedSince(id, since); }
  // A client with a read aside in flight (FindOrLoad) outlives its
  // disconnection until the read is answered; Unpin says whether it is
  // still connected.
  void Pin(Client* c) { ++c->reads; }
  bool Unpin(Client* c);

  // The local home's (local_home.cc) ways, which need the engine's memory.
  Status RecoverHorizon();
  void ReserveFromMemory(Client* c, int64_t timeout_ms);
  // The soonest delayed job of `tube`, in memory or beyond the horizon.
  void PeekDelayedHere(const std::string& tube, Reply<JobView> done);

  // Windows (windows.cc): a tube's ready and buried jobs beyond a window of
  // them stay in the store.
  static store::JobSet SetOf(const Job& j);
  static store::SetKey SetKeyOf(const Job& j);
  size_t SetSize(const Tube* t, store::JobSet s) const;
  // The set's first job if it is the first of the whole set, in memory or
  // cold; else null (none, or a refill is needed first, which it asks for).
  Job* FirstOf(Tube* t, store::JobSet s);
  // A job came into (or, its writes answered, stays in) its set: it may
  // have to leave memory, or push another out.
  void Entered(const Job* j);
  // A job left its set: the window may need refilling.
  void Left(Tube* t, store::JobSet s);
  void WindowDue(Tube* t);
  // `then` once the set's next refill, of `want` jobs at least, has been
  // read: at once when the set has nothing cold; before this returns when
  // the store reads at once (SQLite), so that no later command of a client
  // comes in between.
  void WhenRefilled(Tube* t, store::JobSet s, std::function<void(const Status&)> then,
                    size_t want = 0);
  // The set's read ahead `n` was answered: taken, unless it was already.
  void AheadAnswered(const std::string& tube, store::JobSet s, uint64_t n);
  // Takes the set's read ahead in flight, waiting for its rows if need be.
  void TakeAhead(Tube* t, store::JobSet s);
  void SettleWindows();
  void Evict(Tube* t, store::JobSet s);
  // Writes the jobs beyond the window that Evict cannot take until their
  // rows say what memory does (Job::unstored).
  void StoreBeyondWindow(Tube* t, store::JobSet s);
  void Refill(Tube* t, store::JobSet s);
  // Takes rows read after `after` into memory (a refill's, or recovery's:
  // `recovering`, when a row whose id is in memory already is a second row
  // of that id, not an older copy of its job).
  void Refilled(Tube* t, store::JobSet s, store::SetKey after, size_t limit,
                Result<std::vector<store::JobRecord>> rows, uint64_t since,
                bool recovering = false);
  // A cold job read from the store, back in memory in its set.
  Job* MaterializeCold(const store::JobRecord& r, bool emit);
  // Recovery: the windows, or with none every job, of the stored sets.
  Status RecoverSets(const std::vector<store::SetCount>& sets);
  // Whether any tube `c` watches has ready jobs in the store only.
  bool ColdReadyFor(const Client* c) const;

  // Waiters.
  void Serve(Tube* t);
  // Hands `j` to the waiting client `c`.
  void Grant(Client* c, Job* j);
  void StopWaiting(Client* c);
  void ScheduleClient(Client* c);
  bool DeadlineSoon(const Client* c) const;
  void CheckClient(Client* c);
  void ExpireReservation(Job* j);

  store::Store& store_;
  // Where jobs live between transitions: LocalHome, or SharedHome once
  // JoinCluster is called.
  std::unique_ptr<JobHome> home_;
  EngineTimer push_retry_timer_;
  const Clock& clock_;
  const EngineOptions options_;
  WakeFn wake_;
  Metrics* metrics_ = nullptr;

  int64_t origin_us_;  // steady us of tick 0, aligned to a wall-clock ms boundary
  wheel::TimingWheel wheel_;
  uint64_t armed_tick_ = ~uint64_t{0};

  std::unordered_map<uint64_t, std::unique_ptr<Job>> jobs_;
  std::vector<std::unique_ptr<Tube>> tubes_;  // creation order, swap-removed as beanstalkd does
  std::unordered_map<std::string, Tube*> tube_index_;
  std::vector<std::unique_ptr<Client>> clients_;
  uint64_t next_id_ = 1;
  uint64_t unsound_rows_ = 0;  // rows Sound() left out
  uint64_t bury_seq_ = 0;
  uint64_t total_jobs_ = 0;
  uint64_t job_timeouts_ = 0;
  uint64_t waiting_ = 0;
  bool draining_ = false;
  std::vector<std::unique_ptr<Client>> holders_;
  Client* http_holder_ = nullptr;  // holds reservations made over HTTP
  Client* push_holder_ = nullptr;  // holds the dispatcher's reservations
  std::vector<std::pair<size_t, Listener>> listeners_;
  size_t next_subscription_ = 1;
  // Keys of submitted jobs not yet durable: "tube\0key" -> id. While a key
  // lookup is in flight, keys that settle stay here (listed in settled_keys_
  // with their job) until its answer is used: its rows may predate the
  // commit.
  std::unordered_map<std::string, uint64_t> pending_keys_;
  std::vector<std::pair<std::string, uint64_t>> settled_keys_;
  std::deque<KeyedSubmit> keyed_;  // the front one's keys are being looked up
  // Submissions naming a pending key, by key: they wait for its commit's
  // answer, then look their keys up again, so that a duplicate is answered
  // with a job that is kept (or, its insert having failed, is made anew).
  std::unordered_map<std::string, std::vector<KeyedSubmit>> key_waiters_;
  // Jobs whose failed write is being read back: id -> written again meanwhile.
  std::unordered_map<uint64_t, bool> resyncing_;
  std::vector<std::unique_ptr<Client>> departed_;  // disconnected, reads in flight

  // The jobs that left memory while reads aside were in flight.
  store::StaleReads left_;
  // The specs of jobs made from their rows (SetExtra, Info).
  SpecCache specs_;

  // The loader: every delayed job due in minutes <= loaded_minute_ is in
  // memory (or pinned by a pending write); later ones only in the store.
  int64_t loaded_minute_ = 0;
  uint64_t load_cursor_ = 0;  // last id read of loaded_minute_
  bool load_done_ = true;     // loaded_minute_ fully read
  EngineTimer loader_timer_;
  // New jobs whose insert's outcome the store could not learn (kUnknown):
  // pinned in memory, unseen, until a read of the store tells whether they
  // were kept; read again every second while the store does not answer.
  std::set<uint64_t> in_doubt_;
  EngineTimer in_doubt_timer_;
  // Windows: 0 when every ready and buried job stays in memory.
  size_t window_ = 0;
  std::vector<Tube*> windows_due_;  // tubes whose window_due is set
  EngineTimer window_timer_;
  // A refill's read failed: the tube is looked at again a second later (or
  // sooner, on activity), and the failure logged once until a read succeeds.
  EngineTimer window_retry_timer_;
  bool window_read_failing_ = false;
  uint64_t aheads_ = 0;  // reads ahead made (Window::Ahead::n)
  bool reading_in_doubt_ = false;
  bool loading_ = false;       // a read of the loader is in flight
  bool load_failing_ = false;  // the last read failed (logged once until one succeeds)
};

}  // namespace delayd::engine
