// The job state machine: the only code that moves a job between states.
// Make* and Detach place a job in (and take it out of) its state's set and
// timer; the transitions below them change a job and write the change.
// Every front door (beanstalk, HTTP, the dispatcher, the clock) goes
// through these.
#include <algorithm>

#include "engine/engine.h"
#include "engine/spec_codec.h"

namespace delayd::engine {

using store::JobRecord;
using store::Mutation;
using store::StoredState;

void Engine::Detach(Job* j) {
  Tube* t = j->tube;
  j->claimed = false;
  switch (j->state) {
    case JobState::kReady:
      (j->push() ? t->push_ready : t->ready).erase(j);
      if (j->priority < kUrgentThreshold) --t->urgent;
      Left(t, SetOf(*j));
      break;
    case JobState::kDelayed:
      // Not in the set: placed beyond the horizon, for WriteDone to hand over.
      if (t->delayed.erase(j) > 0) CountDue(t, store::DueHour(j->due_ms()), -1);
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
      Left(t, store::JobSet::kBuried);
      break;
    case JobState::kPending:
    case JobState::kDone:
    case JobState::kDeleting:
      break;
  }
}

void Engine::MakeReady(Job* j) {
  j->state = JobState::kReady;
  if (j->priority < kUrgentThreshold) ++j->tube->urgent;
  (j->push() ? j->tube->push_ready : j->tube->ready).insert(j);
  Entered(j);
  Emit(j->tube, JobEventKind::kReady, j);
}

void Engine::MakeDelayed(Job* j) {
  j->state = JobState::kDelayed;
  j->tube->delayed.insert(j);
  CountDue(j->tube, store::DueHour(j->due_ms()), 1);
  Schedule(j->timer, TickAtWall(j->due_us));
}

void Engine::CountDue(Tube* t, int64_t hour, int64_t delta) {
  uint64_t& n = t->due_hours[hour];
  // As far_delayed, never below zero.
  n = delta < 0 && n < static_cast<uint64_t>(-delta) ? 0 : n + static_cast<uint64_t>(delta);
  if (n == 0) t->due_hours.erase(hour);
}

void Engine::PlaceDelayed(Job* j) {
  if (j->due_us <= clock_.WallMicros()) return Fired(j);
  if (store::DueMinute(j->due_ms()) > loaded_minute_) {
    j->state = JobState::kDelayed;  // no timer, no place in the tube: WriteDone takes it out
    return;
  }
  MakeDelayed(j);
}

void Engine::Place(Job* j, StoredState state) {
  switch (state) {
    case StoredState::kBuried:
      // Its stored place in kick order, when the store keeps one.
      j->bury_seq != 0 ? Rebury(j) : MakeBuried(j);
      break;
    case StoredState::kDelayed:
      PlaceDelayed(j);
      break;
    case StoredState::kReady:
    case StoredState::kReserved:
    case StoredState::kDone:
      MakeReady(j);
      break;
  }
}

void Engine::MakeBuried(Job* j) {
  j->bury_seq = ++bury_seq_;
  j->state = JobState::kBuried;
  j->tube->buried.insert(j);
  Entered(j);
}

void Engine::Rebury(Job* j) {
  j->state = JobState::kBuried;  // its bury_seq keeps its place in kick order
  bury_seq_ = std::max(bury_seq_, j->bury_seq);
  j->tube->buried.insert(j);
  Entered(j);
}

void Engine::Fired(Job* j) {
  if (metrics_ != nullptr) {
    metrics_->fire_lateness.ObserveMicros(clock_.WallMicros() - j->due_us);
    if (j->tube->counters != nullptr) ++j->tube->counters->fired;
  }
  // Its row still says delayed, where no window scan looks. Beyond a full
  // window it is likely to go cold, so its row is made ready now, as it
  // fires (a burst of thousands is written as it comes, not walked later);
  // otherwise only if it does go cold (Evict).
  const bool beyond = window_ > 0 && SetSize(j->tube, SetOf(*j)) >= window_;
  j->unstored = true;
  MakeReady(j);
  if (beyond && j->state == JobState::kReady) {  // not handed to a waiter meanwhile
    Write(j, Mutation::Update(Record(*j)).Written(), [](const Status&) {});
  }
}

void Engine::Emit(Tube* t, JobEventKind kind, const Job* j) {
  if (kind == JobEventKind::kReady && (j == nullptr || !j->push())) {
    home_->Readied(t, j);
  }
  const JobEvent e{kind, j != nullptr ? j->id : 0, t->name, j != nullptr && j->push()};
  for (const auto& [id, fn] : listeners_) fn(e);
}

size_t Engine::Subscribe(Listener fn) {
  listeners_.emplace_back(next_subscription_, std::move(fn));
  return next_subscription_++;
}

void Engine::Unsubscribe(size_t subscription) {
  std::erase_if(listeners_, [&](const auto& l) { return l.first == subscription; });
}

void Engine::Publish(Job* j, const Status& s) {
  if (s.code() == StatusCode::kUnknown) return Doubt(j);  // it may be in the store
  if (!s.ok()) {
    j->state = JobState::kDeleting;  // never visible; dropped by WriteDone
    return;
  }
  ++total_jobs_;
  ++j->tube->total_jobs;
  if (j->tube->counters != nullptr) ++j->tube->counters->submitted;
  if (j->delay_ms > 0) {
    PlaceDelayed(j);
  } else {
    MakeReady(j);
  }
}

void Engine::Hold(Job* j, Client* holder, int64_t ttr_ms) {
  Detach(j);
  j->state = JobState::kReserved;
  j->reserver = holder;
  ++j->tube->reserved;
  ++j->counters.reserves;
  j->unstored = true;
  j->deadline_us = clock_.SteadyMicros() + ttr_ms * 1000;
  holder->reserved.insert(j);
  Schedule(j->timer, TickAtSteady(j->deadline_us));
  Emit(j->tube, JobEventKind::kReserved, j);
}

// Finishing, releasing and burying a held job are acknowledged once written
// (store::Durability::kWritten), in cluster mode once queued (WriteHeld):
// lost to a power cut or a node's death, each could only bring the job back
// to be delivered again, which at-least-once allows.
void Engine::Finish(Job* j, Done done) {
  Detach(j);
  ++j->tube->deletes;
  j->state = JobState::kDeleting;
  Mutation m = Mutation::Delete(j->id).Written();
  if (j->extra) {
    JobRecord r = Record(*j);
    r.state = StoredState::kDone;
    r.done_ms = clock_.WallMillis();
    m = Mutation::Update(std::move(r)).Written();
  }
  WriteHeld(j, std::move(m), Ended(j), std::move(done));
}

void Engine::Cancel(Job* j, Done done) {
  Detach(j);
  ++j->tube->deletes;
  j->state = JobState::kDeleting;
  if (j->extra) j->extra->cancelled = true;
  Write(j, Mutation::Delete(j->id), EndedThen(j, std::move(done)));
}

// The job ends when the store has it ended (a failed write brings it back),
// and is still pinned in memory while the callback runs.
Engine::Done Engine::Ended(Job* j) {
  return [this, j](const Status& s) {
    if (s.ok()) Emit(j->tube, JobEventKind::kEnded, j);
  };
}

Engine::Done Engine::EndedThen(Job* j, Done done) {
  return [ended = Ended(j), done = std::move(done)](const Status& s) {
    ended(s);
    done(s);
  };
}

void Engine::Requeue(Job* j, uint32_t priority, int64_t delay_ms, Done done) {
  Detach(j);
  j->priority = priority;
  j->delay_ms = delay_ms;
  ++j->counters.releases;
  if (delay_ms > 0) {
    j->due_us = DueFromNow(delay_ms);
    MakeDelayed(j);
  } else {
    MakeReady(j);
  }
  WriteHeld(j, Mutation::Update(Record(*j)).Written(), nullptr, std::move(done));
}

void Engine::BuryHeld(Job* j, uint32_t priority, Done done) {
  Detach(j);
  j->priority = priority;
  ++j->counters.buries;
  MakeBuried(j);
  WriteHeld(j, Mutation::Update(Record(*j)).Written(), nullptr, std::move(done));
}

void Engine::Park(Job* j, uint32_t priority, Done done) {
  Detach(j);
  j->priority = priority;
  ++j->counters.buries;
  MakeBuried(j);
  // Synced: parked so that it does not run, it must not come back to.
  Write(j, Mutation::Update(Record(*j)), std::move(done));
}

void Engine::KickOne(Job* j, bool fresh_budget, Done done) {
  Detach(j);
  ++j->counters.kicks;
  if (fresh_budget) {
    j->counters.reserves = 0;
    j->due_us = clock_.WallMicros();
  }
  MakeReady(j);
  Write(j, Mutation::Update(Record(*j)), std::move(done));
}

void Engine::Extend(Job* j, Done done) {
  Client* c = j->reserver;
  c->reserved.erase(j);
  j->deadline_us = clock_.SteadyMicros() + j->ttr_ms * 1000;
  c->reserved.insert(j);
  Schedule(j->timer, TickAtSteady(j->deadline_us));
  home_->Touched(j, std::move(done));
}

void Engine::Unhold(Job* j, bool timed_out) {
  Detach(j);
  if (timed_out) {
    ++j->counters.timeouts;
    ++job_timeouts_;
  }
  MakeReady(j);
  home_->Requeued(j);
}

void Engine::ExpireReservation(Job* j) {
  Client* c = j->reserver;
  Unhold(j, /*timed_out=*/true);
  if (c->waiting) ScheduleClient(c);
}

void Engine::RunEarly(Job* j, Done done) {
  Detach(j);
  j->due_us = clock_.WallMicros();
  MakeReady(j);
  Write(j, Mutation::Update(Record(*j)), std::move(done));
}

void Engine::Edit(Job* j, const JobPatch& p, Done done) {
  Detach(j);
  const bool was_buried = j->state == JobState::kBuried;
  if (p.priority) j->priority = *p.priority;
  if (p.ttr_ms) j->ttr_ms = *p.ttr_ms;
  if (p.body) j->body = std::make_shared<const std::string>(*p.body);
  if (p.due_ms) {
    j->due_us = *p.due_ms * 1000;
    j->run_at_ms = *p.due_ms;
    j->delay_ms = std::max<int64_t>(0, *p.due_ms - clock_.WallMillis());
  }
  if (p.target || p.retry || p.encoding) {
    JobSpec spec = j->extra && j->extra->spec ? *j->extra->spec : JobSpec{};
    if (p.target) spec.target = *p.target;
    if (p.retry) spec.retry = *p.retry;
    if (p.encoding) spec.encoding = *p.encoding;
    if (!j->extra) j->extra = std::make_unique<JobExtra>();
    j->extra->spec = std::make_shared<const JobSpec>(spec);
    j->extra->spec_text = EncodeSpec(spec);
  }
  if (was_buried) {
    Rebury(j);
  } else if (j->due_us > clock_.WallMicros()) {
    MakeDelayed(j);
  } else {
    MakeReady(j);
  }
  JobRecord r = Record(*j);
  r.body = *j->body;
  Write(j, Mutation::Replace(std::move(r)), std::move(done));
}

}  // namespace delayd::engine
