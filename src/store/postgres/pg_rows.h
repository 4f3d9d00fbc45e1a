// The rows of jobs and timers as PgStore writes and reads them: a job's
// columns in one order for every statement that returns jobs, the
// parameters of one row or of many, and the readers of result rows.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "store/job_record.h"
#include "store/postgres/pg_conn.h"
#include "store/timer_record.h"

namespace delayd::store::pg {

// The states are stored as these numbers, as on SQLite.
static_assert(static_cast<int>(StoredState::kDelayed) == 1);
static_assert(static_cast<int>(StoredState::kDone) == 3);
static_assert(static_cast<int>(StoredState::kReserved) == 4);

inline constexpr const char* kJobColumns =
    "id, tube, pri, state, due_ms, delay_ms, ttr_ms, created_ms, reserves, timeouts, releases, "
    "buries, kicks, body, key, spec, attempt_log, last_error, done_ms, run_at_ms, ver, "
    "reserved_by, deadline_ms, push, bury_seq";
inline constexpr const char* kTimerColumns =
    "id, name, definition, next_fire_ms, last_fire_ms, created_ms";

// The parameter types of a job row (JobFields).
inline constexpr Oid kJobTypes[] = {kInt8, kInt8,  kText,  kInt8,  kInt8,  kInt8,  kInt8, kInt8,
                                    kInt8, kInt8,  kInt8,  kInt8,  kInt8,  kInt8,  kInt8, kInt8,
                                    kInt8, kBytea, kBytea, kBytea, kBytea, kBytea, kInt8, kInt8};

// The fields of a job row in the order of the parameters of "update" and
// "replace" (kJobTypes) and of the columns of "insert": into Params
// for one row, or into Columns for many.
template <typename Sink>
void JobFields(const JobRecord& j, int shard, Sink& out) {
  out.Int(shard);
  out.Int(static_cast<int64_t>(j.id));
  out.Bytes(j.tube);
  out.Int(j.priority);
  out.Int(static_cast<int64_t>(j.state));
  out.Int(j.due_ms);
  out.Int(DueMinute(j.due_ms));
  out.Int(j.delay_ms);
  out.Int(j.ttr_ms);
  out.Int(j.created_ms);
  if (j.state == StoredState::kDone) {
    out.Int(j.done_ms);
  } else {
    out.Null();
  }
  out.Int(j.run_at_ms);
  out.Int(j.counters.reserves);
  out.Int(j.counters.timeouts);
  out.Int(j.counters.releases);
  out.Int(j.counters.buries);
  out.Int(j.counters.kicks);
  out.OptionalBytes(j.key);
  out.OptionalBytes(j.spec);
  out.OptionalBytes(j.attempt_log);
  out.OptionalBytes(j.last_error);
  out.Bytes(j.body);
  out.Int(j.push ? 1 : 0);
  if (j.state == StoredState::kBuried) {
    out.Int(static_cast<int64_t>(j.bury_seq));
  } else {
    out.Null();
  }
}

// The parameters of "update" and "replace": the row, then what cluster mode
// adds (a reservation's holder and deadline, the version required).
Params ChangeParams(const JobRecord& j, int shard, std::optional<uint64_t> if_version);

// Many job rows as one array per column, for "insert" (one statement for
// many rows costs the server far less than one statement per row).
class Columns {
 public:
  Columns() {
    for (Oid type : kJobTypes) columns_.emplace_back(type);
  }
  void Add(const JobRecord& j, int shard) {
    next_ = 0;
    JobFields(j, shard, *this);
  }
  size_t rows() const { return columns_.front().size(); }
  Params ToParams() const {
    Params p;
    for (const pg::ArrayParam& c : columns_) p.Array(c);
    return p;
  }

  // The sink JobFields fills, a column at a time.
  void Int(int64_t v) { columns_[next_++].Int(v); }
  void Bytes(std::string_view v) { columns_[next_++].Bytes(v); }
  void OptionalBytes(std::string_view v) { columns_[next_++].OptionalBytes(v); }
  void Null() { columns_[next_++].Null(); }

 private:
  std::vector<pg::ArrayParam> columns_;
  size_t next_ = 0;
};

// A job row of a statement that returns kJobColumns.
JobRecord ReadJob(const PGresult* r, int row);
// A timer row of a statement that returns kTimerColumns.
TimerRecord ReadTimer(const PGresult* r, int row);

template <typename Read>
auto Rows(const Result<PgResult>& r, Read read) -> Result<std::vector<decltype(read(nullptr, 0))>> {
  if (!r.ok()) return r.status();
  std::vector<decltype(read(nullptr, 0))> out;
  const PGresult* res = r->get();
  const int n = PQntuples(res);
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out.push_back(read(res, i));
  return out;
}

template <typename T>
Result<std::optional<T>> First(Result<std::vector<T>> rows) {
  if (!rows.ok()) return rows.status();
  if (rows->empty()) return std::optional<T>();
  return std::optional<T>(std::move(rows->front()));
}

}  // namespace delayd::store::pg
