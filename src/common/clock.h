// The clock seam: every component that needs time takes a Clock&, so tests can
// drive time by hand (ManualClock) and production uses SystemClock.
//
// Two clocks: wall time (due times are wall-clock milliseconds since the Unix
// epoch, as users give them) and steady time (what waiting is measured in, so a
// wall-clock step neither fires everything at once nor stalls the clock).
#pragma once

#include <cstdint>

namespace delayd {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time, in microseconds since the Unix epoch.
  virtual int64_t WallMicros() const = 0;
  // Monotonic time, in microseconds since an arbitrary origin.
  virtual int64_t SteadyMicros() const = 0;

  int64_t WallMillis() const { return WallMicros() / 1000; }
};

class SystemClock final : public Clock {
 public:
  int64_t WallMicros() const override;
  int64_t SteadyMicros() const override;
};

// The system's clock, for a component given none (safe from any thread).
const Clock& TheSystemClock();

// A clock that moves only when told. Not thread-safe: tests drive it from the
// thread that owns the component under test.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t wall_us = 1'700'000'000'000'000, int64_t steady_us = 1'000'000)
      : wall_us_(wall_us), steady_us_(steady_us) {}

  int64_t WallMicros() const override { return wall_us_; }
  int64_t SteadyMicros() const override { return steady_us_; }

  // Moves both clocks forward together, as real time does.
  void Advance(int64_t us) {
    wall_us_ += us;
    steady_us_ += us;
  }
  void AdvanceMillis(int64_t ms) { Advance(ms * 1000); }
  // Steps the wall clock alone (an NTP correction or an operator's date -s).
  void StepWall(int64_t us) { wall_us_ += us; }

 private:
  int64_t wall_us_;
  int64_t steady_us_;
};

}  // namespace delayd
