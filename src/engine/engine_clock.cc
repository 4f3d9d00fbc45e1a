// The engine's time-driven half: tick arithmetic, the wake-up contract with
// the event loop, the horizon loader, recovery, and blocked reserves.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "engine/engine.h"
#include "engine/spec_json.h"

namespace delayd::engine {

using store::JobRecord;
using store::StoredState;

// ---------------------------------------------------------------- ticks

// One tick is one millisecond of steady time. origin_us_ is chosen so tick
// boundaries fall on wall-clock millisecond boundaries, hence a job due at
// wall ms D fires at the start of a tick rather than up to 1 ms after it.
uint64_t Engine::NowTick() const {
  return static_cast<uint64_t>((clock_.SteadyMicros() - origin_us_) / 1000);
}

uint64_t Engine::TickAtSteady(int64_t steady_us) const {
  const int64_t rel = steady_us - origin_us_;
  return rel <= 0 ? 0 : static_cast<uint64_t>((rel + 999) / 1000);
}

// Wall time maps to steady time through two clock reads, which differ by a
// few microseconds (measured: 2-3 us past the boundary for every job). With
// plain rounding up, that pushed every job due exactly on a millisecond one
// whole tick late. An instant within kWallSkewUs after a tick boundary counts
// as the boundary; the event loop's own wake-up is later than that anyway
// (measured 14-120 us), so a job still does not fire before its due time.
constexpr int64_t kWallSkewUs = 50;

uint64_t Engine::TickAtWall(int64_t wall_ms) const {
  return TickAtSteady(clock_.SteadyMicros() + (wall_ms * 1000 - clock_.WallMicros()) - kWallSkewUs);
}

void Engine::Schedule(EngineTimer& t, uint64_t tick) {
  wheel_.Cancel(&t.node);
  wheel_.Schedule(&t.node, tick);
  tick = std::max(tick, wheel_.now());
  if (tick < armed_tick_) {
    armed_tick_ = tick;
    wake_(origin_us_ + static_cast<int64_t>(tick) * 1000);
  }
}

void Engine::Tick() {
  // Timers scheduled while firing may not lower armed_tick_ below the
  // re-arm below, so suppress wake-ups until the wheel has caught up.
  armed_tick_ = 0;
  wheel_.Advance(NowTick(),
                 [this](wheel::TimerNode* n) { Fire(reinterpret_cast<EngineTimer*>(n)); });
  armed_tick_ = ~uint64_t{0};
  if (auto next = wheel_.NextEvent()) {
    armed_tick_ = *next;
    wake_(origin_us_ + static_cast<int64_t>(*next) * 1000);
  }
}

void Engine::Fire(EngineTimer* t) {
  switch (t->kind) {
    case TimerKind::kJob: {
      Job* j = static_cast<Job*>(t->owner);
      if (j->state == JobState::kDelayed) {
        Detach(j);
        MakeReady(j);
      } else if (j->state == JobState::kReserved) {
        ExpireReservation(j);
      }
      break;
    }
    case TimerKind::kClient:
      CheckClient(static_cast<Client*>(t->owner));
      break;
    case TimerKind::kTube: {
      Tube* tube = static_cast<Tube*>(t->owner);
      tube->pause_ms = 0;
      tube->unpause_us = 0;
      Serve(tube);
      NotifyPush(tube);
      break;
    }
    case TimerKind::kLoader:
      LoadStep();
      break;
  }
}

// ---------------------------------------------------------------- loader

void Engine::ScheduleLoader() {
  if (!load_done_) {
    Schedule(loader_timer_, NowTick());  // next chunk on the next turn of the loop
    return;
  }
  const int64_t next_start_ms = (loaded_minute_ + 1) * store::kMillisPerMinute;
  Schedule(loader_timer_, TickAtWall(next_start_ms - options_.horizon_ms));
}

void Engine::LoadStep() {
  if (load_done_) {
    ++loaded_minute_;
    load_cursor_ = 0;
    load_done_ = false;
  }
  auto rows = store_.LoadMinute(loaded_minute_, load_cursor_, options_.load_chunk);
  if (!rows.ok()) {
    spdlog::error("loader: reading minute {}: {}; retrying in 1 s", loaded_minute_,
                  rows.status().ToString());
    Schedule(loader_timer_, NowTick() + 1000);
    return;
  }
  const int64_t now_ms = clock_.WallMillis();
  for (const JobRecord& r : rows.value()) {
    load_cursor_ = r.id;
    // In memory already: pinned by a write, or taken out of the store's
    // hands by a kick, reserve-job or delete.
    if (jobs_.count(r.id)) continue;
    Job* j = MaterializeFar(r);
    if (j->due_ms <= now_ms) {
      MakeReady(j);
    } else {
      MakeDelayed(j);
    }
  }
  if (rows->size() < options_.load_chunk) load_done_ = true;
  ScheduleLoader();
}

// ---------------------------------------------------------------- recovery

Status Engine::Recover() {
  const int64_t now_ms = clock_.WallMillis();
  const int64_t horizon_minute = store::DueMinute(now_ms + options_.horizon_ms);
  auto r = store_.Recover(horizon_minute);
  if (!r.ok()) return r.status();
  loaded_minute_ = horizon_minute;
  load_done_ = true;
  for (const JobRecord& rec : r->jobs) {
    Job* j = AddJob(rec, JobState::kReady);
    switch (rec.state) {
      case StoredState::kBuried:
        MakeBuried(j);
        break;
      case StoredState::kDelayed:
        if (rec.due_ms > now_ms) {
          MakeDelayed(j);
          break;
        }
        [[fallthrough]];
      case StoredState::kReady:
        MakeReady(j);
        break;
      case StoredState::kDone:  // never recovered
        break;
    }
  }
  for (const store::TubeSettings& ts : r->settings) {
    FindOrMakeTube(ts.tube)->settings = DecodeSettings(ts.settings);
  }
  for (const store::FarCount& f : r->far) FindOrMakeTube(f.tube)->far_delayed += f.delayed;
  const int64_t steady_us = clock_.SteadyMicros();
  for (const store::TubePause& p : r->pauses) {
    Tube* t = FindTube(p.tube);
    if (t == nullptr || p.unpause_ms <= now_ms) continue;
    t->pause_ms = p.pause_ms;
    t->unpause_us = steady_us + (p.unpause_ms - now_ms) * 1000;
    Schedule(t->timer, TickAtSteady(t->unpause_us));
  }
  next_id_ = r->next_id;
  ScheduleLoader();
  spdlog::info(
      "recovered {} jobs in memory, {} beyond the horizon, next id {}", jobs_.size(),
      [&] {
        uint64_t n = 0;
        for (auto& f : r->far) n += f.delayed;
        return n;
      }(),
      next_id_);
  return Status::Ok();
}

// ---------------------------------------------------------------- waiters

void Engine::Reserve(Client* c, int64_t timeout_ms) {
  bool any_ready = false;
  Job* best = nullptr;
  for (Tube* t : c->watch) {
    if (t->ready.empty()) continue;
    any_ready = true;
    if (Paused(t)) continue;
    Job* candidate = *t->ready.begin();
    if (best == nullptr || ReadyOrder()(candidate, best)) best = candidate;
  }
  // beanstalkd answers DEADLINE_SOON at once only when nothing is ready in
  // the watched tubes (paused ones included).
  if (DeadlineSoon(c) && !any_ready) {
    c->observer->OnDeadlineSoon();
    return;
  }
  if (best != nullptr) {
    Grant(c, best);
    return;
  }
  if (timeout_ms == 0) {
    c->observer->OnReserveTimedOut();
    return;
  }
  c->waiting = true;
  ++waiting_;
  for (Tube* t : c->watch) t->waiters.push_back(c);
  c->wait_until_us = timeout_ms < 0 ? -1 : clock_.SteadyMicros() + timeout_ms * 1000;
  ScheduleClient(c);
}

void Engine::Serve(Tube* t) {
  while (!Paused(t) && !t->waiters.empty() && !t->ready.empty()) {
    Grant(t->waiters.front(), *t->ready.begin());
  }
}

void Engine::Grant(Client* c, Job* j) {
  StopWaiting(c);
  Hold(j, c, j->ttr_ms);
  c->observer->OnReserved(View(*j));
}

void Engine::Hold(Job* j, Client* holder, int64_t ttr_ms) {
  Detach(j);
  j->state = JobState::kReserved;
  j->reserver = holder;
  ++j->tube->reserved;
  ++j->counters.reserves;
  j->deadline_us = clock_.SteadyMicros() + ttr_ms * 1000;
  holder->reserved.insert(j);
  Schedule(j->timer, TickAtSteady(j->deadline_us));
}

void Engine::StopWaiting(Client* c) {
  if (!c->waiting) return;
  c->waiting = false;
  --waiting_;
  for (Tube* t : c->watch) {
    auto& w = t->waiters;
    w.erase(std::find(w.begin(), w.end(), c));
  }
  wheel_.Cancel(&c->timer.node);
}

bool Engine::DeadlineSoon(const Client* c) const {
  if (c->reserved.empty()) return false;
  const Job* soonest = *c->reserved.begin();
  return clock_.SteadyMicros() >= soonest->deadline_us - options_.deadline_soon_ms * 1000;
}

void Engine::ScheduleClient(Client* c) {
  int64_t at = c->wait_until_us;
  if (!c->reserved.empty()) {
    const int64_t soon = (*c->reserved.begin())->deadline_us - options_.deadline_soon_ms * 1000;
    if (at < 0 || soon < at) at = soon;
  }
  if (at < 0) {
    wheel_.Cancel(&c->timer.node);
    return;
  }
  Schedule(c->timer, TickAtSteady(at));
}

void Engine::CheckClient(Client* c) {
  if (!c->waiting) return;
  if (DeadlineSoon(c)) {
    StopWaiting(c);
    c->observer->OnDeadlineSoon();
  } else if (c->wait_until_us >= 0 && clock_.SteadyMicros() >= c->wait_until_us) {
    StopWaiting(c);
    c->observer->OnReserveTimedOut();
  } else {
    ScheduleClient(c);
  }
}

void Engine::ExpireReservation(Job* j) {
  Client* c = j->reserver;
  Detach(j);
  ++j->counters.timeouts;
  ++job_timeouts_;
  MakeReady(j);
  if (c->waiting) ScheduleClient(c);
}

}  // namespace delayd::engine
