// libFuzzer target: recovering from rows a PostgreSQL database can hold.
// recovery_fuzz damages an SQLite file, whose constraints still refuse much
// (two rows with one id, say); PostgreSQL keys jobs by (shard, id), and a
// database edited by hand or written by two processes holds any value its
// column types allow. The input is a list of such rows (ids from a small
// range, so that they repeat; any state number, time, duration, tube, and
// pauses). The engine recovers from them, time passes, jobs are read and
// kicked: it must leave the unsound rows out and never crash.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>

#include "fuzz/harness.h"

using namespace delayd;

namespace {

int64_t Time(FuzzedDataProvider& in, int64_t now_ms) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return now_ms + in.ConsumeIntegralInRange<int64_t>(-120'000, 7'200'000);
    case 1:
      return in.ConsumeIntegral<int64_t>();
    case 2:
      return store::kMaxWallMs + in.ConsumeIntegralInRange<int64_t>(-2, 2);
    default:
      return in.ConsumeIntegralInRange<int64_t>(-2, 2);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::ResetScratch();
  FuzzedDataProvider in(data, size);
  fuzz::Core core;
  const int64_t now_ms = core.clock.WallMillis();
  store::Recovered rows;
  const int n = in.ConsumeIntegralInRange<int>(0, 48);
  static const char* kTubes[] = {"default", "a", "", "b c", "\x01", "x"};
  for (int i = 0; i < n; ++i) {
    store::JobRecord r;
    r.id = in.ConsumeIntegralInRange<uint64_t>(0, 12);
    r.tube = in.ConsumeBool() ? std::string(kTubes[in.ConsumeIntegralInRange<int>(0, 5)])
                              : in.ConsumeRandomLengthString(260);
    r.priority = in.ConsumeIntegral<uint32_t>();
    r.state = static_cast<store::StoredState>(in.ConsumeIntegralInRange<uint8_t>(0, 6));
    r.due_ms = Time(in, now_ms);
    r.delay_ms = Time(in, 0);
    r.ttr_ms = Time(in, 0);
    r.created_ms = Time(in, now_ms);
    r.run_at_ms = Time(in, now_ms);
    r.done_ms = in.ConsumeBool() ? 0 : Time(in, now_ms);
    r.deadline_ms = in.ConsumeBool() ? 0 : Time(in, now_ms);
    r.key = in.ConsumeRandomLengthString(8);
    r.spec = in.ConsumeRandomLengthString(64);
    r.body = in.ConsumeRandomLengthString(32);
    rows.jobs.push_back(std::move(r));
  }
  const int pauses = in.ConsumeIntegralInRange<int>(0, 3);
  for (int i = 0; i < pauses; ++i) {
    rows.pauses.push_back({std::string(kTubes[in.ConsumeIntegralInRange<int>(0, 5)]),
                           Time(in, now_ms), Time(in, now_ms)});
  }
  rows.next_id = in.ConsumeIntegralInRange<uint64_t>(1, 16);
  if (!core.Open(std::move(rows)).ok()) return 0;  // refused with an error: fine
  engine::Client* c = core.engine->Connect(nullptr);
  for (int step = 0; step < 4; ++step) {
    core.clock.AdvanceMillis(in.ConsumeIntegralInRange<int64_t>(0, 3'600'000));
    core.engine->Tick();
    for (uint64_t id = 0; id <= 12; ++id) core.engine->GetJob(id, [](Result<engine::JobInfo>) {});
    core.engine->Kick(c, 100, [](Result<uint64_t>) {});
    core.RunUntil([] { return false; }, std::chrono::milliseconds(50));
  }
  core.engine->Disconnect(c);
  return 0;
}
