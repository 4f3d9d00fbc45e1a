// Blocked reserves: clients waiting for a ready job in the tubes they
// watch, their timeouts and DEADLINE_SOON.
#include <algorithm>

#include "engine/engine.h"

namespace delayd::engine {

namespace {
// How often a reserve whose time is up looks again while its job is read.
constexpr int64_t kColdRecheckUs = 10'000;
}  // namespace

void Engine::Reserve(Client* c, int64_t timeout_ms) { home_->Reserve(c, timeout_ms); }

void Engine::ReserveFromMemory(Client* c, int64_t timeout_ms) {
  bool any_ready = false;
  Job* best = nullptr;
  bool cold = false;  // a watched tube's first ready job is in the store
  for (Tube* t : c->watch) {
    if (t->ready.empty() && t->windows[0].cold == 0) continue;
    any_ready = true;
    if (Paused(t)) continue;
    Job* candidate = FirstOf(t, store::JobSet::kReady);
    if (candidate == nullptr) {
      cold = true;
      continue;
    }
    if (best == nullptr || ReadyOrder()(candidate, best)) best = candidate;
  }
  // beanstalkd answers DEADLINE_SOON at once only when nothing is ready in
  // the watched tubes (paused ones included).
  if (DeadlineSoon(c) && !any_ready) {
    c->observer->OnDeadlineSoon();
    return;
  }
  // A cold job may come before `best`: wait for the refill (served then).
  if (best != nullptr && !cold) {
    Grant(c, best);
    return;
  }
  if (timeout_ms == 0 && !cold) {
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
  while (!Paused(t) && !t->waiters.empty()) {
    Job* j = FirstOf(t, store::JobSet::kReady);
    if (j == nullptr) break;
    Grant(t->waiters.front(), j);
  }
}

void Engine::Grant(Client* c, Job* j) {
  StopWaiting(c);
  Hold(j, c, j->ttr_ms);
  c->observer->OnReserved(View(*j));
}

void Engine::StopWaiting(Client* c) {
  if (!c->waiting) return;
  c->waiting = false;
  --waiting_;
  home_->StoppedWaiting(c);
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
    if (ColdReadyFor(c)) {
      // A job is ready, in the store: the refill serves it. A reserve never
      // times out while a watched tube has a ready job.
      Schedule(c->timer, TickAtSteady(clock_.SteadyMicros() + kColdRecheckUs));
      return;
    }
    StopWaiting(c);
    c->observer->OnReserveTimedOut();
  } else {
    ScheduleClient(c);
  }
}

}  // namespace delayd::engine
