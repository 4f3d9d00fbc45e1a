// Blocked reserves: clients waiting for a ready job in the tubes they
// watch, their timeouts and DEADLINE_SOON.
#include <algorithm>

#include "engine/engine.h"

namespace delayd::engine {

void Engine::Reserve(Client* c, int64_t timeout_ms) { home_->Reserve(c, timeout_ms); }

void Engine::ReserveFromMemory(Client* c, int64_t timeout_ms) {
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
    StopWaiting(c);
    c->observer->OnReserveTimedOut();
  } else {
    ScheduleClient(c);
  }
}

}  // namespace delayd::engine
