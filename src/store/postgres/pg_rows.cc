#include "store/postgres/pg_rows.h"

namespace delayd::store::pg {

Params ChangeParams(const JobRecord& j, int shard, std::optional<uint64_t> if_version) {
  Params p;
  JobFields(j, shard, p);
  if (j.state == StoredState::kReserved) {
    p.Bytes(j.reserved_by).Int(j.deadline_ms);
  } else {
    p.Null().Null();
  }
  if (if_version) {
    p.Int(static_cast<int64_t>(*if_version));
  } else {
    p.Null();
  }
  return p;
}

JobRecord ReadJob(const PGresult* r, int row) {
  using pg::GetBytes;
  using pg::GetInt;
  JobRecord j;
  j.id = static_cast<uint64_t>(GetInt(r, row, 0));
  j.tube = GetBytes(r, row, 1);
  j.priority = static_cast<uint32_t>(GetInt(r, row, 2));
  j.state = static_cast<StoredState>(GetInt(r, row, 3));
  j.due_ms = GetInt(r, row, 4);
  j.delay_ms = GetInt(r, row, 5);
  j.ttr_ms = GetInt(r, row, 6);
  j.created_ms = GetInt(r, row, 7);
  j.counters.reserves = static_cast<uint32_t>(GetInt(r, row, 8));
  j.counters.timeouts = static_cast<uint32_t>(GetInt(r, row, 9));
  j.counters.releases = static_cast<uint32_t>(GetInt(r, row, 10));
  j.counters.buries = static_cast<uint32_t>(GetInt(r, row, 11));
  j.counters.kicks = static_cast<uint32_t>(GetInt(r, row, 12));
  j.body = GetBytes(r, row, 13);
  j.key = GetBytes(r, row, 14);
  j.spec = GetBytes(r, row, 15);
  j.attempt_log = GetBytes(r, row, 16);
  j.last_error = GetBytes(r, row, 17);
  j.done_ms = GetInt(r, row, 18);
  j.run_at_ms = GetInt(r, row, 19);
  j.version = static_cast<uint64_t>(GetInt(r, row, 20));
  j.reserved_by = GetBytes(r, row, 21);
  j.deadline_ms = GetInt(r, row, 22);
  j.push = GetInt(r, row, 23) != 0;
  j.bury_seq = static_cast<uint64_t>(GetInt(r, row, 24));
  return j;
}

TimerRecord ReadTimer(const PGresult* r, int row) {
  TimerRecord t;
  t.id = static_cast<uint64_t>(pg::GetInt(r, row, 0));
  t.name = pg::GetBytes(r, row, 1);
  t.definition = pg::GetBytes(r, row, 2);
  t.next_fire_ms = pg::GetInt(r, row, 3);
  t.last_fire_ms = pg::GetInt(r, row, 4);
  t.created_ms = pg::GetInt(r, row, 5);
  return t;
}

}  // namespace delayd::store::pg
