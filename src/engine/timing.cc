// Time: tick arithmetic, the wake-up contract with the event loop, and what
// fires when a timer of the wheel comes due.
#include <algorithm>

#include "engine/engine.h"

namespace delayd::engine {

// One tick is kTickUs of steady time. origin_us_ is chosen so tick boundaries
// fall on wall-clock millisecond boundaries, hence a job due at wall ms D
// fires at the start of a tick rather than up to a tick after it. A tick
// shorter than the millisecond of due times lets a job whose delay was asked
// for now become ready within 100 us of that delay's end, rather than at the
// next millisecond: with 1 ms ticks that rounding alone made jobs 0.5 ms late
// at the median and 1 ms at the 99th percentile (bench/durability).
constexpr int64_t kTickUs = 100;

uint64_t Engine::NowTick() const {
  return static_cast<uint64_t>((clock_.SteadyMicros() - origin_us_) / kTickUs);
}

uint64_t Engine::TickAtSteady(int64_t steady_us) const {
  const int64_t rel = steady_us - origin_us_;
  return rel <= 0 ? 0 : static_cast<uint64_t>((rel + kTickUs - 1) / kTickUs);
}

int64_t Engine::SteadyAtTick(uint64_t tick) const {
  return origin_us_ + static_cast<int64_t>(tick) * kTickUs;
}

// Wall time maps to steady time through two clock reads, which differ by a
// few microseconds (measured: 2-3 us past the boundary for every job). With
// plain rounding up, that pushed every job due exactly on a millisecond one
// whole tick late. An instant within kWallSkewUs after a tick boundary counts
// as the boundary; the event loop's own wake-up is later than that anyway
// (measured 14-120 us), so a job still does not fire before its due time.
constexpr int64_t kWallSkewUs = 5;

uint64_t Engine::TickAtWall(int64_t wall_us) const {
  return TickAtSteady(clock_.SteadyMicros() + (wall_us - clock_.WallMicros()) - kWallSkewUs);
}

void Engine::Schedule(EngineTimer& t, uint64_t tick) {
  wheel_.Cancel(&t.node);
  wheel_.Schedule(&t.node, tick);
  tick = std::max(tick, wheel_.now());
  if (tick < armed_tick_) {
    armed_tick_ = tick;
    wake_(SteadyAtTick(tick));
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
    wake_(SteadyAtTick(*next));
  }
}

void Engine::Fire(EngineTimer* t) {
  switch (t->kind) {
    case TimerKind::kJob: {
      Job* j = static_cast<Job*>(t->owner);
      if (j->state == JobState::kDelayed) {
        Detach(j);
        Fired(j);
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
      Emit(tube, JobEventKind::kReady, nullptr);
      break;
    }
    case TimerKind::kLoader:
      LoadStep();
      break;
    case TimerKind::kPushRetry:
      home_->RetryPush();
      break;
    case TimerKind::kInDoubt:
      ReadInDoubt();
      break;
    case TimerKind::kWindow:
      SettleWindows();
      break;
  }
}

}  // namespace delayd::engine
