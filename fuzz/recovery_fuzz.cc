// libFuzzer target: starting from a damaged database file. The input is the
// whole delayd.db; the store opens it and the engine and timer service
// recover from it. Either they start or they fail with an error: never a
// crash, a hang or undefined behaviour. Seeds are real databases written by
// fuzz/make_store_seed.
#include <cstddef>
#include <cstdint>
#include <fstream>

#include "fuzz/harness.h"
#include "timer/timer_service.h"

using namespace delayd;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::ResetScratch();
  {
    std::ofstream f(fuzz::ScratchDir() / "delayd.db", std::ios::binary);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  fuzz::Core core;
  if (!core.Open().ok()) return 0;  // refused with an error: fine
  timer::TimerService timers(*core.writes, *core.engine, core.clock, timer::TimerOptions{},
                             [](int64_t) {});
  (void)timers.Start();
  // Read back what recovered, as the API would (SQLite answers at once).
  for (uint64_t id = 1; id <= 16; ++id) core.engine->GetJob(id, [](Result<engine::JobInfo>) {});
  timers.List(0, 100, [](Result<std::vector<timer::TimerInfo>>) {});
  return 0;
}
