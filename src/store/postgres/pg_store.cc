#include "store/postgres/pg_store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <utility>

#include "store/postgres/pg_owner.h"
#include "store/postgres/pg_rows.h"
#include "store/postgres/pg_schema.h"
#include "store/postgres/pg_statements.h"

namespace delayd::store {

using pg::First;
using pg::kBytea;
using pg::kInt8;
using pg::kJobColumns;
using pg::kText;
using pg::Params;
using pg::PgConn;
using pg::PgResult;
using pg::ReadJob;
using pg::ReadTimer;
using pg::Rows;
using pg::Select;

PgStore::PgStore(PgOptions options, Executor executor)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : TheSystemClock()),
      writer_(std::make_unique<Link>(options_.conninfo, "writer", /*pipelined=*/true,
                                     /*durable_commits=*/false, /*generic_plans=*/true)),
      syncer_(std::make_unique<Link>(options_.conninfo, "syncer", false, true)),
      reads_(std::make_unique<Lane>(options_.conninfo, "reader", true)),
      // A claim lost to a crash of PostgreSQL leaves its jobs ready, to be
      // delivered again (at-least-once), so claims do not wait for the
      // disk; id blocks must not be handed out twice, and are taken on
      // the reader lane, whose commits are durable.
      claims_(std::make_unique<Lane>(options_.conninfo, "claimer", false, true)),
      executor_(executor),
      syncs_key_(options_.node_id.empty() ? "syncs" : "syncs:" + options_.node_id),
      queue_(*this,
             {.max_batch = options_.max_batch,
              .sync_delay_ms = options_.sync_delay_ms,
              .linger_us = options_.linger_us},
             std::move(executor)) {}

Result<std::unique_ptr<PgStore>> PgStore::Open(PgOptions options, Executor executor) {
  if (options.shards <= 0 || options.shards > 32767) {
    return Status::InvalidArgument("postgres: the shard count must be 1 to 32767");
  }
  // Checks the connection string before anything else uses it.
  char* err = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(options.conninfo.c_str(), &err);
  if (parsed == nullptr) {
    std::string why = err ? err : "out of memory";
    PQfreemem(err);
    while (!why.empty() && why.back() == '\n') why.pop_back();
    return Status::InvalidArgument("postgres: bad connection string: " + why);
  }
  PQconninfoFree(parsed);

  std::unique_ptr<PgStore> store(new PgStore(std::move(options), std::move(executor)));
  {
    // First, before anything is written: the database must be ours.
    auto owner = PgConn::Connect(store->options_.conninfo, "delayd-owner");
    if (!owner.ok()) return owner.status();
    Status s =
        pg::HoldDatabase(**owner, !store->options_.node_id.empty(), store->options_.owner_name);
    if (!s.ok()) return s;
    store->owner_ = std::move(owner).value();
  }
  {
    auto migrator = PgConn::Connect(store->options_.conninfo, "delayd-migrate");
    if (!migrator.ok()) return migrator.status();
    Status s = pg::Migrate(**migrator, store->options_.shards, &store->shards_);
    if (!s.ok()) return s;
  }
  std::vector<Link*> links = {store->writer_.get(), store->syncer_.get(), &store->reads_->link()};
  if (store->shared() != nullptr) links.push_back(&store->claims_->link());
  for (Link* link : links) {
    auto c = link->Get();
    if (!c.ok()) return c.status();
  }
  store->set_writer_session(store->writer_->session());
  store->synced_writer_connects_ = store->writer_->connects();
  store->owner_checked_connects_ = store->syncer_->connects();
  store->queue_.Start();
  store->reads_->Every(std::chrono::milliseconds(store->options_.fold_counts_ms),
                       [s = store.get()] {
                         s->FoldCounts();
                         s->KeepStatistics();
                       });
  store->reads_->Start();
  if (store->shared() != nullptr) store->claims_->Start();
  return store;
}

PgStore::~PgStore() { Close(); }

// Work still queued on the lanes is done, and answered, before they stop.
void PgStore::Close() {
  queue_.Close();
  listener_.reset();
  claims_->Stop();
  reads_->Stop();
}

void PgStore::Aside(Lane& lane, std::function<void()> work, std::function<void()> answer) {
  auto both = [this, work = std::move(work), answer = std::move(answer)]() mutable {
    work();
    executor_(std::move(answer));
  };
  if (!lane.Queue(both)) both();
}

void PgStore::ReadAside(std::function<void()> read, std::function<void()> then) {
  Aside(*reads_, std::move(read), std::move(then));
}

StoreStats PgStore::stats() const { return queue_.stats(); }

void PgStore::Submit(Mutation m, Done done) { queue_.Submit(std::move(m), std::move(done)); }

void PgStore::SubmitAll(std::vector<Mutation> ms, Done done) {
  queue_.SubmitAll(std::move(ms), std::move(done));
}

Result<PgResult> PgStore::Read(const std::function<Result<PgResult>(PgConn&)>& run) {
  Result<PgResult> r = Status::Internal("postgres: read not made");
  reads_->Run([&] { r = reads_->Use(run); });
  return r;
}

Result<PgResult> PgStore::Read(const char* name, const Params& p) {
  return Read([&](PgConn& c) { return c.Run(name, p); });
}

Result<Recovered> PgStore::Recover(int64_t horizon_minute) {
  Result<Recovered> out = Status::Internal("postgres: recovery not made");
  reads_->Run([&] { out = RecoverNow(horizon_minute); });
  return out;
}

Result<Recovered> PgStore::RecoverNow(int64_t horizon_minute) {
  auto query = [&](const std::string& sql, const Params& p) {
    return reads_->Use([&](PgConn& c) { return c.Query(sql, p); });
  };
  Recovered out;
  // Jobs reserved by the nodes of a cluster that used this database are
  // ready again, as every reservation ends when one delayd restarts: a
  // node of its own holds the database alone (pg_owner.h), and its windows
  // read ready jobs through jobs_ready and jobs_push.
  auto held =
      query("UPDATE jobs SET state=0, ver=ver+1, reserved_by=NULL, deadline_ms=NULL WHERE state=4",
            Params());
  if (!held.ok()) return held.status();
  // Delayed through the horizon: read whole.
  auto jobs =
      Rows(query(Select(kJobColumns, "FROM jobs WHERE state=1 AND due_min<=$1::int8 ORDER BY id"),
                 Params().Int(horizon_minute)),
           ReadJob);
  if (!jobs.ok()) return jobs.status();
  out.jobs = std::move(jobs).value();
  // Ready and buried: counted per tube and set; the engine reads the
  // windows it keeps (ScanSet).
  auto sets = query(
      "SELECT tube, state::int8, push::int8, count(*), count(*) FILTER (WHERE pri < 1024), "
      "coalesce(max(bury_seq), 0) FROM jobs WHERE state IN (0, 2) GROUP BY 1, 2, 3 "
      "ORDER BY 1, 2, 3",
      Params());
  if (!sets.ok()) return sets.status();
  const PGresult* r = sets->get();
  for (int i = 0; i < PQntuples(r); ++i) {
    const bool buried = pg::GetInt(r, i, 1) == 2;
    SetCount c;
    c.tube = pg::GetBytes(r, i, 0);
    c.set = buried                     ? JobSet::kBuried
            : pg::GetInt(r, i, 2) != 0 ? JobSet::kPushReady
                                       : JobSet::kReady;
    c.jobs = static_cast<uint64_t>(pg::GetInt(r, i, 3));
    c.urgent = buried ? 0 : static_cast<uint64_t>(pg::GetInt(r, i, 4));
    out.max_bury_seq = std::max(out.max_bury_seq, static_cast<uint64_t>(pg::GetInt(r, i, 5)));
    out.sets.push_back(std::move(c));
  }
  // Delayed beyond the horizon: they stay in the store, counted per tube
  // and due hour (floor: a minute before the epoch is in hour -1).
  auto far = query(
      "SELECT tube, floor(due_min / 60.0)::int8, count(*) FROM jobs WHERE state=1 AND "
      "due_min>$1::int8 GROUP BY 1, 2 ORDER BY 1, 2",
      Params().Int(horizon_minute));
  if (!far.ok()) return far.status();
  for (int i = 0; i < PQntuples(far->get()); ++i) {
    out.far.push_back({pg::GetBytes(far->get(), i, 0), pg::GetInt(far->get(), i, 1),
                       static_cast<uint64_t>(pg::GetInt(far->get(), i, 2))});
  }
  auto tubes = query("SELECT name, pause_ms, unpause_ms, settings FROM tubes", Params());
  if (!tubes.ok()) return tubes.status();
  for (int i = 0; i < PQntuples(tubes->get()); ++i) {
    std::string name = pg::GetBytes(tubes->get(), i, 0);
    if (int64_t pause = pg::GetInt(tubes->get(), i, 1); pause > 0) {
      out.pauses.push_back({name, pause, pg::GetInt(tubes->get(), i, 2)});
    }
    std::string settings = pg::GetBytes(tubes->get(), i, 3);
    if (!settings.empty()) out.settings.push_back({std::move(name), std::move(settings)});
  }
  auto next = query(
      "SELECT greatest(coalesce((SELECT value FROM meta WHERE key='next_id'), 1), "
      "coalesce((SELECT max(id) FROM jobs), 0) + 1)",
      Params());
  if (!next.ok()) return next.status();
  out.next_id = static_cast<uint64_t>(pg::GetInt(next->get(), 0, 0));
  auto next_timer = NextTimerId();
  if (!next_timer.ok()) return next_timer.status();
  out.next_timer_id = *next_timer;
  return out;
}

// A read of the jobs table, and an insert into it that is rolled back: what
// makes writes fail (a lost privilege, a constraint, a full disk, a lock held
// for long) fails the probe too, and nothing is written.
Status PgStore::Probe() {
  auto r = Read([](PgConn& c) -> Result<PgResult> {
    Status s = c.Exec(
        "BEGIN; SET LOCAL statement_timeout = 2000; SELECT 1 FROM jobs LIMIT 1; "
        "INSERT INTO jobs (shard, id, tube, pri, state, due_ms, due_min, delay_ms, ttr_ms, "
        "created_ms, run_at_ms, reserves, timeouts, releases, buries, kicks, body) VALUES "
        "(0, 0, 'delayd-probe', 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, ''::bytea)");
    Status rolled_back = c.Exec("ROLLBACK");
    if (!s.ok()) return s;
    if (!rolled_back.ok()) return rolled_back;
    return c.Query("SELECT 1::int8");
  });
  return r.status();
}

Result<std::optional<JobRecord>> PgStore::Get(uint64_t id) {
  return First(Rows(Read("get", Params().Int(static_cast<int64_t>(id))), ReadJob));
}

Result<std::optional<JobRecord>> PgStore::GetByKey(const std::string& tube,
                                                   const std::string& key) {
  if (key.empty()) return std::optional<JobRecord>();
  return First(Rows(
      Read("get_by_key", Params().Int(pg::JobShard(0, tube, key, shards_)).Bytes(tube).Bytes(key)),
      ReadJob));
}

Result<std::vector<JobRecord>> PgStore::List(const ListQuery& lq) {
  Params p;
  std::vector<Oid> types;
  std::string sql = Select(kJobColumns, "FROM jobs WHERE id>$1");
  p.Int(static_cast<int64_t>(lq.after_id));
  types.push_back(kInt8);
  auto add = [&](const char* cond, Oid type) {
    types.push_back(type);
    sql += fmt::format(fmt::runtime(cond), types.size());
  };
  if (lq.tube) {
    add(" AND tube=${}", kText);
    p.Bytes(*lq.tube);
  }
  if (lq.state) {  // a literal: the partial index of that state applies (jobs_buried)
    sql += " AND state=" + std::to_string(static_cast<int>(*lq.state));
  }
  if (!lq.key_prefix.empty()) {
    add(" AND substr(key, 1, length(${0})) = ${0}", kBytea);
    p.Bytes(lq.key_prefix);
  }
  if (lq.due_after_ms) {
    add(" AND due_ms>=${}", kInt8);
    p.Int(*lq.due_after_ms);
  }
  if (lq.due_before_ms) {
    add(" AND due_ms<${}", kInt8);
    p.Int(*lq.due_before_ms);
  }
  if (!lq.error_contains.empty()) {
    add(" AND last_error IS NOT NULL AND position(${} in last_error)>0", kBytea);
    p.Bytes(lq.error_contains);
  }
  add(" ORDER BY id LIMIT ${}", kInt8);
  p.Int(static_cast<int64_t>(lq.limit));
  return Rows(Read([&](PgConn& c) { return c.Query(sql, p, types); }), ReadJob);
}

Result<std::vector<ErrorGroup>> PgStore::BuriedByError(const std::optional<std::string>& tube,
                                                       size_t limit) {
  Params p;
  p.Int(static_cast<int64_t>(limit));
  std::vector<Oid> types = {kInt8};
  if (tube) {
    p.Bytes(*tube);
    types.push_back(kText);
  }
  const std::string sql = std::string(
                              "SELECT coalesce(last_error, ''::bytea), count(*), min(id) FROM jobs "
                              "WHERE state = 2") +
                          (tube ? " AND tube = $2" : "") +
                          " GROUP BY 1 ORDER BY 2 DESC, 3 LIMIT $1";
  return Rows(
      Read([&](PgConn& c) { return c.Query(sql, p, types); }), [](const PGresult* r, int row) {
        return ErrorGroup{pg::GetBytes(r, row, 0), static_cast<uint64_t>(pg::GetInt(r, row, 1)),
                          static_cast<uint64_t>(pg::GetInt(r, row, 2))};
      });
}

Result<std::vector<uint64_t>> PgStore::DueCounts(int64_t now_ms, int64_t from_minute,
                                                 int64_t bucket_minutes, size_t buckets,
                                                 const std::optional<std::string>& tube) {
  // As SqliteStore's: the minutes after now's from the index, now's from now on.
  Params p;
  p.Int(DueMinute(now_ms))
      .Int(bucket_minutes)
      .Int(from_minute + bucket_minutes * static_cast<int64_t>(buckets))
      .Int(now_ms)
      .Int(from_minute);
  std::vector<Oid> types = {kInt8, kInt8, kInt8, kInt8, kInt8};
  std::string where = "state = 1";
  if (tube) {
    where += " AND tube = $6";
    p.Bytes(*tube);
    types.push_back(kText);
  }
  const std::string sql =
      "SELECT ($1 - $5) / $2, count(*) FROM jobs WHERE " + where +
      " AND due_min = $1 AND due_ms >= $4 UNION ALL SELECT (due_min - $5) / $2, count(*) FROM jobs "
      "WHERE " +
      where + " AND due_min > $1 AND due_min < $3 GROUP BY 1";
  auto rows =
      Rows(Read([&](PgConn& c) { return c.Query(sql, p, types); }), [](const PGresult* r, int row) {
        return std::pair{pg::GetInt(r, row, 0), pg::GetInt(r, row, 1)};
      });
  if (!rows.ok()) return rows.status();
  std::vector<uint64_t> out(buckets);
  for (auto [b, n] : *rows) {
    if (b >= 0 && b < static_cast<int64_t>(buckets))
      out[static_cast<size_t>(b)] += static_cast<uint64_t>(n);
  }
  return out;
}

Result<std::vector<JobRecord>> PgStore::ScanSet(const std::string& tube, JobSet set, SetKey after,
                                                size_t limit) {
  const char* name = set == JobSet::kBuried      ? "scan_buried"
                     : set == JobSet::kPushReady ? "scan_push"
                                                 : "scan_ready";
  return Rows(Read(name, Params()
                             .Bytes(tube)
                             .Int(static_cast<int64_t>(after.major))
                             .Int(static_cast<int64_t>(after.id))
                             .Int(static_cast<int64_t>(limit))),
              ReadJob);
}

Result<std::vector<JobRecord>> PgStore::LoadMinute(int64_t minute, uint64_t after_id,
                                                   size_t limit) {
  return Rows(Read("load_minute", Params()
                                      .Int(minute)
                                      .Int(static_cast<int64_t>(after_id))
                                      .Int(static_cast<int64_t>(limit))),
              ReadJob);
}

Result<std::vector<JobRecord>> PgStore::FarDelayed(const std::string& tube, int64_t after_minute,
                                                   size_t limit) {
  return Rows(
      Read("far_delayed", Params().Int(after_minute).Bytes(tube).Int(static_cast<int64_t>(limit))),
      ReadJob);
}

// The reads lane's: every node folds, so that the deltas stay about a
// second's worth while any node runs (the database runs one fold at a
// time). Every vacuum_deltas_every folds it made, the store also vacuums
// job_deltas: autovacuum looks at a table once a minute at most, and until
// then the rows folded stay in its pages for every fold and count to pass
// over (5-7 ms a fold after a minute at 2,000 jobs a second). A failure is
// tried again at the next tick; only the first of a run of them is logged.
void PgStore::FoldCounts() {
  auto folded = reads_->Use([](PgConn& c) { return c.Run("fold_counts", Params()); });
  Status s = folded.status();
  if (s.ok() && pg::GetInt(folded->get(), 0, 0) == 1 &&
      ++folds_ % options_.vacuum_deltas_every == 0) {
    s = reads_->Use([](PgConn& c) { return c.Exec("VACUUM job_deltas"); });
  }
  if (!s.ok() && !fold_failing_) {
    spdlog::warn("postgres: folding the job counts: {}", s.message());
  }
  fold_failing_ = !s.ok();
}

// The reads lane's. PostgreSQL plans a prepared statement from the jobs
// table's statistics and size when it is first used, and plans it again
// only when the statistics change (ANALYZE, VACUUM). delayd prepares its
// statements when it starts, often on an empty table, and autovacuum
// analyzes a table only after a tenth of it changed and at most once a
// minute, later still when its workers are busy with larger tables; meanwhile a
// plan that found walking the table cheapest walks it for every use, however
// large it has grown. So the store analyzes the table itself once it holds
// twice the rows its statistics say, and at least options_.analyze_from_rows:
// every session's plans over it are made again, and a backlog that grows
// from nothing is analyzed about log2 of its size times. The hot statements
// are bounded whatever the statistics (kGenericPlans); this covers the rest,
// and the reads lane's plans. Another session analyzing it meanwhile is
// left to finish (SKIP_LOCKED). A user who may not analyze the table
// (neither its owner nor the database's) leaves it to autovacuum.
void PgStore::KeepStatistics() {
  auto grown = reads_->Use(
      [&](PgConn& c) { return c.Run("jobs_grown", Params().Int(options_.analyze_from_rows)); });
  Status s = grown.status();
  if (s.ok() && PQntuples(grown->get()) == 1) {
    const int64_t rows = pg::GetInt(grown->get(), 0, 0);
    s = reads_->Use([](PgConn& c) { return c.Exec("ANALYZE (SKIP_LOCKED) jobs"); });
    if (s.ok()) spdlog::info("postgres: the jobs table grew to about {} rows: analyzed it", rows);
  }
  if (!s.ok() && !statistics_failing_) {
    spdlog::warn("postgres: keeping the jobs table's statistics: {}", s.message());
  }
  statistics_failing_ = !s.ok();
}

Result<std::optional<TimerRecord>> PgStore::GetTimer(uint64_t id) {
  return First(Rows(Read("timer_get", Params().Int(static_cast<int64_t>(id))), ReadTimer));
}

Result<std::optional<TimerRecord>> PgStore::GetTimerByName(const std::string& name) {
  return First(Rows(Read("timer_by_name", Params().Bytes(name)), ReadTimer));
}

Result<std::vector<TimerRecord>> PgStore::ListTimers(uint64_t after_id, size_t limit) {
  return Rows(Read("timers_list",
                   Params().Int(static_cast<int64_t>(after_id)).Int(static_cast<int64_t>(limit))),
              ReadTimer);
}

Result<std::vector<TimerRecord>> PgStore::TimersDue(int64_t from_ms, uint64_t after_id,
                                                    int64_t before_ms, size_t limit) {
  return Rows(Read("timers_due", Params()
                                     .Int(from_ms)
                                     .Int(static_cast<int64_t>(after_id))
                                     .Int(before_ms)
                                     .Int(static_cast<int64_t>(limit))
                                     .Null()),
              ReadTimer);
}

Result<std::vector<TimerFire>> PgStore::TimerFires(uint64_t timer_id, size_t limit) {
  return Rows(Read("timer_fires", Params()
                                      .Int(pg::TimerShard(timer_id, shards_))
                                      .Int(static_cast<int64_t>(timer_id))
                                      .Int(static_cast<int64_t>(limit))),
              [](const PGresult* r, int row) {
                return TimerFire{static_cast<uint64_t>(pg::GetInt(r, row, 0)),
                                 pg::GetInt(r, row, 1),
                                 static_cast<uint64_t>(pg::GetInt(r, row, 2)),
                                 pg::GetBytes(r, row, 3), pg::GetInt(r, row, 4)};
              });
}

Result<uint64_t> PgStore::NextTimerId() {
  auto r = Read("next_timer_id", Params());
  if (!r.ok()) return r.status();
  return static_cast<uint64_t>(pg::GetInt(r->get(), 0, 0));
}

int PgStore::ShardOf(const JobRecord& j) const {
  return pg::JobShard(j.id, j.tube, j.key, shards_);
}

}  // namespace delayd::store
