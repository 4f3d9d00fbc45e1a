// The engine's core: construction, tubes, clients, jobs in memory, and the
// write path that keeps memory true to the store (Write, Resync).
#include "engine/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cassert>

#include "engine/local_home.h"
#include "engine/spec_codec.h"

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
  push_retry_timer_.kind = TimerKind::kPushRetry;
  home_ = std::make_unique<LocalHome>(*this);
  in_doubt_timer_.kind = TimerKind::kInDoubt;
  window_timer_.kind = TimerKind::kWindow;
  window_retry_timer_.kind = TimerKind::kWindow;
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

std::string Engine::KeyOf(const std::string& tube, const std::string& key) {
  return tube + '\0' + key;
}

Tube* Engine::FindTube(const std::string& name) const {
  auto it = tube_index_.find(name);
  return it == tube_index_.end() ? nullptr : it->second;
}

void Engine::SetMetrics(Metrics* metrics) {
  metrics_ = metrics;
  for (const auto& t : tubes_) t->counters = &metrics_->Topic(t->name);  // "default"
}

Tube* Engine::FindOrMakeTube(const std::string& name) {
  if (Tube* t = FindTube(name)) return t;
  auto t = std::make_unique<Tube>();
  t->name = name;
  t->timer.kind = TimerKind::kTube;
  t->timer.owner = t.get();
  if (metrics_ != nullptr) t->counters = &metrics_->Topic(name);
  Tube* raw = t.get();
  tubes_.push_back(std::move(t));
  tube_index_.emplace(name, raw);
  home_->TubeMade(name);  // in cluster mode, paused or given settings by another node
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
  for (Job* j : held) Unhold(j, /*timed_out=*/false);
  // Each tube once: a tube both used and watched must not be looked at
  // again after dropping it.
  std::vector<Tube*> touched = c->watch;
  if (std::find(touched.begin(), touched.end(), c->use) == touched.end()) {
    touched.push_back(c->use);
  }
  --c->use->using_count;
  for (Tube* t : c->watch) --t->watching_count;
  auto it = std::find_if(clients_.begin(), clients_.end(), [c](auto& p) { return p.get() == c; });
  if (c->reads > 0) {  // freed when the last read aside is answered
    c->gone = true;
    departed_.push_back(std::move(*it));
  }
  clients_.erase(it);
  for (Tube* t : touched) MaybeDropTube(t);
}

bool Engine::Unpin(Client* c) {
  if (--c->reads > 0) return !c->gone;
  if (!c->gone) {
    if (c->observer != nullptr) c->observer->OnReadsAnswered();
    return true;
  }
  auto it = std::find_if(departed_.begin(), departed_.end(), [c](auto& p) { return p.get() == c; });
  departed_.erase(it);
  return false;
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

int64_t Engine::DueFromNow(int64_t delay_ms) const { return clock_.WallMicros() + delay_ms * 1000; }

Job* Engine::AddJob(const JobRecord& r, JobState state, std::shared_ptr<const JobSpec> spec) {
  auto j = std::make_unique<Job>();
  j->id = r.id;
  j->tube = FindOrMakeTube(r.tube);
  j->priority = r.priority;
  j->state = state;
  j->due_us = r.due_ms * 1000;
  j->delay_ms = r.delay_ms;
  j->ttr_ms = r.ttr_ms;
  j->created_ms = r.created_ms;
  j->run_at_ms = r.run_at_ms;
  j->bury_seq = r.bury_seq;
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
  r.due_ms = j.due_ms();
  r.delay_ms = j.delay_ms;
  r.ttr_ms = j.ttr_ms;
  r.created_ms = j.created_ms;
  r.run_at_ms = j.run_at_ms;
  r.counters = j.counters;
  r.push = j.push();
  r.bury_seq = j.bury_seq;
  home_->Stamp(j, r);
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
    j->extra->spec = spec ? std::move(spec) : specs_.Decode(r.spec);
  }
  j->extra->attempt_log = r.attempt_log;
  j->extra->last_error = r.last_error;
  j->extra->cancelled = false;
}

void Engine::ApplyDefaults(const Tube* t, JobSpec& spec, int64_t& ttr_ms) const {
  const TopicSettings* s = t != nullptr ? t->settings.get() : nullptr;
  if (s != nullptr) {
    if (!spec.target && s->target) spec.target = s->target;
    if (!spec.retry && s->retry) spec.retry = s->retry;
    if (ttr_ms == 0) ttr_ms = s->ttr_ms;
  }
  if (ttr_ms == 0) ttr_ms = options_.default_ttr_ms;
}

// Pins `j` in memory until the mutation is answered. Memory changed before
// the write (so the client's next command sees it); a write that fails is
// undone by taking the store's record again, before `done` tells the client.
// The home guards the write (in cluster mode, by the row's version) and
// may take a refused one to itself (SharedHome::Refused).
void Engine::Write(Job* j, Mutation m, Done done) {
  home_->Guard(*j, m);
  ++j->pending_writes;
  j->unstored = false;  // the mutation carries the whole job
  if (auto r = resyncing_.find(j->id); r != resyncing_.end()) r->second = true;
  store_.Submit(std::move(m), [this, id = j->id, done = std::move(done)](const Status& s) {
    Job* job = jobs_.at(id).get();
    if (!s.ok() && home_->Refused(job, s, done)) return WriteDone(job);
    if (!s.ok()) job->diverged = true;
    // With later writes still queued, the last of them resyncs: each carries
    // the whole job, so the store ends as memory is unless one fails.
    if (job->diverged && job->pending_writes == 1) {
      return Resync(job, [this, id, s, done] {
        done(s);
        WriteDone(jobs_.at(id).get());
      });
    }
    done(s);
    WriteDone(job);
  });
}

// Where a held job's change is answered is the home's: on one node after
// its commit, in cluster mode once queued (SharedHome::WriteHeld).
void Engine::WriteHeld(Job* j, Mutation m, Done committed, Done reply) {
  home_->WriteHeld(j, std::move(m), std::move(committed), std::move(reply));
}

// The job stays pinned by the failed write while its record is read.
void Engine::Resync(Job* j, std::function<void()> then) {
  j->diverged = false;
  if (j->state == JobState::kPending) return then();  // a failed insert: Publish drops it
  resyncing_.emplace(j->id, false);
  Aside([&store = store_, id = j->id] { return store.Get(id); },
        [this, id = j->id, then = std::move(then)](Result<std::optional<JobRecord>> read,
                                                   uint64_t) mutable {
          Job* job = jobs_.at(id).get();
          auto r = resyncing_.find(id);
          const bool rewritten = r->second;
          resyncing_.erase(r);
          if (!rewritten) {
            TakeStored(job, read);
          } else if (job->diverged) {
            // Written again meanwhile, and that write failed too (it left
            // the resync to this one): the record read may predate it.
            return Resync(job, std::move(then));
          }
          // Written again and answered well: memory is what the store has.
          then();
        });
}

void Engine::TakeStored(Job* j, const Result<std::optional<JobRecord>>& read) {
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
  j->due_us = rec->due_ms * 1000;
  j->delay_ms = rec->delay_ms;
  j->ttr_ms = rec->ttr_ms;
  j->run_at_ms = rec->run_at_ms;
  // Reserves and timeouts are counted in memory and stored with the next
  // write: memory has the truth of those two, and the row lacks them if
  // they differ (so the job is written before it goes cold).
  store::JobCounters counters = rec->counters;
  counters.reserves = j->counters.reserves;
  counters.timeouts = j->counters.timeouts;
  j->unstored =
      counters.reserves != rec->counters.reserves || counters.timeouts != rec->counters.timeouts;
  j->counters = counters;
  if (*j->body != rec->body) j->body = std::make_shared<const std::string>(rec->body);
  SetExtra(j, *rec);
  if (keep_reservation) return;
  j->bury_seq = rec->bury_seq;  // 0 from a store that keeps none: buried anew
  Place(j, rec->state);
}

void Engine::WriteDone(Job* j) {
  if (--j->pending_writes > 0) return;
  Tube* t = j->tube;
  // In cluster mode the database has the job now, unless one of this
  // node's clients holds it.
  if (!home_->Keeps(*j)) {
    Detach(j);
    j->state = JobState::kDeleting;
  }
  if (j->state == JobState::kDeleting) {
    --t->jobs;
    Forget(j);
    MaybeDropTube(t);
  } else if (j->state == JobState::kDelayed && store::DueMinute(j->due_ms()) > loaded_minute_) {
    // Due beyond the loaded horizon: the store keeps it; the loader brings it
    // back when its minute comes.
    Detach(j);
    --t->jobs;
    ++t->far_delayed;
    CountDue(t, store::DueHour(j->due_ms()), 1);
    Forget(j);
  } else if (j->state == JobState::kReady || j->state == JobState::kBuried) {
    Entered(j);  // beyond the window, it may leave memory now
  }
}

void Engine::Forget(Job* j) {
  const uint64_t id = j->id;
  left_.Changed(id);
  jobs_.erase(id);
  home_->Forgotten(id);
}

}  // namespace delayd::engine
