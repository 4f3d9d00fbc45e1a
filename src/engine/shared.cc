// Cluster mode: the queue in the database (doc/cluster.md, "The engine in
// cluster mode"). Reserving is a claim, tubes' pauses are read again when
// a notice says they changed, and counts come from the database. The
// transitions stay those of transitions.cc; Write guards them by version.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "engine/engine.h"
#include "engine/spec_json.h"

namespace delayd::engine {

using store::JobRecord;
using store::StoredState;

void Engine::JoinCluster(store::SharedQueue& queue, Claims& claimer, IdSource& ids) {
  shared_ = &queue;
  claimer_ = &claimer;
  ids_ = &ids;
  holders_.push_back(std::make_unique<Client>());
  remote_holder_ = holders_.back().get();
}

Status Engine::RecoverShared() {
  auto tubes = shared_->Tubes(std::nullopt);
  if (!tubes.ok()) return tubes.status();
  for (const store::TubeRow& row : *tubes) TakeTube(row);
  spdlog::info("cluster mode: node {}, {} tubes with a pause or settings", shared_->node_id(),
               tubes->size());
  return Status::Ok();
}

void Engine::Hear(const std::vector<store::Notice>& notices) {
  if (shared_ == nullptr) return;
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

void Engine::ReadTubes(std::optional<std::string> name) {
  Aside([q = shared_, name] { return q->Tubes(name); },
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

void Engine::TakeTube(const store::TubeRow& row) {
  const bool has_settings = !row.settings.empty();
  Tube* t = has_settings ? FindOrMakeTube(row.tube) : FindTube(row.tube);
  if (t == nullptr) return;  // nobody here uses it: read when it is made
  t->settings = has_settings ? DecodeSettings(row.settings) : nullptr;
  const int64_t now_ms = clock_.WallMillis();
  const bool was_paused = Paused(t);
  if (row.unpause_ms > now_ms) {
    t->pause_ms = row.pause_ms;
    t->unpause_us = clock_.SteadyMicros() + (row.unpause_ms - now_ms) * 1000;
    Schedule(t->timer, TickAtSteady(t->unpause_us));
    if (!was_paused) Rewait(t);
  } else if (was_paused) {
    t->pause_ms = 0;
    t->unpause_us = 0;
    wheel_.Cancel(&t->timer.node);
    Rewait(t);
  }
  MaybeDropTube(t);
}

std::vector<std::string> Engine::ClaimTubes(const Client* c) const {
  std::vector<std::string> out;
  for (const Tube* t : c->watch) {
    if (!Paused(t)) out.push_back(t->name);
  }
  return out;
}

void Engine::Claim(Client* c) {
  if (c->claim != 0) claimer_->Cancel(c->claim);
  c->claim = 0;
  std::vector<std::string> tubes = ClaimTubes(c);
  if (tubes.empty()) return;  // every tube paused: claims start when one resumes
  // A job claimed ahead is granted before Wait returns, which then returns 0.
  c->claim = claimer_->Wait(std::move(tubes), [this, c](JobRecord r) {
    c->claim = 0;
    Adopt(c, std::move(r));
  });
}

void Engine::Rewait(Tube* t) {
  if (shared_ == nullptr) return;
  for (Client* c : std::vector<Client*>(t->waiters)) Claim(c);
}

// beanstalkd answers DEADLINE_SOON at once only when nothing is ready, and
// reserve-with-timeout 0 only after looking: both are one claim, answered
// on its outcome. Any other reserve waits, served by the claimer.
void Engine::ReserveShared(Client* c, int64_t timeout_ms) {
  const bool soon = DeadlineSoon(c);
  c->waiting = true;
  ++waiting_;
  for (Tube* t : c->watch) t->waiters.push_back(c);
  if (!soon && timeout_ms != 0) {
    c->wait_until_us = timeout_ms < 0 ? -1 : clock_.SteadyMicros() + timeout_ms * 1000;
    ScheduleClient(c);
    Claim(c);
    return;
  }
  c->wait_until_us = -1;
  auto none = [this, c, soon] {
    StopWaiting(c);
    soon ? c->observer->OnDeadlineSoon() : c->observer->OnReserveTimedOut();
  };
  std::vector<std::string> tubes = ClaimTubes(c);
  if (tubes.empty()) return none();
  if (auto spare = claimer_->TakeSpare(tubes)) return Adopt(c, std::move(*spare));
  Pin(c);
  shared_->Claim({std::move(tubes), 1, clock_.WallMillis()},
                 [this, c, none](Result<std::vector<JobRecord>> r) {
                   const bool here = Unpin(c);
                   if (r.ok() && !r->empty()) {
                     if (!here) return claimer_->Return(std::move(r->front()));
                     return Adopt(c, std::move(r->front()));
                   }
                   if (!r.ok()) spdlog::warn("cluster: a claim failed: {}", r.status().ToString());
                   if (here && c->waiting) none();
                 });
}

void Engine::Adopt(Client* c, JobRecord r) {
  if (!c->waiting) return claimer_->Return(std::move(r));  // it stopped waiting meanwhile
  if (jobs_.count(r.id)) {
    // This node's write that made it ready is claimed before its answer
    // came back: held once that answer has taken it out of memory.
    Pin(c);
    adopt_after_.emplace(r.id, std::make_pair(c, std::move(r)));
    return;
  }
  if (r.counters.reserves > 0) --r.counters.reserves;  // Hold counts it
  Job* j = AddJob(r, JobState::kPending);
  j->version = r.version;
  Grant(c, j);
}

Job* Engine::AdoptRow(const JobRecord& r) {
  Job* j = AddJob(r, JobState::kPending);
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
      CountDue(t, store::DueHour(r.due_ms), 1);
      break;
    case StoredState::kBuried:
      MakeBuried(j);
      break;
    case StoredState::kReserved:
      j->state = JobState::kReserved;
      j->reserver = remote_holder_;
      j->deadline_us = clock_.SteadyMicros() + (r.deadline_ms - clock_.WallMillis()) * 1000;
      ++t->reserved;
      remote_holder_->reserved.insert(j);
      break;
    case StoredState::kDone:
      j->state = JobState::kDeleting;
      break;
  }
  return j;
}

void Engine::Unadopt(Job* j) {
  Detach(j);
  j->state = JobState::kDeleting;
  ++j->pending_writes;
  WriteDone(j);
}

void Engine::WriteRequeued(Job* j) {
  Write(j, store::Mutation::Update(Record(*j)).Written(), [id = j->id](const Status& s) {
    // Its deadline passes, and the owner's sweep returns it.
    if (!s.ok()) spdlog::warn("cluster: job {} could not be returned: {}", id, s.ToString());
  });
}

void Engine::TopicsShared(std::optional<std::string> tube, Reply<std::vector<TopicInfo>> done) {
  using Rows =
      std::pair<Result<std::vector<store::TubeCount>>, Result<std::vector<store::TubeRow>>>;
  Aside(
      [q = shared_, tube] {
        return Rows{q->CountJobs(tube), q->Tubes(tube)};
      },
      [this, done = std::move(done)](Rows rows, uint64_t) {
        auto& [counts, tubes] = rows;
        if (!counts.ok()) return done(counts.status());
        if (!tubes.ok()) return done(tubes.status());
        const int64_t now_ms = clock_.WallMillis();
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
          if (const Tube* here = FindTube(name)) t.total_jobs = here->total_jobs;  // this node's
          list.push_back(std::move(t));
        }
        done(std::move(list));
      });
}

void Engine::CountShared(std::optional<std::string> tube,
                         Reply<std::vector<store::TubeCount>> done) {
  Aside([q = shared_, tube] { return q->CountJobs(tube); },
        [done = std::move(done)](Result<std::vector<store::TubeCount>> r, uint64_t) {
          done(std::move(r));
        });
}

}  // namespace delayd::engine
