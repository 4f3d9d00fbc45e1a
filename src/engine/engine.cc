#include "engine/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cassert>

#include "engine/spec_json.h"

namespace delayd::engine {

using store::JobRecord;
using store::Mutation;
using store::StoredState;

namespace {
constexpr const char* kDefaultTube = "default";
}  // namespace

Engine::Engine(store::Store& store, const Clock& clock, EngineOptions options, WakeFn wake)
    : store_(store),
      clock_(clock),
      options_(options),
      wake_(std::move(wake)),
      origin_us_(clock.SteadyMicros() - clock.WallMicros() % 1000 - 1000),
      wheel_(NowTick()) {
  loader_timer_.kind = TimerKind::kLoader;
  FindOrMakeTube(kDefaultTube)->permanent = true;
  // Internal holders of reservations: they use and watch no tube, so they
  // never show in beanstalk stats, and never wait.
  for (Client** holder : {&http_holder_, &push_holder_}) {
    holders_.push_back(std::make_unique<Client>());
    *holder = holders_.back().get();
    (*holder)->timer.kind = TimerKind::kClient;
    (*holder)->timer.owner = *holder;
  }
}

Engine::~Engine() = default;

// ---------------------------------------------------------------- tubes

Tube* Engine::FindTube(const std::string& name) const {
  auto it = tube_index_.find(name);
  return it == tube_index_.end() ? nullptr : it->second;
}

Tube* Engine::FindOrMakeTube(const std::string& name) {
  if (Tube* t = FindTube(name)) return t;
  auto t = std::make_unique<Tube>();
  t->name = name;
  t->timer.kind = TimerKind::kTube;
  t->timer.owner = t.get();
  Tube* raw = t.get();
  tubes_.push_back(std::move(t));
  tube_index_.emplace(name, raw);
  return raw;
}

void Engine::MaybeDropTube(Tube* t) {
  if (t->refs() != 0) return;
  wheel_.Cancel(&t->timer.node);
  tube_index_.erase(t->name);
  auto it = std::find_if(tubes_.begin(), tubes_.end(), [t](auto& p) { return p.get() == t; });
  assert(it != tubes_.end());
  // beanstalkd removes by moving the last tube into the hole; list-tubes
  // shows that order, so keep it.
  if (it != tubes_.end() - 1) std::swap(*it, tubes_.back());
  tubes_.pop_back();
}

// ---------------------------------------------------------------- jobs

Job* Engine::FindLive(uint64_t id) const {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return nullptr;
  Job* j = it->second.get();
  return Visible(j->state) ? j : nullptr;
}

Job* Engine::ReservedBy(const Client* c, uint64_t id) const {
  Job* j = FindLive(id);
  return j != nullptr && j->state == JobState::kReserved && j->reserver == c ? j : nullptr;
}

int64_t Engine::DueFromNow(int64_t delay_ms) const {
  // Rounded up: a job must never become ready before its delay has passed.
  return (clock_.WallMicros() + 999) / 1000 + delay_ms;
}

Job* Engine::AddJob(const JobRecord& r, JobState state, std::shared_ptr<const JobSpec> spec) {
  auto j = std::make_unique<Job>();
  j->id = r.id;
  j->tube = FindOrMakeTube(r.tube);
  j->priority = r.priority;
  j->state = state;
  j->due_ms = r.due_ms;
  j->delay_ms = r.delay_ms;
  j->ttr_ms = r.ttr_ms;
  j->created_ms = r.created_ms;
  j->run_at_ms = r.run_at_ms;
  j->counters = r.counters;
  j->body = std::make_shared<const std::string>(r.body);
  j->timer.kind = TimerKind::kJob;
  j->timer.owner = j.get();
  SetExtra(j.get(), r, std::move(spec));
  ++j->tube->jobs;
  Job* raw = j.get();
  jobs_.emplace(r.id, std::move(j));
  return raw;
}

JobRecord Engine::Record(const Job& j) const {
  JobRecord r;
  r.id = j.id;
  r.tube = j.tube->name;
  r.priority = j.priority;
  r.state = ToStored(j.state);
  r.due_ms = j.due_ms;
  r.delay_ms = j.delay_ms;
  r.ttr_ms = j.ttr_ms;
  r.created_ms = j.created_ms;
  r.run_at_ms = j.run_at_ms;
  r.counters = j.counters;
  if (j.extra) {
    r.key = j.extra->key;
    r.spec = j.extra->spec_text;
    r.attempt_log = j.extra->attempt_log;
    r.last_error = j.extra->last_error;
  }
  return r;
}

void Engine::SetExtra(Job* j, const JobRecord& r, std::shared_ptr<const JobSpec> spec) {
  if (r.key.empty() && r.spec.empty() && r.attempt_log.empty() && r.last_error.empty()) {
    j->extra.reset();
    return;
  }
  if (!j->extra) j->extra = std::make_unique<JobExtra>();
  j->extra->key = r.key;
  if (j->extra->spec_text != r.spec || !j->extra->spec) {
    j->extra->spec_text = r.spec;
    j->extra->spec = spec ? std::move(spec) : DecodeSpec(r.spec);
  }
  j->extra->attempt_log = r.attempt_log;
  j->extra->last_error = r.last_error;
  j->extra->cancelled = false;
}

void Engine::NotifyPush(Tube* t) {
  if (push_listener_ && !t->push_ready.empty() && !Paused(t)) push_listener_(t->name);
}

void Engine::MakeReady(Job* j) {
  j->state = JobState::kReady;
  if (j->priority < kUrgentThreshold) ++j->tube->urgent;
  if (j->push()) {
    const bool was_empty = j->tube->push_ready.empty();
    j->tube->push_ready.insert(j);
    if (was_empty) NotifyPush(j->tube);
    return;
  }
  j->tube->ready.insert(j);
  Serve(j->tube);
}

void Engine::MakeBuried(Job* j) {
  j->bury_seq = ++bury_seq_;
  j->state = JobState::kBuried;
  j->tube->buried.insert(j);
}

void Engine::MakeDelayed(Job* j) {
  j->state = JobState::kDelayed;
  j->tube->delayed.insert(j);
  Schedule(j->timer, TickAtWall(j->due_ms));
}

void Engine::Detach(Job* j) {
  Tube* t = j->tube;
  switch (j->state) {
    case JobState::kReady:
      (j->push() ? t->push_ready : t->ready).erase(j);
      if (j->priority < kUrgentThreshold) --t->urgent;
      break;
    case JobState::kDelayed:
      t->delayed.erase(j);
      wheel_.Cancel(&j->timer.node);
      break;
    case JobState::kReserved: {
      j->reserver->reserved.erase(j);
      --t->reserved;
      wheel_.Cancel(&j->timer.node);
      j->reserver = nullptr;
      break;
    }
    case JobState::kBuried:
      t->buried.erase(j);
      break;
    case JobState::kPending:
    case JobState::kDone:
    case JobState::kDeleting:
      break;
  }
}

// Pins `j` in memory until the mutation is answered. Memory changed before
// the write (so the client's next command sees it); a write that fails is
// undone by taking the store's record again, before `done` tells the client.
void Engine::Write(Job* j, Mutation m, Done done) {
  ++j->pending_writes;
  store_.Submit(std::move(m), [this, id = j->id, done = std::move(done)](const Status& s) {
    Job* job = jobs_.at(id).get();
    if (!s.ok()) job->diverged = true;
    // With later writes still queued, the last of them resyncs: each carries
    // the whole job, so the store ends as memory is unless one fails.
    if (job->diverged && job->pending_writes == 1) Resync(job);
    done(s);
    WriteDone(job);
  });
}

void Engine::Resync(Job* j) {
  j->diverged = false;
  if (j->state == JobState::kPending) return;  // a failed insert: Publish drops it
  auto read = store_.Get(j->id);
  if (!read.ok()) {
    // The store can neither write nor read: what it holds is unknown, so the
    // job leaves memory rather than show a state the store may not have. A
    // restart reads it back.
    spdlog::error(
        "job {}: a write failed and reading it back failed too ({}); it is out of "
        "service until a restart",
        j->id, read.status().ToString());
    Detach(j);
    j->state = JobState::kDeleting;
    return;
  }
  const std::optional<JobRecord>& rec = read.value();
  if (!rec || rec->state == StoredState::kDone) {
    Detach(j);
    j->state = JobState::kDeleting;
    return;
  }
  // A reservation is not stored, and a reserved job is stored as ready: one
  // granted since the failed change stands only if the store says ready.
  const bool keep_reservation =
      j->state == JobState::kReserved && rec->state == StoredState::kReady;
  if (!keep_reservation) Detach(j);
  j->priority = rec->priority;
  j->due_ms = rec->due_ms;
  j->delay_ms = rec->delay_ms;
  j->ttr_ms = rec->ttr_ms;
  j->run_at_ms = rec->run_at_ms;
  // Reserves and timeouts are counted in memory and stored with the next
  // write: memory has the truth of those two.
  store::JobCounters counters = rec->counters;
  counters.reserves = j->counters.reserves;
  counters.timeouts = j->counters.timeouts;
  j->counters = counters;
  if (*j->body != rec->body) j->body = std::make_shared<const std::string>(rec->body);
  SetExtra(j, *rec);
  if (keep_reservation) return;
  switch (rec->state) {
    case StoredState::kBuried:
      MakeBuried(j);
      break;
    case StoredState::kDelayed:
      if (rec->due_ms > clock_.WallMillis()) {
        if (store::DueMinute(rec->due_ms) > loaded_minute_) {
          j->state = JobState::kDelayed;  // WriteDone hands it back to the store
        } else {
          MakeDelayed(j);
        }
        break;
      }
      [[fallthrough]];
    case StoredState::kReady:
    case StoredState::kDone:
      MakeReady(j);
      break;
  }
}

void Engine::WriteDone(Job* j) {
  if (--j->pending_writes > 0) return;
  Tube* t = j->tube;
  if (j->state == JobState::kDeleting) {
    --t->jobs;
    jobs_.erase(j->id);
    MaybeDropTube(t);
  } else if (j->state == JobState::kDelayed && store::DueMinute(j->due_ms) > loaded_minute_) {
    // Due beyond the loaded horizon: the store keeps it; the loader brings it
    // back when its minute comes.
    Detach(j);
    --t->jobs;
    ++t->far_delayed;
    jobs_.erase(j->id);
  }
}

Result<std::optional<JobRecord>> Engine::FindFar(uint64_t id) {
  if (jobs_.count(id)) return std::optional<JobRecord>();
  auto r = store_.Get(id);
  if (!r.ok()) return r.status();
  std::optional<JobRecord>& rec = r.value();
  if (!rec) return std::optional<JobRecord>();
  const int64_t minute = store::DueMinute(rec->due_ms);
  const bool far = rec->state == StoredState::kDelayed &&
                   (minute > loaded_minute_ ||
                    (minute == loaded_minute_ && !load_done_ && rec->id > load_cursor_));
  if (!far) return std::optional<JobRecord>();
  return std::move(rec);
}

Result<Job*> Engine::FindOrLoad(uint64_t id, const std::function<bool(const Job&)>& allowed) {
  if (Job* j = FindLive(id)) {
    if (!allowed(*j)) return Status::Conflict("job is " + std::string(StateName(j->state)));
    return j;
  }
  auto far = FindFar(id);
  if (!far.ok()) return far.status();
  if (!far.value()) return Status::NotFound("no such job");
  return MaterializeFar(**far);  // delayed, which every caller accepts
}

Job* Engine::MaterializeFar(const JobRecord& r) {
  Job* j = AddJob(r, JobState::kDelayed);
  if (j->tube->far_delayed > 0) --j->tube->far_delayed;
  return j;
}

// ---------------------------------------------------------------- clients

Client* Engine::Connect(ClientObserver* observer) {
  auto c = std::make_unique<Client>();
  c->observer = observer;
  c->timer.kind = TimerKind::kClient;
  c->timer.owner = c.get();
  Tube* t = FindTube(kDefaultTube);
  c->use = t;
  c->watch.push_back(t);
  ++t->using_count;
  ++t->watching_count;
  clients_.push_back(std::move(c));
  return clients_.back().get();
}

void Engine::Disconnect(Client* c) {
  StopWaiting(c);
  wheel_.Cancel(&c->timer.node);
  std::vector<Job*> held(c->reserved.begin(), c->reserved.end());
  for (Job* j : held) {
    Detach(j);
    MakeReady(j);
  }
  // Each tube once: a tube both used and watched must not be looked at
  // again after dropping it.
  std::vector<Tube*> touched = c->watch;
  if (std::find(touched.begin(), touched.end(), c->use) == touched.end()) {
    touched.push_back(c->use);
  }
  --c->use->using_count;
  for (Tube* t : c->watch) --t->watching_count;
  auto it = std::find_if(clients_.begin(), clients_.end(), [c](auto& p) { return p.get() == c; });
  clients_.erase(it);
  for (Tube* t : touched) MaybeDropTube(t);
}

void Engine::Use(Client* c, const std::string& name) {
  Tube* t = FindOrMakeTube(name);
  Tube* old = c->use;
  ++t->using_count;
  c->use = t;
  --old->using_count;
  MaybeDropTube(old);
}

size_t Engine::Watch(Client* c, const std::string& name) {
  Tube* t = FindOrMakeTube(name);
  if (std::find(c->watch.begin(), c->watch.end(), t) == c->watch.end()) {
    c->watch.push_back(t);
    ++t->watching_count;
  }
  return c->watch.size();
}

std::optional<size_t> Engine::Ignore(Client* c, const std::string& name) {
  auto it =
      std::find_if(c->watch.begin(), c->watch.end(), [&](Tube* t) { return t->name == name; });
  if (it == c->watch.end()) return c->watch.size();
  if (c->watch.size() < 2) return std::nullopt;
  Tube* t = *it;
  *it = c->watch.back();  // beanstalkd's swap-remove, visible in list-tubes-watched
  c->watch.pop_back();
  --t->watching_count;
  MaybeDropTube(t);
  return c->watch.size();
}

std::vector<std::string> Engine::WatchedTubes(const Client* c) const {
  std::vector<std::string> out;
  for (Tube* t : c->watch) out.push_back(t->name);
  return out;
}

std::vector<std::string> Engine::TubeNames() const {
  std::vector<std::string> out;
  for (auto& t : tubes_) out.push_back(t->name);
  return out;
}

// ---------------------------------------------------------------- commands

void Engine::Put(Client* c, uint32_t priority, int64_t delay_ms, int64_t ttr_ms, std::string body,
                 std::function<void(Result<uint64_t>)> done) {
  if (draining_) {
    done(Status::Unavailable("draining"));
    return;
  }
  const int64_t due_ms = DueFromNow(delay_ms);
  JobRecord r;
  r.id = next_id_++;
  r.tube = c->use->name;
  r.priority = priority;
  r.state = delay_ms > 0 ? StoredState::kDelayed : StoredState::kReady;
  r.due_ms = due_ms;
  r.delay_ms = delay_ms;
  r.ttr_ms = ttr_ms;
  r.created_ms = due_ms - delay_ms;
  r.run_at_ms = due_ms;
  r.body = std::move(body);
  if (c->use->settings) {
    JobSpec spec;
    int64_t unused_ttr = ttr_ms;
    ApplyDefaults(c->use, spec, unused_ttr);
    r.spec = EncodeSpec(spec);
  }
  Job* j = AddJob(r, JobState::kPending);
  Write(j, Mutation::Insert(std::move(r)), [this, j, done = std::move(done)](const Status& s) {
    Publish(j, s);
    if (!s.ok()) return done(s);
    done(j->id);
  });
}

void Engine::Publish(Job* j, const Status& s) {
  if (!s.ok()) {
    j->state = JobState::kDeleting;  // never visible; dropped by WriteDone
    return;
  }
  ++total_jobs_;
  ++j->tube->total_jobs;
  if (j->delay_ms > 0 && j->due_ms * 1000 > clock_.WallMicros()) {
    if (store::DueMinute(j->due_ms) > loaded_minute_) {
      j->state = JobState::kDelayed;  // beyond the horizon: WriteDone hands it to the store
    } else {
      MakeDelayed(j);
    }
  } else {
    MakeReady(j);
  }
}

Result<JobView> Engine::ReserveJob(Client* c, uint64_t id) {
  auto found = FindOrLoad(id, [](const Job& j) { return j.state != JobState::kReserved; });
  if (!found.ok()) return found.status();
  Grant(c, found.value());
  return View(*found.value());
}

void Engine::Delete(Client* c, uint64_t id, Done done) {
  auto found = FindOrLoad(
      id, [c](const Job& j) { return j.state != JobState::kReserved || j.reserver == c; });
  if (!found.ok()) return done(found.status());
  Job* j = found.value();
  const bool held = j->state == JobState::kReserved;
  // Deleting the job one holds finishes it; deleting any other job cancels
  // it, exactly as DELETE /v1/jobs/{id} does: a job that never ran is never
  // reported done, and its key is free at once.
  held ? Finish(j, std::move(done)) : Cancel(j, std::move(done));
}

void Engine::Cancel(Job* j, Done done) {
  Detach(j);
  ++j->tube->deletes;
  j->state = JobState::kDeleting;
  if (j->extra) j->extra->cancelled = true;
  Write(j, Mutation::Delete(j->id), std::move(done));
}

// Finishing, releasing and burying a held job are acknowledged once written
// (store::Durability::kWritten): lost to a power cut, each could only bring
// the job back to be delivered again, which at-least-once allows.
void Engine::Finish(Job* j, Done done) {
  Detach(j);
  ++j->tube->deletes;
  j->state = JobState::kDeleting;
  if (!j->extra) {
    Write(j, Mutation::Delete(j->id).Written(), std::move(done));
    return;
  }
  JobRecord r = Record(*j);
  r.state = StoredState::kDone;
  r.done_ms = clock_.WallMillis();
  Write(j, Mutation::Update(std::move(r)).Written(), std::move(done));
}

void Engine::Release(Client* c, uint64_t id, uint32_t priority, int64_t delay_ms, Done done) {
  Job* j = ReservedBy(c, id);
  if (j == nullptr) return done(Status::NotFound("job not reserved by this client"));
  Requeue(j, priority, delay_ms, std::move(done));
}

void Engine::Requeue(Job* j, uint32_t priority, int64_t delay_ms, Done done) {
  Detach(j);
  j->priority = priority;
  j->delay_ms = delay_ms;
  ++j->counters.releases;
  if (delay_ms > 0) {
    j->due_ms = DueFromNow(delay_ms);
    MakeDelayed(j);
  } else {
    MakeReady(j);
  }
  Write(j, Mutation::Update(Record(*j)).Written(), std::move(done));
}

void Engine::Bury(Client* c, uint64_t id, uint32_t priority, Done done) {
  Job* j = ReservedBy(c, id);
  if (j == nullptr) return done(Status::NotFound("job not reserved by this client"));
  BuryHeld(j, priority, std::move(done));
}

void Engine::BuryHeld(Job* j, uint32_t priority, Done done) {
  Detach(j);
  j->priority = priority;
  ++j->counters.buries;
  MakeBuried(j);
  Write(j, Mutation::Update(Record(*j)).Written(), std::move(done));
}

Status Engine::Touch(Client* c, uint64_t id) {
  Job* j = ReservedBy(c, id);
  if (j == nullptr) return Status::NotFound("job not reserved by this client");
  c->reserved.erase(j);
  j->deadline_us = clock_.SteadyMicros() + j->ttr_ms * 1000;
  c->reserved.insert(j);
  Schedule(j->timer, TickAtSteady(j->deadline_us));
  return Status::Ok();
}

void Engine::KickJob(uint64_t id, Done done) {
  auto found = FindOrLoad(id, [](const Job& j) {
    return j.state == JobState::kBuried || j.state == JobState::kDelayed;
  });
  if (!found.ok()) return done(found.status());
  KickOne(found.value(), /*fresh_budget=*/false, std::move(done));
}

void Engine::KickOne(Job* j, bool fresh_budget, Done done) {
  Detach(j);
  ++j->counters.kicks;
  if (fresh_budget) {
    j->counters.reserves = 0;
    j->due_ms = clock_.WallMillis();
  }
  MakeReady(j);
  Write(j, Mutation::Update(Record(*j)), std::move(done));
}

void Engine::Kick(Client* c, uint64_t bound, std::function<void(Result<uint64_t>)> done) {
  Tube* t = c->use;
  std::vector<Job*> kicked;
  if (!t->buried.empty()) {
    for (auto it = t->buried.begin(); it != t->buried.end() && kicked.size() < bound; ++it) {
      kicked.push_back(*it);
    }
  } else {
    for (auto it = t->delayed.begin(); it != t->delayed.end() && kicked.size() < bound; ++it) {
      kicked.push_back(*it);
    }
    std::vector<JobRecord> far;
    if (kicked.size() < bound && t->far_delayed > 0) {
      auto r = store_.FarDelayed(t->name, loaded_minute_ - 1, bound - kicked.size() + 64);
      if (!r.ok()) return done(r.status());
      far = std::move(r).value();
    }
    for (const JobRecord& rec : far) {
      if (kicked.size() >= bound) break;
      auto still_far = FindFar(rec.id);  // skips jobs already in memory
      if (!still_far.ok() || !still_far.value()) continue;
      kicked.push_back(MaterializeFar(**still_far));
    }
  }
  if (kicked.empty()) return done(uint64_t{0});
  // KICKED counts the kicks the store took: a failed one is undone (Resync),
  // and only when none took is the failure the answer.
  struct Join {
    size_t left;
    uint64_t kicked = 0;
    Status status;
    std::function<void(Result<uint64_t>)> done;
  };
  auto join = std::make_shared<Join>(Join{kicked.size(), 0, Status::Ok(), std::move(done)});
  for (Job* j : kicked) {
    KickOne(j, /*fresh_budget=*/false, [join](const Status& s) {
      if (s.ok()) {
        ++join->kicked;
      } else {
        join->status = s;
      }
      if (--join->left > 0) return;
      if (join->kicked > 0) return join->done(join->kicked);
      join->done(join->status);
    });
  }
}

void Engine::PauseTube(const std::string& name, int64_t delay_ms, Done done) {
  if (FindTube(name) == nullptr) return done(Status::NotFound("no such tube"));
  // The pause takes effect once durable, so a failed write changes nothing.
  // The pause counts from the command, not from the commit.
  const int64_t start_us = clock_.SteadyMicros();
  store_.Submit(Mutation::PauseTube(name, delay_ms, clock_.WallMillis() + delay_ms),
                [this, name, delay_ms, start_us, done = std::move(done)](const Status& s) {
                  Tube* t = FindTube(name);
                  if (s.ok() && t != nullptr) {
                    t->pause_ms = delay_ms;
                    // beanstalkd pauses for at least a moment even when asked for 0 s.
                    t->unpause_us = start_us + std::max<int64_t>(delay_ms * 1000, 1);
                    ++t->pauses;
                    Schedule(t->timer, TickAtSteady(t->unpause_us));
                  }
                  done(s);
                });
}

// ---------------------------------------------------------------- reads

Result<JobView> Engine::Peek(uint64_t id) {
  if (Job* j = FindLive(id)) return View(*j);
  auto far = FindFar(id);
  if (!far.ok()) return far.status();
  if (!far.value()) return Status::NotFound("no such job");
  return JobView{id, std::make_shared<const std::string>(std::move((*far)->body))};
}

Result<JobView> Engine::PeekReady(Client* c) {
  if (c->use->ready.empty()) return Status::NotFound("no ready job");
  return View(**c->use->ready.begin());
}

Result<JobView> Engine::PeekDelayed(Client* c) {
  Tube* t = c->use;
  if (!t->delayed.empty()) return View(**t->delayed.begin());
  if (t->far_delayed > 0) {
    auto r = store_.FarDelayed(t->name, loaded_minute_ - 1, 64);
    if (!r.ok()) return r.status();
    for (JobRecord& rec : r.value()) {
      auto far = FindFar(rec.id);
      if (far.ok() && far.value()) {
        return JobView{rec.id, std::make_shared<const std::string>(std::move(rec.body))};
      }
    }
  }
  return Status::NotFound("no delayed job");
}

Result<JobView> Engine::PeekBuried(Client* c) {
  if (c->use->buried.empty()) return Status::NotFound("no buried job");
  return View(**c->use->buried.begin());
}

Result<JobStats> Engine::StatsJob(uint64_t id) {
  const int64_t now_us = clock_.SteadyMicros();
  const int64_t wall_us = clock_.WallMicros();
  JobStats s;
  if (Job* j = FindLive(id)) {
    s.id = j->id;
    s.tube = j->tube->name;
    s.state = j->state;
    s.priority = j->priority;
    s.age_s = (wall_us / 1000 - j->created_ms) / 1000;
    s.delay_s = j->delay_ms / 1000;
    s.ttr_s = j->ttr_ms / 1000;
    if (j->state == JobState::kReserved) s.time_left_s = (j->deadline_us - now_us) / 1'000'000;
    if (j->state == JobState::kDelayed) s.time_left_s = (j->due_ms * 1000 - wall_us) / 1'000'000;
    s.counters = j->counters;
    return s;
  }
  auto far = FindFar(id);
  if (!far.ok()) return far.status();
  if (!far.value()) return Status::NotFound("no such job");
  const JobRecord& r = **far;
  s.id = r.id;
  s.tube = r.tube;
  s.state = JobState::kDelayed;
  s.priority = r.priority;
  s.age_s = (wall_us / 1000 - r.created_ms) / 1000;
  s.delay_s = r.delay_ms / 1000;
  s.ttr_s = r.ttr_ms / 1000;
  s.time_left_s = (r.due_ms * 1000 - wall_us) / 1'000'000;
  s.counters = r.counters;
  return s;
}

Result<TubeStats> Engine::StatsTube(const std::string& name) const {
  Tube* t = FindTube(name);
  if (t == nullptr) return Status::NotFound("no such tube");
  TubeStats s;
  s.name = t->name;
  s.urgent = t->urgent;
  s.ready = t->ready.size() + t->push_ready.size();
  s.reserved = t->reserved;
  s.delayed = t->delayed.size() + t->far_delayed;
  s.buried = t->buried.size();
  s.total_jobs = t->total_jobs;
  s.using_count = t->using_count;
  s.watching_count = t->watching_count;
  s.waiting = t->waiters.size();
  s.deletes = t->deletes;
  s.pauses = t->pauses;
  if (Paused(t)) {  // a pause whose end has passed reads as none
    s.pause_s = t->pause_ms / 1000;
    s.pause_left_s = (t->unpause_us - clock_.SteadyMicros()) / 1'000'000;
  }
  return s;
}

EngineStats Engine::Stats() const {
  EngineStats s;
  for (auto& t : tubes_) {
    s.urgent += t->urgent;
    s.ready += t->ready.size() + t->push_ready.size();
    s.reserved += t->reserved;
    s.delayed += t->delayed.size() + t->far_delayed;
    s.buried += t->buried.size();
  }
  s.total_jobs = total_jobs_;
  s.job_timeouts = job_timeouts_;
  s.tubes = tubes_.size();
  s.waiting = waiting_;
  s.draining = draining_;
  return s;
}

}  // namespace delayd::engine
