// PgStore as the SharedQueue of a cluster (pg_store.h): claims, the due
// entries of owned shards, id blocks, notices, and the reads of what every
// node shares (counts, tubes, timers of owned shards).
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <tuple>
#include <utility>

#include "store/postgres/pg_rows.h"
#include "store/postgres/pg_schema.h"
#include "store/postgres/pg_store.h"

namespace delayd::store {

using pg::ArrayParam;
using pg::First;
using pg::kInt8;
using pg::kText;
using pg::Params;
using pg::PgConn;
using pg::ReadJob;
using pg::ReadTimer;
using pg::Rows;

Result<std::optional<JobRecord>> PgStore::BestReady(const std::string& tube) {
  return First(Rows(Read("best_ready", Params().Bytes(tube)), ReadJob));
}

namespace {
Params OptionalTube(const std::optional<std::string>& tube) {
  Params p;
  tube ? p.Bytes(*tube) : p.Null();
  return p;
}
}  // namespace

Result<std::vector<TubeCount>> PgStore::CountJobs(std::optional<std::string> tube) {
  return Rows(Read("count_jobs", OptionalTube(tube)), [](const PGresult* r, int row) {
    auto n = [&](int col) { return static_cast<uint64_t>(pg::GetInt(r, row, col)); };
    return TubeCount{pg::GetBytes(r, row, 0), n(1), n(2), n(3), n(4), n(5), pg::GetInt(r, row, 6)};
  });
}

Result<std::vector<TubeRow>> PgStore::Tubes(std::optional<std::string> tube) {
  return Rows(Read("tubes", OptionalTube(tube)), [](const PGresult* r, int row) {
    return TubeRow{pg::GetBytes(r, row, 0), pg::GetInt(r, row, 1), pg::GetInt(r, row, 2),
                   pg::GetBytes(r, row, 3)};
  });
}

Result<std::vector<TimerRecord>> PgStore::TimersDueOf(const std::vector<int>& shards,
                                                      int64_t from_ms, uint64_t after_id,
                                                      int64_t before_ms, size_t limit) {
  if (shards.empty()) return std::vector<TimerRecord>();
  ArrayParam owned(kInt8);
  for (int s : shards) owned.Int(s);
  return Rows(Read("timers_due", Params()
                                     .Int(from_ms)
                                     .Int(static_cast<int64_t>(after_id))
                                     .Int(before_ms)
                                     .Int(static_cast<int64_t>(limit))
                                     .Array(owned)),
              ReadTimer);
}

Result<std::vector<std::string>> PgStore::PushTubes(const std::vector<int>& shards) {
  if (shards.empty()) return std::vector<std::string>();
  ArrayParam owned(kInt8);
  for (int s : shards) owned.Int(s);
  return Rows(Read("push_tubes", Params().Array(owned)),
              [](const PGresult* r, int row) { return pg::GetBytes(r, row, 0); });
}

int PgStore::TimerShardOf(uint64_t id) const { return pg::TimerShard(id, shards_); }

void PgStore::TakeTimerId(std::function<void(Result<uint64_t>)> done) {
  Answer<uint64_t>(
      *reads_,
      [](PgConn& c) -> Result<uint64_t> {
        auto r = c.Run("take_timer_id", Params());
        if (!r.ok()) return r.status();
        return static_cast<uint64_t>(pg::GetInt(r->get(), 0, 0));
      },
      std::move(done));
}

void PgStore::Claim(ClaimQuery q, std::function<void(Result<std::vector<JobRecord>>)> done) {
  if (q.tubes.empty() || q.limit == 0) return executor_([done] { done(std::vector<JobRecord>()); });
  ArrayParam tubes(kText);
  for (const std::string& t : q.tubes) tubes.Bytes(t);
  // Params cannot be copied; the work must be.
  auto p = std::make_shared<Params>();
  p->Bytes(options_.node_id).Int(q.now_ms).Array(tubes).Int(static_cast<int64_t>(q.limit));
  if (q.shards.empty()) {
    p->Null();
  } else {
    ArrayParam shards(kInt8);
    for (int shard : q.shards) shards.Int(shard);
    p->Array(shards);
  }
  Answer<std::vector<JobRecord>>(
      *claims_,
      [p, name = q.push ? "claim_push" : "claim"](PgConn& c) -> Result<std::vector<JobRecord>> {
        auto out = Rows(c.Run(name, *p), ReadJob);
        if (out.ok()) {
          // RETURNING keeps no order: best first, as the claim chose them.
          std::sort(out->begin(), out->end(), [](const JobRecord& a, const JobRecord& b) {
            return std::tie(a.priority, a.id) < std::tie(b.priority, b.id);
          });
        }
        return out;
      },
      std::move(done));
}

void PgStore::Due(DueQuery q, std::function<void(Result<std::vector<DueEntry>>)> done) {
  if (q.shards.empty() || q.limit == 0) return executor_([done] { done(std::vector<DueEntry>()); });
  ArrayParam shards(kInt8);
  for (int s : q.shards) shards.Int(s);
  // Ids are below 2^63: the cursor after the last id of a minute.
  const int64_t after_id = static_cast<int64_t>(std::min<uint64_t>(q.after_id, INT64_MAX));
  auto p = std::make_shared<Params>();
  p->Array(shards)
      .Int(q.after_minute)
      .Int(after_id)
      .Int(q.through_minute)
      .Int(static_cast<int64_t>(q.limit));
  Answer<std::vector<DueEntry>>(
      *reads_,
      [p](PgConn& c) {
        return Rows(c.Run("due_of_shards", *p), [](const PGresult* r, int row) {
          return DueEntry{static_cast<int>(pg::GetInt(r, row, 0)),
                          static_cast<uint64_t>(pg::GetInt(r, row, 1)), pg::GetInt(r, row, 2)};
        });
      },
      std::move(done));
}

void PgStore::TakeIds(uint64_t n, std::function<void(Result<uint64_t>)> done) {
  Answer<uint64_t>(
      *reads_,
      [n](PgConn& c) -> Result<uint64_t> {
        auto r = c.Run("take_ids", Params().Int(static_cast<int64_t>(n)));
        if (!r.ok()) return r.status();
        return static_cast<uint64_t>(pg::GetInt(r->get(), 0, 0));
      },
      std::move(done));
}

Status PgStore::Listen(std::function<void(std::vector<Notice>)> fn) {
  if (shared() == nullptr) return Status::Internal("postgres: notices are for cluster mode");
  auto hear = [this, fn = std::move(fn)](std::vector<pg::PgListener::Heard> heard, bool listening) {
    std::vector<Notice> notices;
    auto add = [&](Notice::Kind kind) -> Notice& {
      notices.emplace_back();
      notices.back().kind = kind;
      return notices.back();
    };
    if (listening) add(Notice::Kind::kListening);
    for (pg::PgListener::Heard& h : heard) {
      if (h.channel == kReadyChannel) {
        add(Notice::Kind::kReady).tube = std::move(h.payload);
        continue;
      }
      if (h.channel == kTubeChannel) {
        add(Notice::Kind::kTube).tube = std::move(h.payload);
        continue;
      }
      if (h.channel == kPushChannel) {  // "<shard> <tube>"
        const size_t space = h.payload.find(' ');
        if (space == std::string::npos) continue;
        Notice& n = add(Notice::Kind::kPush);
        n.shard = std::atoi(h.payload.substr(0, space).c_str());
        n.tube = h.payload.substr(space + 1);
        continue;
      }
      if (h.channel == kTimerChannel) {
        add(Notice::Kind::kTimer).id = std::strtoull(h.payload.c_str(), nullptr, 10);
        continue;
      }
      for (const DueEntry& e : ParseDue(h.payload)) {
        Notice& n = add(Notice::Kind::kDue);
        n.shard = e.shard;
        n.id = e.id;
        n.due_ms = e.due_ms;
      }
    }
    executor_([fn, notices = std::move(notices)]() mutable { fn(std::move(notices)); });
  };
  auto l = pg::PgListener::Start(
      options_.conninfo, {kReadyChannel, kDueChannel, kTubeChannel, kPushChannel, kTimerChannel},
      hear);
  if (!l.ok()) return l.status();
  listener_ = std::move(l).value();
  return Status::Ok();
}

}  // namespace delayd::store
