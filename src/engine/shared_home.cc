// SharedHome (shared_home.h): the queue in the database. Reserving is a
// claim, tubes' pauses are read again when a notice says they changed, and
// counts and peeks come from the database. The transitions stay the
// engine's; Guard makes each write require the row version it was read at.
#include "engine/shared_home.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <map>

#include "engine/engine.h"
#include "engine/spec_codec.h"

namespace delayd::engine {

using store::JobRecord;
using store::Mutation;
using store::StoredState;

namespace {
// Jobs one beanstalk kick brings into memory at most: each is brought for
// its write (KICKED says how many; kick again for more).
constexpr uint64_t kMaxClusterKick = 100'000;

// A row's job, or kNotFound saying `none`.
Result<JobView> RowView(Result<std::optional<JobRecord>>& r, const char* none) {
  if (!r.ok()) return r.status();
  if (!r.value()) return Status::NotFound(none);
  return JobView{r.value()->id, std::make_shared<const std::string>(std::move(r.value()->body))};
}

Result<std::optional<JobRecord>> FirstRow(Result<std::vector<JobRecord>> rows) {
  if (!rows.ok()) return rows.status();
  if (rows->empty()) return std::optional<JobRecord>();
  return std::optional<JobRecord>(std::move(rows->front()));
}

void AddCounts(const store::TubeCount& n, uint64_t& ready, uint64_t& urgent, uint64_t& delayed,
               uint64_t& reserved, uint64_t& buried) {
  ready += n.ready;
  urgent += n.urgent;
  delayed += n.delayed;
  reserved += n.reserved;
  buried += n.buried;
}
}  // namespace

SharedHome::SharedHome(Engine& e, store::SharedQueue& queue, Claims& claims, IdSource& ids)
    : e_(e),
      queue_(queue),
      claims_(claims),
      ids_(ids),
      remote_holder_(std::make_unique<Client>()) {}

void Engine::JoinCluster(store::SharedQueue& queue, Claims& claimer, IdSource& ids) {
  home_ = std::make_unique<SharedHome>(*this, queue, claimer, ids);
}

Status SharedHome::Recover() {
  auto tubes = queue_.Tubes(std::nullopt);
  if (!tubes.ok()) return tubes.status();
  for (const store::TubeRow& row : *tubes) TakeTube(row);
  spdlog::info("cluster mode: node {}, {} tubes with a pause or settings", queue_.node_id(),
               tubes->size());
  return Status::Ok();
}

void SharedHome::Hear(const std::vector<store::Notice>& notices) {
  for (const store::Notice& n : notices) {
    if (n.kind == store::Notice::Kind::kTube) ReadTubes(n.tube);
    if (n.kind == store::Notice::Kind::kPush && owned_.Owns(n.shard)) WantPush(n.tube);
    // Notices may have been missed: every tube is read again, and the
    // topics with push jobs ready in the owned shards.
    if (n.kind == store::Notice::Kind::kListening) {
      ReadTubes(std::nullopt);
      if (!owned_.empty()) ReadPushTubes(owned_.shards());
    }
  }
}

void SharedHome::ReadTubes(std::optional<std::string> name) {
  e_.Aside([q = &queue_, name] { return q->Tubes(name); },
           [this, name](Result<std::vector<store::TubeRow>> rows, uint64_t) {
             if (!rows.ok()) {
               spdlog::warn("cluster: reading tube {} again: {}", name.value_or("(all)"),
                            rows.status().ToString());
               return;
             }
             // A resume deletes nothing: a tube without a row has no pause.
             if (name && rows->empty()) rows->push_back({*name, 0, 0, ""});
             for (const store::TubeRow& row : *rows) TakeTube(row);
           });
}

void SharedHome::TakeTube(const store::TubeRow& row) {
  const bool has_settings = !row.settings.empty();
  Tube* t = has_settings ? e_.FindOrMakeTube(row.tube) : e_.FindTube(row.tube);
  if (t == nullptr) return;  // nobody here uses it: read when it is made
  const bool had_settings = t->settings != nullptr;
  t->settings = has_settings ? DecodeSettings(row.settings) : nullptr;
  const Clock& clock = e_.clock_;
  const int64_t now_ms = clock.WallMillis();
  const bool was_paused = e_.Paused(t);
  if (row.unpause_ms > now_ms) {
    t->pause_ms = row.pause_ms;
    t->unpause_us = clock.SteadyMicros() + (row.unpause_ms - now_ms) * 1000;
    e_.Schedule(t->timer, e_.TickAtSteady(t->unpause_us));
    if (!was_paused) Rewait(t);
  } else if (was_paused) {
    t->pause_ms = 0;
    t->unpause_us = 0;
    e_.wheel_.Cancel(&t->timer.node);
    Rewait(t);
  }
  // A tube kept for its settings alone goes with them. Not otherwise: the
  // tube may have just been made for a client that is about to use it (a
  // store that reads at once answers this read inside FindOrMakeTube).
  if (had_settings && !has_settings) e_.MaybeDropTube(t);
}

// --- waiters ---

std::vector<std::string> SharedHome::ClaimTubes(const Client* c) const {
  std::vector<std::string> out;
  for (const Tube* t : c->watch) {
    if (!e_.Paused(t)) out.push_back(t->name);
  }
  return out;
}

void SharedHome::Claim(Client* c) {
  if (c->claim != 0) claims_.Cancel(c->claim);
  c->claim = 0;
  std::vector<std::string> tubes = ClaimTubes(c);
  if (tubes.empty()) return;  // every tube paused: claims start when one resumes
  // A job claimed ahead is granted before Wait returns, which then returns 0.
  c->claim = claims_.Wait(std::move(tubes), [this, c](JobRecord r) {
    c->claim = 0;
    Adopt(c, std::move(r));
  });
}

void SharedHome::Rewait(Tube* t) {
  // Called as a pause begins or ends; a claim made before an end may have
  // found the tube paused, and so empty.
  claims_.Resumed(t->name);
  for (Client* c : std::vector<Client*>(t->waiters)) Claim(c);
}

// A ready job is a row, claimed; a tube that resumed starts its waiters'
// claims again.
void SharedHome::Readied(Tube* t, const Job* j) {
  if (j == nullptr) Rewait(t);
}

void SharedHome::StoppedWaiting(Client* c) {
  if (c->claim == 0) return;
  claims_.Cancel(c->claim);
  c->claim = 0;
}

// beanstalkd answers DEADLINE_SOON at once only when nothing is ready, and
// reserve-with-timeout 0 only after looking: both are one claim, answered
// on its outcome. Any other reserve waits, served by the claimer.
void SharedHome::Reserve(Client* c, int64_t timeout_ms) {
  const bool soon = e_.DeadlineSoon(c);
  c->waiting = true;
  ++e_.waiting_;
  for (Tube* t : c->watch) t->waiters.push_back(c);
  if (!soon && timeout_ms != 0) {
    c->wait_until_us = timeout_ms < 0 ? -1 : e_.clock_.SteadyMicros() + timeout_ms * 1000;
    e_.ScheduleClient(c);
    Claim(c);
    return;
  }
  c->wait_until_us = -1;
  auto none = [this, c, soon] {
    e_.StopWaiting(c);
    soon ? c->observer->OnDeadlineSoon() : c->observer->OnReserveTimedOut();
  };
  std::vector<std::string> tubes = ClaimTubes(c);
  if (tubes.empty()) return none();
  if (auto spare = claims_.TakeSpare(tubes)) return Adopt(c, std::move(*spare));
  e_.Pin(c);
  queue_.Claim({std::move(tubes), 1, e_.clock_.WallMillis()},
               [this, c, none](Result<std::vector<JobRecord>> r) {
                 const bool here = e_.Unpin(c);
                 if (r.ok() && !r->empty()) {
                   if (!here) return claims_.Return(std::move(r->front()));
                   return Adopt(c, std::move(r->front()));
                 }
                 if (!r.ok()) spdlog::warn("cluster: a claim failed: {}", r.status().ToString());
                 if (here && c->waiting) none();
               });
}

void SharedHome::Adopt(Client* c, JobRecord r) {
  if (!c->waiting) return claims_.Return(std::move(r));  // it stopped waiting meanwhile
  if (e_.jobs_.count(r.id)) {
    // This node's write that made it ready is claimed before its answer
    // came back: held once that answer has taken it out of memory.
    e_.Pin(c);
    adopt_after_.emplace(r.id, std::make_pair(c, std::move(r)));
    return;
  }
  if (r.counters.reserves > 0) --r.counters.reserves;  // Hold counts it
  Job* j = e_.AddJob(r, JobState::kPending);
  j->version = r.version;
  e_.Grant(c, j);
}

void SharedHome::Forgotten(uint64_t id) {
  auto waiting = adopt_after_.find(id);
  if (waiting == adopt_after_.end()) return;
  auto [c, r] = std::move(waiting->second);
  adopt_after_.erase(waiting);
  if (!e_.Unpin(c)) return claims_.Return(std::move(r));
  Adopt(c, std::move(r));
}

Job* SharedHome::AdoptRow(const JobRecord& r) {
  Job* j = e_.AddJob(r, JobState::kPending);
  j->version = r.version;
  Tube* t = j->tube;
  switch (r.state) {
    case StoredState::kReady:
      j->state = JobState::kReady;
      if (j->priority < kUrgentThreshold) ++t->urgent;
      (j->push() ? t->push_ready : t->ready).insert(j);
      break;
    case StoredState::kDelayed:  // the shard's owner promotes it, not this node
      j->state = JobState::kDelayed;
      t->delayed.insert(j);
      e_.CountDue(t, store::DueHour(r.due_ms), 1);
      break;
    case StoredState::kBuried:
      e_.MakeBuried(j);
      break;
    case StoredState::kReserved:
      j->state = JobState::kReserved;
      j->reserver = remote_holder_.get();
      j->deadline_us = e_.clock_.SteadyMicros() + (r.deadline_ms - e_.clock_.WallMillis()) * 1000;
      ++t->reserved;
      remote_holder_->reserved.insert(j);
      break;
    case StoredState::kDone:
      j->state = JobState::kDeleting;
      break;
  }
  return j;
}

void SharedHome::Unadopt(Job* j) {
  e_.Detach(j);
  j->state = JobState::kDeleting;
  ++j->pending_writes;
  e_.WriteDone(j);
}

// --- writes ---

// A write of a job read from the database requires the version it was read
// at, plus one for each write queued since (one node's writes commit in
// order).
void SharedHome::Guard(Job& j, Mutation& m) {
  if (std::holds_alternative<store::change::InsertJob>(m.change)) return;
  m = std::move(m).IfVersion(j.version++);
}

// A write that fails leaves the job to the database: it leaves memory (a
// held job's reservation is lost), and a version that moved on (another
// node changed the job) answers kNotFound.
bool SharedHome::Refused(Job* j, const Status& s, const Done& done) {
  if (j->state != JobState::kPending) {
    e_.Detach(j);
    j->state = JobState::kDeleting;
  }
  done(s.code() == StatusCode::kConflict
           ? Status::NotFound("the job was changed meanwhile (its reservation ran out, or "
                              "another node acted on it)")
           : s);
  return true;
}

// The change is answered once queued. Every node's writer commits what is
// queued as soon as its batch in flight is done, or, when only such changes
// are queued, within the store's linger (2 ms: the server's kHeldLingerUs)
// so that they share a commit; a change answered is committed within about
// that and two commits (a few ms); a node that dies meanwhile
// leaves the job reserved by it, and the owners' sweep returns it after its
// ttr (README, "Guarantees"). The job stays pinned in memory until the
// commit, so this node's reads never see it as it was; a write refused
// meanwhile (the reservation ran out and another node took the job) is
// logged: the job is delivered again.
void SharedHome::WriteHeld(Job* j, Mutation m, Done committed, Done reply) {
  e_.Write(j, std::move(m).Lingering(),
           [this, id = j->id, committed = std::move(committed)](const Status& s) {
             if (!s.ok()) {
               ++held_write_failures_;
               spdlog::warn(
                   "job {}: a change answered before its commit failed; it will be delivered "
                   "again: {}",
                   id, s.ToString());
             }
             if (committed) committed(s);
           });
  reply(Status::Ok());
}

// The database has the job once written, unless one of this node's clients
// holds it.
bool SharedHome::Keeps(const Job& j) const { return j.state == JobState::kReserved; }

void SharedHome::Requeued(Job* j) {
  e_.Write(j, Mutation::Update(e_.Record(*j)).Written(), [id = j->id](const Status& s) {
    // Its deadline passes, and the owner's sweep returns it.
    if (!s.ok()) spdlog::warn("cluster: job {} could not be returned: {}", id, s.ToString());
  });
}

// A held job's record is a reservation of this node's (on one node a
// reservation is not stored, and its record reads ready).
void SharedHome::Stamp(const Job& j, JobRecord& r) const {
  if (j.state != JobState::kReserved) return;
  r.state = StoredState::kReserved;
  r.reserved_by = queue_.node_id();
  r.deadline_ms = e_.clock_.WallMillis() + (j.deadline_us - e_.clock_.SteadyMicros()) / 1000;
}

// The reservation is a row, held once written.
void SharedHome::ReservedById(Job* j, Reply<JobView> done) {
  e_.Write(j, Mutation::Update(e_.Record(*j)).Written(),
           [this, id = j->id, done = std::move(done)](const Status& s) {
             if (!s.ok()) return done(s);
             done(e_.View(*e_.jobs_.at(id)));
           });
}

// Lost to a power cut, the old deadline may return the job early: a
// delivery again, as at-least-once allows.
void SharedHome::Touched(Job* j, Done done) {
  WriteHeld(j, Mutation::Update(e_.Record(*j)).Written(), nullptr, std::move(done));
}

void SharedHome::Unused(Job* j) {
  if (j->pending_writes == 0) Unadopt(j);
}

// --- jobs memory does not hold ---

// Memory holds no row but those of jobs this node's clients hold.
bool SharedHome::IsFar(const JobRecord& r) const { return r.state != StoredState::kDone; }

Result<Job*> SharedHome::Bring(const JobRecord& r, const std::function<bool(const Job&)>& allowed) {
  Job* j = AdoptRow(r);
  if (!allowed(*j)) {
    const JobState state = j->state;
    Unadopt(j);
    return Status::Conflict("job is " + std::string(StateName(state)));
  }
  return j;
}

void SharedHome::FindBuried(uint64_t id, Reply<Job*> done) {
  e_.FindOrLoad(
      id, [](const Job& j) { return j.state == JobState::kBuried; }, std::move(done));
}

// The tube's buried rows if it has any, else its delayed ones, soonest
// first; each kick guarded by the version read.
void SharedHome::Kick(Client* c, uint64_t bound, Reply<uint64_t> done) {
  bound = std::min(bound, kMaxClusterKick);
  e_.Aside(
      [&store = e_.store_, tube = c->use->name, bound]() -> Result<std::vector<JobRecord>> {
        store::ListQuery q;
        q.tube = tube;
        q.state = StoredState::kBuried;
        q.limit = bound;
        auto buried = store.List(q);
        if (!buried.ok() || !buried->empty()) return buried;
        return store.FarDelayed(tube, std::numeric_limits<int64_t>::min(), bound);
      },
      [this, done = std::move(done)](Result<std::vector<JobRecord>> rows, uint64_t) mutable {
        if (!rows.ok()) return done(rows.status());
        std::vector<Job*> kicked;
        for (const JobRecord& r : *rows) {
          if (!e_.jobs_.count(r.id)) kicked.push_back(AdoptRow(r));  // else being changed here
        }
        e_.KickAll(std::move(kicked), std::move(done));
      });
}

// --- reads ---

void SharedHome::PeekReady(Client* c, Reply<JobView> done) {
  e_.Aside([q = &queue_, tube = c->use->name] { return q->BestReady(tube); },
           [done = std::move(done)](Result<std::optional<JobRecord>> r, uint64_t) {
             done(RowView(r, "no ready job"));
           });
}

void SharedHome::PeekBuried(Client* c, Reply<JobView> done) {
  store::ListQuery q;
  q.tube = c->use->name;
  q.state = StoredState::kBuried;
  q.limit = 1;
  e_.Aside([&store = e_.store_, q] { return FirstRow(store.List(q)); },
           [done = std::move(done)](Result<std::optional<JobRecord>> r, uint64_t) {
             done(RowView(r, "no buried job"));
           });
}

void SharedHome::PeekDelayed(const std::string& tube, Reply<JobView> done) {
  e_.Aside(
      [&store = e_.store_, tube] {
        return FirstRow(store.FarDelayed(tube, std::numeric_limits<int64_t>::min(), 1));
      },
      [done = std::move(done)](Result<std::optional<JobRecord>> r, uint64_t) {
        done(RowView(r, "no delayed job"));
      });
}

void SharedHome::Count(std::optional<std::string> tube, Reply<std::vector<store::TubeCount>> done) {
  e_.Aside([q = &queue_, tube] { return q->CountJobs(tube); },
           [done = std::move(done)](Result<std::vector<store::TubeCount>> r, uint64_t) {
             done(std::move(r));
           });
}

// Job counts are the cluster's; the rest of a tube's stats this node's.
void SharedHome::StatsTube(const std::string& name, Reply<TubeStats> done) {
  Count(name, [this, name, done = std::move(done)](Result<std::vector<store::TubeCount>> counts) {
    if (!counts.ok()) return done(counts.status());
    Result<TubeStats> local = e_.StatsTube(name);
    if (!local.ok() && counts->empty()) return done(local.status());
    TubeStats s = local.ok() ? *local : TubeStats{};
    s.name = name;
    s.ready = s.urgent = s.delayed = s.reserved = s.buried = 0;
    for (const store::TubeCount& n : *counts) {
      AddCounts(n, s.ready, s.urgent, s.delayed, s.reserved, s.buried);
    }
    done(s);
  });
}

void SharedHome::Stats(Reply<EngineStats> done) {
  Count(std::nullopt, [this, done = std::move(done)](Result<std::vector<store::TubeCount>> counts) {
    if (!counts.ok()) return done(counts.status());
    EngineStats s = e_.Stats();
    s.ready = s.urgent = s.delayed = s.reserved = s.buried = 0;
    for (const store::TubeCount& n : *counts) {
      AddCounts(n, s.ready, s.urgent, s.delayed, s.reserved, s.buried);
      if (e_.FindTube(n.tube) == nullptr) ++s.tubes;
    }
    done(s);
  });
}

void SharedHome::TubeNames(Reply<std::vector<std::string>> done) {
  Count(std::nullopt, [this, done = std::move(done)](Result<std::vector<store::TubeCount>> counts) {
    if (!counts.ok()) return done(counts.status());
    std::vector<std::string> names = e_.TubeNames();
    for (const store::TubeCount& n : *counts) {
      if (e_.FindTube(n.tube) == nullptr) names.push_back(n.tube);
    }
    done(std::move(names));
  });
}

// The cluster's topics (all, or `tube`): counts, pauses and settings.
void SharedHome::Topics(std::optional<std::string> tube, Reply<std::vector<TopicInfo>> done) {
  using Rows =
      std::pair<Result<std::vector<store::TubeCount>>, Result<std::vector<store::TubeRow>>>;
  e_.Aside(
      [q = &queue_, tube] {
        return Rows{q->CountJobs(tube), q->Tubes(tube)};
      },
      [this, done = std::move(done)](Rows rows, uint64_t) {
        auto& [counts, tubes] = rows;
        if (!counts.ok()) return done(counts.status());
        if (!tubes.ok()) return done(tubes.status());
        const int64_t now_ms = e_.clock_.WallMillis();
        std::map<std::string, TopicInfo> out;
        for (const store::TubeCount& c : *counts) {
          TopicInfo& t = out[c.tube];
          t.name = c.tube;
          t.ready = c.ready;
          t.delayed = c.delayed;
          t.reserved = c.reserved;
          t.buried = c.buried;
          t.oldest_ready_due_ms = c.oldest_ready_due_ms;
        }
        for (const store::TubeRow& r : *tubes) {
          const bool paused = r.unpause_ms > now_ms;
          if (!paused && r.settings.empty() && out.count(r.tube) == 0) continue;  // nothing
          TopicInfo& t = out[r.tube];
          t.name = r.tube;
          t.paused = paused;
          t.pause_left_ms = paused ? r.unpause_ms - now_ms : 0;
          if (!r.settings.empty()) t.settings = DecodeSettings(r.settings);
        }
        std::vector<TopicInfo> list;
        for (auto& [name, t] : out) {
          if (const Tube* here = e_.FindTube(name)) t.total_jobs = here->total_jobs;  // this node's
          list.push_back(std::move(t));
        }
        done(std::move(list));
      });
}

}  // namespace delayd::engine
