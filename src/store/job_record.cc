#include "store/job_record.h"

#include <fmt/format.h>

namespace delayd::store {
namespace {
constexpr int64_t kMaxDurationMs = 4'294'967'295'000LL;  // 2^32-1 s, as engine/spec.h
}  // namespace

std::string RecordFault(const JobRecord& r) {
  if (r.id == 0) return "id 0";
  if (r.tube.empty() || r.tube.size() > 200)
    return fmt::format("a tube name of {} bytes", r.tube.size());
  for (unsigned char c : r.tube) {
    if (c <= ' ' || c == 127) return "a tube name with a control byte or a space";
  }
  if (static_cast<unsigned>(r.state) > static_cast<unsigned>(StoredState::kReserved)) {
    return fmt::format("unknown state {}", static_cast<unsigned>(r.state));
  }
  auto wall = [](int64_t ms) { return ms >= 0 && ms <= kMaxWallMs; };
  auto duration = [](int64_t ms) { return ms >= 0 && ms <= kMaxDurationMs; };
  if (!wall(r.due_ms)) return fmt::format("due time {} ms out of range", r.due_ms);
  if (!wall(r.created_ms)) return fmt::format("creation time {} ms out of range", r.created_ms);
  if (!wall(r.run_at_ms)) return fmt::format("run-at time {} ms out of range", r.run_at_ms);
  if (!wall(r.done_ms)) return fmt::format("done time {} ms out of range", r.done_ms);
  if (!wall(r.deadline_ms)) return fmt::format("deadline {} ms out of range", r.deadline_ms);
  if (!duration(r.delay_ms)) return fmt::format("delay {} ms out of range", r.delay_ms);
  if (!duration(r.ttr_ms)) return fmt::format("ttr {} ms out of range", r.ttr_ms);
  return "";
}

}  // namespace delayd::store
