#include "common/clock.h"

#include <chrono>

namespace delayd {

int64_t SystemClock::WallMicros() const {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

int64_t SystemClock::SteadyMicros() const {
  using namespace std::chrono;
  return duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count();
}

const Clock& TheSystemClock() {
  static const SystemClock clock;
  return clock;
}

}  // namespace delayd
