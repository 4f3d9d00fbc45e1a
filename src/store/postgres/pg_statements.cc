#include "store/postgres/pg_statements.h"

#include <fmt/format.h>

#include <iterator>
#include <string_view>

#include "store/job_record.h"
#include "store/postgres/pg_rows.h"
#include "store/postgres/pg_schema.h"

namespace delayd::store::pg {
namespace {

// Done jobs removed per purge statement, so a purge never holds the writer long.
constexpr int64_t kPurgeChunk = 20'000;

// Ready jobs of a tube read for its oldest one's due time (count_jobs).
constexpr int64_t kOldestReadyScan = 1'000;

// "a, b" as "t.a, t.b".
std::string Qualified(std::string_view columns, std::string_view table) {
  std::string out;
  while (!columns.empty()) {
    const size_t comma = columns.find(", ");
    if (!out.empty()) out += ", ";
    fmt::format_to(std::back_inserter(out), "{}.{}", table, columns.substr(0, comma));
    columns = comma == std::string_view::npos ? std::string_view() : columns.substr(comma + 2);
  }
  return out;
}

// The leases a fenced write requires: every shard of $1 held by node $2 at
// the epoch of the same index of $3 (`h.held`: all of them, else the write
// changes nothing). The batch locked each shard's advisory lock shared
// before this statement began (lock_leases), so what it reads is the lease
// as it stands until the commit: a new owner's take needs the lock
// exclusive and passes the shard by meanwhile, and a take that committed
// before the lock was granted is seen here, and the write refused. (Until
// 2026-11-26 the write locked the lease rows FOR KEY SHARE: a WAL record a
// row and transaction, 92 bytes a due job.) The write's statement
// then reports one row when every fence held (none: refused) and
// announces the tubes it made ready. One statement serves every shard an
// owner holds: one per shard cost the writer a statement per due job, since
// jobs due within a millisecond rarely share one of 256 shards
// (doc/cluster.md).
constexpr const char* kFence =
    "WITH f AS (SELECT shard FROM shard_leases WHERE owner=$2 AND (shard, epoch) IN (SELECT * "
    "FROM unnest($1::int8[], $3::int8[]))), h AS (SELECT count(*) = "
    "cardinality($1::int8[]) AS held FROM f), ";
// The notices of the rows `p` made ready (those of `p`'s rows that `ready`,
// a condition on them, holds for); the statement that follows names `n`
// and `m`, which PostgreSQL evaluates only if named.
std::string ReadyNotices(const char* ready) {
  return fmt::format(
      ", n AS (SELECT pg_notify('delayd_ready', t.tube) FROM (SELECT DISTINCT tube FROM p WHERE "
      "push=0 AND {0}) t), m AS (SELECT pg_notify('delayd_push', t.shard || ' ' || t.tube) FROM "
      "(SELECT DISTINCT shard, tube FROM p WHERE push=1 AND {0}) t) ",
      ready);
}
constexpr const char* kNoticesSent = "(SELECT count(*) FROM n) + (SELECT count(*) FROM m) >= 0";
const std::string kFenceEnd =
    ReadyNotices("true") + fmt::format("SELECT 1 FROM h WHERE held AND {}", kNoticesSent);

// The promotion (change::PromoteDue). $4, $5: each due job's shard and id;
// $6: now; $7, $8: how many pull jobs of each tube to reserve for this
// node's waiters (claim_for). `d` reads the due rows, each found by its
// primary key: with `j.shard=ANY($1)` on the table rather than the array,
// PostgreSQL 15's generic plan found each through jobs_due with only its
// id, a scan of that whole index per job (0.7 ms a promotion of 3 jobs
// among 50k delayed ones; bench/postgres's cost lines). Both `d` and `p`
// test `state+0=1`, which the partial index jobs_due (WHERE state=1)
// cannot serve: with `state=1`, statistics taken while few jobs were
// delayed (an idle hour, a drained backlog) made jobs_due look one row
// long, and a plan scanned all of it in every promotion once a burst of
// delayed jobs came (2.3 ms a promotion, 628 us of PostgreSQL's CPU a job
// in one run of bench/postgres against 282 in the next). Both also name
// the ids as `j.id=ANY($5)`, a condition on the key whatever the join
// order: a plan made while the table looked empty walked the whole key
// and joined each row (kGenericPlans). `r` ranks them per
// tube as a claim orders them and marks `mine` the best of each tube
// waited for and not paused. `p` checks again that each row is still due
// and delayed: a row another transaction changed since `d` read it is
// read again as that one left it (PostgreSQL's READ COMMITTED), and left
// alone when it no longer is. Rows are not locked in `d` (FOR UPDATE):
// a lock is a WAL record per row before its update's. The statement
// returns the rows reserved, or, when every fence held and none was, one
// row of NULLs: no row at all is the refusal (kFence).
std::string PromoteSql() {
  return fmt::format(
      "{}d AS (SELECT j.shard, j.id, j.tube, j.pri, j.push FROM jobs j JOIN unnest($4::int8[], "
      "$5::int8[]) AS u(shard, id) ON (j.shard, j.id)=(u.shard, u.id) WHERE u.shard=ANY($1) "
      "AND j.id=ANY($5) AND j.state+0=1 AND j.due_ms<=$6 AND (SELECT held FROM h)), "
      "w AS (SELECT t.tube, t.n FROM unnest($7::text[], $8::int8[]) AS t(tube, n) WHERE NOT "
      "EXISTS (SELECT 1 FROM tubes z WHERE z.name=t.tube AND z.unpause_ms>$6)), "
      "r AS (SELECT d.shard, d.id, d.push=0 AND w.n IS NOT NULL AND row_number() OVER (PARTITION "
      "BY d.tube, d.push ORDER BY d.pri, d.id) <= w.n AS mine FROM d LEFT JOIN w ON "
      "w.tube=d.tube), "
      "p AS (UPDATE jobs j SET state=CASE WHEN r.mine THEN 4 ELSE 0 END, ver=j.ver+1, "
      "reserved_by=CASE WHEN r.mine THEN $2 END, deadline_ms=CASE WHEN r.mine THEN $6+j.ttr_ms "
      "END, reserves=j.reserves+CASE WHEN r.mine THEN 1 ELSE 0 END FROM r WHERE (j.shard, "
      "j.id)=(r.shard, r.id) AND j.id=ANY($5) AND j.state+0=1 AND j.due_ms<=$6 RETURNING r.mine, "
      "j.shard, {})"
      "{}SELECT {} FROM h LEFT JOIN (SELECT * FROM p WHERE mine) q ON true WHERE h.held AND {}",
      kFence, Qualified(kJobColumns, "j"), ReadyNotices("NOT mine"), Qualified(kJobColumns, "q"),
      kNoticesSent);
}

// A claim: the best ready jobs of the tubes ($3), at most $4; per tube in
// the claim order of its index, skipping rows another node is claiming,
// then the best of those over all the tubes. A tube paused at $2 is left
// out: a pause committed through any node holds every claim made after it.
// Consumers claim pull jobs (`push` 0, jobs_ready) of any shard ($5 NULL);
// an owner claims push jobs (`push` 1, jobs_push) of its shards.
// The update finds the rows chosen by their ids, an array computed once
// before it (ids are unique), rather than by a join with the choice: a
// plan made while the table looked empty walked the whole table and
// joined each row (kGenericPlans).
std::string ClaimSql(int push) {
  return fmt::format(
      "UPDATE jobs j SET state=4, ver=j.ver+1, reserved_by=$1, "
      "deadline_ms=$2+j.ttr_ms, reserves=j.reserves+1 "
      "WHERE j.id=ANY(ARRAY(SELECT c.id FROM unnest($3::text[]) AS t(name) "
      "CROSS JOIN LATERAL (SELECT id, pri FROM jobs WHERE state=0 AND push={} AND "
      "tube=t.name AND ($5::int8[] IS NULL OR shard=ANY($5)) AND NOT EXISTS (SELECT 1 FROM "
      "tubes p WHERE p.name=t.name AND p.unpause_ms>$2) ORDER BY pri, id "
      "LIMIT $4 FOR UPDATE SKIP LOCKED) c "
      "ORDER BY c.pri, c.id LIMIT $4)) RETURNING {}",
      push, Qualified(kJobColumns, "j"));
}

// A count of job_counts's rows where `which`.
std::string Sum(std::string_view which) {
  return fmt::format("coalesce(sum(n) FILTER (WHERE {}), 0)::int8", which);
}

// The due time of the longest-waiting job among a tube's first
// kOldestReadyScan ready ones (pull: jobs_ready, push: jobs_push).
std::string OldestReady(int push) {
  return fmt::format(
      "(SELECT min(due_ms) FROM (SELECT due_ms FROM jobs WHERE state=0 AND push={} AND "
      "tube=c.tube ORDER BY pri, id LIMIT {}) r)",
      push, kOldestReadyScan);
}

}  // namespace

std::string Select(const char* columns, const char* rest) {
  return fmt::format("SELECT {} {}", columns, rest);
}

std::vector<Statement> Statements() {
  const std::vector<Oid> job_types(std::begin(kJobTypes), std::end(kJobTypes));
  std::vector<Oid> job_array_types;
  for (Oid t : kJobTypes) {
    job_array_types.push_back(t == kInt8   ? pg::kInt8Array
                              : t == kText ? pg::kTextArray
                                           : pg::kByteaArray);
  }
  // A change raises the row's version; $27, when not NULL, is the version
  // the row must have (a guarded change).
  std::vector<Oid> change_types = job_types;
  change_types.insert(change_types.end(), {kText, kInt8, kInt8});
  const char* update_set =
      "pri=$4, state=$5, due_ms=$6, due_min=$7, delay_ms=$8, ttr_ms=$9, done_ms=$11, "
      "reserves=$13, timeouts=$14, releases=$15, buries=$16, kicks=$17, "
      "attempt_log=$20, last_error=$21, bury_seq=$24, ver=ver+1, reserved_by=$25, "
      "deadline_ms=$26";
  const char* guard = "($27::int8 IS NULL OR ver=$27)";
  return {
      // Many rows, each parameter an array of one column (Columns).
      {"insert",
       "INSERT INTO jobs (shard, id, tube, pri, state, due_ms, due_min, delay_ms, ttr_ms, "
       "created_ms, done_ms, run_at_ms, reserves, timeouts, releases, buries, kicks, key, spec, "
       "attempt_log, last_error, body, push, bury_seq) SELECT * FROM unnest($1, $2, $3, $4, $5, "
       "$6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, "
       "$24)",
       job_array_types},
      // Every field but body, key and spec (JobFields, some unused).
      {"update", fmt::format("UPDATE jobs SET {} WHERE id=$2 AND {}", update_set, guard),
       change_types},
      {"replace",
       fmt::format("UPDATE jobs SET {}, shard=$1, tube=$3, run_at_ms=$12, key=$18, spec=$19, "
                   "body=$22, push=$23 WHERE id=$2 AND {}",
                   update_set, guard),
       change_types},
      // Jobs by id ($1), each only on its version (the same index of $2)
      // when that is not NULL; the ids deleted come back (Batcher::Delete).
      // `id=ANY` finds each through the primary key (id, shard): a join with unnest($1, $2)
      // was planned as a scan of the table (4 ms a statement).
      {"delete",
       "DELETE FROM jobs j WHERE j.id=ANY($1::int8[]) AND coalesce(j.ver=($2::int8[])"
       "[array_position($1::int8[], j.id)], true) RETURNING j.id",
       {pg::kInt8Array, pg::kInt8Array}},
      // Cluster mode: the fenced writes of a shard's owner (kFence).
      {"promote",
       PromoteSql(),
       {pg::kInt8Array, kText, pg::kInt8Array, pg::kInt8Array, pg::kInt8Array, kInt8,
        pg::kTextArray, pg::kInt8Array}},
      // $4: reservations whose deadline is before it (jobs_held, per shard).
      {"requeue",
       fmt::format("{}p AS (UPDATE jobs SET state=0, ver=ver+1, reserved_by=NULL, "
                   "deadline_ms=NULL, timeouts=timeouts+1 WHERE shard=ANY($1) AND state=4 AND "
                   "deadline_ms<$4 AND (SELECT held FROM h) RETURNING shard, tube, push){}",
                   kFence, kFenceEnd),
       {pg::kInt8Array, kText, pg::kInt8Array, kInt8}},
      // Claims (ClaimSql).
      {"claim", ClaimSql(0), {kText, kInt8, pg::kTextArray, kInt8, pg::kInt8Array}},
      {"claim_push", ClaimSql(1), {kText, kInt8, pg::kTextArray, kInt8, pg::kInt8Array}},
      // The tubes with ready push jobs in the shards $1: what a new owner
      // claims for (jobs_push).
      {"push_tubes",
       "SELECT DISTINCT tube FROM jobs WHERE state=0 AND push=1 AND shard=ANY($1) ORDER BY tube",
       {pg::kInt8Array}},
      // An owner's load (DueQuery), on jobs_due: the window of every shard
      // is scanned once for all the shards asked for.
      {"due_of_shards",
       "SELECT shard::int8, id, due_ms FROM jobs WHERE state=1 AND (due_min, id) > "
       "($2, $3) AND due_min<=$4 AND shard=ANY($1) ORDER BY due_min, id LIMIT $5",
       {pg::kInt8Array, kInt8, kInt8, kInt8, kInt8}},
      // A block of $1 ids after every id handed out or stored.
      {"take_ids",
       "INSERT INTO meta (key, value) VALUES ('next_id', coalesce((SELECT max(id) FROM jobs), "
       "0) + 1 + $1) ON CONFLICT (key) DO UPDATE SET value=greatest(meta.value, "
       "coalesce((SELECT max(id) FROM jobs), 0) + 1) + $1 RETURNING value - $1",
       {kInt8}},
      // A notice on channel $1 per tube of $2.
      {"notify_tubes",
       "SELECT pg_notify($1, t) FROM unnest($2::text[]) AS t",
       {kText, pg::kTextArray}},
      {"notify_due", "SELECT pg_notify('delayd_due', $1)", {kText}},
      {"pause",
       "INSERT INTO tubes (name, pause_ms, unpause_ms) VALUES ($1, $2, $3) ON CONFLICT (name) "
       "DO UPDATE SET pause_ms=excluded.pause_ms, unpause_ms=excluded.unpause_ms",
       {kText, kInt8, kInt8}},
      {"settings",
       "INSERT INTO tubes (name, pause_ms, unpause_ms, settings) VALUES ($1, 0, 0, $2) "
       "ON CONFLICT (name) DO UPDATE SET settings=excluded.settings",
       {kText, kBytea}},
      // The ids as an array, so that each is found through the primary key:
      // `id IN (SELECT ...)` was planned as a hash join over a scan of the
      // whole table.
      {"purge",
       fmt::format("DELETE FROM jobs WHERE id=ANY(ARRAY(SELECT id FROM jobs WHERE state=3 AND "
                   "done_ms<$1 ORDER BY done_ms LIMIT {}))",
                   kPurgeChunk),
       {kInt8}},
      {"set_next",
       "INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET "
       "value=greatest(meta.value, excluded.value)",
       {kText, kInt8}},
      {"timer_put",
       "INSERT INTO timers (shard, id, name, definition, next_fire_ms, last_fire_ms, created_ms) "
       "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (shard, id) DO UPDATE SET "
       "name=excluded.name, definition=excluded.definition, next_fire_ms=excluded.next_fire_ms, "
       "last_fire_ms=excluded.last_fire_ms",
       {kInt8, kInt8, kBytea, kBytea, kInt8, kInt8, kInt8}},
      {"timer_delete_fires",
       "DELETE FROM timer_fires WHERE shard=$1 AND timer_id=$2",
       {kInt8, kInt8}},
      {"timer_delete", "DELETE FROM timers WHERE shard=$1 AND id=$2", {kInt8, kInt8}},
      {"timer_advance",
       "UPDATE timers SET next_fire_ms=$3, last_fire_ms=$4 WHERE shard=$1 AND id=$2",
       {kInt8, kInt8, kInt8, kInt8}},
      // Cluster mode: the lease an owner's write requires (as kFence, after
      // lock_leases), checked on its own before a write whose own failure
      // must read differently (a timer's advance: the timer may be gone). A
      // row when it holds.
      {"fence",
       "SELECT 1 FROM shard_leases WHERE shard=$1 AND owner=$2 AND epoch=$3",
       {kInt8, kText, kInt8}},
      {"fire_insert",
       "INSERT INTO timer_fires (shard, timer_id, fire_ms, job_id, outcome, at_ms) "
       "VALUES ($1, $2, $3, $4, $5, $6)",
       {kInt8, kInt8, kInt8, kInt8, kBytea, kInt8}},
      {"fire_prune",
       fmt::format("DELETE FROM timer_fires WHERE shard=$1 AND timer_id=$2 AND fire_ms < "
                   "(SELECT fire_ms FROM timer_fires WHERE shard=$1 AND timer_id=$2 "
                   "ORDER BY fire_ms DESC LIMIT 1 OFFSET {})",
                   kTimerFiresKept - 1),
       {kInt8, kInt8}},
      // The syncer's commit: synchronous, and writing a row ($1), since only a
      // transaction that wrote to the WAL waits for its flush. It reads the writer's
      // latest visible commit number ($2).
      // The syncer's commit, which must write to wait for the WAL's flush,
      // and whether the writer's session ($2: its pid, $3: its start in µs)
      // is still on this server (PgStore::Sync).
      {"sync",
       "INSERT INTO meta (key, value) VALUES ($1, 1) ON CONFLICT (key) DO UPDATE SET "
       "value=meta.value+1 RETURNING (SELECT count(*) FROM pg_stat_activity WHERE pid=$2 AND "
       "(extract(epoch FROM backend_start) * 1000000)::int8=$3)",
       {kText, kInt8, kInt8}},
      {"get", Select(kJobColumns, "FROM jobs WHERE id=$1"), {kInt8}},
      // The shards a batch's fenced writes name, each advisory lock taken
      // shared (kShardLockClass) in a statement before theirs, so that they
      // read the leases as of after the lock. Shared locks never wait for
      // each other, and a take only tries for the exclusive one.
      {"lock_leases",
       fmt::format("SELECT pg_advisory_xact_lock_shared({}, s::int4) FROM (SELECT DISTINCT s "
                   "FROM unnest($1::int8[]) AS u(s) ORDER BY s) o",
                   kShardLockClass),
       {pg::kInt8Array}},
      {"best_ready",
       Select(kJobColumns,
              "FROM jobs WHERE state=0 AND push=0 AND tube=$1 ORDER BY pri, id LIMIT 1"),
       {kText}},
      // Counts per tube: job_counts plus the deltas not folded into it yet
      // (migration 7); the oldest ready job's due time among the first
      // kOldestReadyScan of each index in claim order, so that a backlog
      // is never read whole.
      {"count_jobs",
       fmt::format(
           "SELECT tube, {}, {}, {}, {}, {}, CASE WHEN sum(n) FILTER (WHERE state=0) > 0 THEN "
           "coalesce(least({}, {}), 0) ELSE 0 END FROM (SELECT tube, state, urgent, n FROM "
           "job_counts UNION ALL SELECT tube, state, urgent, n FROM job_deltas) c WHERE "
           "$1::text IS NULL OR tube=$1 GROUP BY tube HAVING sum(n) <> 0 ORDER BY tube",
           Sum("state=0"), Sum("state=0 AND urgent"), Sum("state=1"), Sum("state=4"),
           Sum("state=2"), OldestReady(0), OldestReady(1)),
       {kText}},
      // 1 when this call folded, 0 when another fold was running.
      {"fold_counts", "SELECT delayd_fold_counts()::int::int8", {}},
      // The live rows of jobs, when they are at least twice what its
      // statistics say and at least $1, and this session may analyze it
      // (PgStore::KeepStatistics; else ANALYZE is a warning and a no-op):
      // it has the privileges of the table's owner or the database's.
      {"jobs_grown",
       "SELECT s.n_live_tup FROM pg_class c JOIN pg_stat_user_tables s ON s.relid=c.oid WHERE "
       "c.oid='jobs'::regclass AND s.n_live_tup>=greatest(2*greatest(c.reltuples, 0), $1) AND "
       "(pg_has_role(c.relowner, 'USAGE') OR pg_has_role((SELECT datdba FROM pg_database WHERE "
       "datname=current_database()), 'USAGE'))",
       {kInt8}},
      {"tubes",
       "SELECT name, pause_ms, unpause_ms, settings FROM tubes WHERE $1::text IS NULL OR name=$1",
       {kText}},
      {"get_by_key",
       Select(kJobColumns, "FROM jobs WHERE shard=$1 AND tube=$2 AND key=$3"),
       {kInt8, kText, kBytea}},
      // A node of its own's windows (Store::ScanSet): a tube's ready jobs
      // of one kind in claim order (jobs_ready, jobs_push), or its buried
      // ones in bury order (jobs_buried_seq), after the key ($2, $3), at
      // most $4. One row comparison on the index's columns: the scan starts
      // at the key.
      {"scan_ready",
       Select(kJobColumns,
              "FROM jobs WHERE tube=$1 AND state=0 AND push=0 AND (pri, id) > ($2, $3) ORDER BY "
              "pri, id LIMIT $4"),
       {kText, kInt8, kInt8, kInt8}},
      {"scan_push",
       Select(kJobColumns,
              "FROM jobs WHERE tube=$1 AND state=0 AND push=1 AND (pri, id) > ($2, $3) ORDER BY "
              "pri, id LIMIT $4"),
       {kText, kInt8, kInt8, kInt8}},
      {"scan_buried",
       Select(kJobColumns,
              "FROM jobs WHERE tube=$1 AND state=2 AND (bury_seq, id) > ($2, $3) ORDER BY "
              "bury_seq, id LIMIT $4"),
       {kText, kInt8, kInt8, kInt8}},
      {"load_minute",
       Select(kJobColumns, "FROM jobs WHERE state=1 AND due_min=$1 AND id>$2 ORDER BY id LIMIT $3"),
       {kInt8, kInt8, kInt8}},
      {"far_delayed",
       Select(kJobColumns,
              "FROM jobs WHERE state=1 AND due_min>$1 AND tube=$2 ORDER BY due_ms, id LIMIT $3"),
       {kInt8, kText, kInt8}},
      {"timer_get", Select(kTimerColumns, "FROM timers WHERE id=$1"), {kInt8}},
      {"timer_by_name", Select(kTimerColumns, "FROM timers WHERE name=$1"), {kBytea}},
      {"timers_list",
       Select(kTimerColumns, "FROM timers WHERE id>$1 ORDER BY id LIMIT $2"),
       {kInt8, kInt8}},
      // $5: the shards of an owner; NULL: every shard.
      {"timers_due",
       Select(kTimerColumns,
              "FROM timers WHERE next_fire_ms>0 AND next_fire_ms<$3 AND (next_fire_ms, id) > "
              "($1, $2) AND ($5::int8[] IS NULL OR shard=ANY($5)) ORDER BY next_fire_ms, id "
              "LIMIT $4"),
       {kInt8, kInt8, kInt8, kInt8, pg::kInt8Array}},
      // A timer id no node was handed: after every stored one, and raised
      // for the next (a timer's put raises it too, in its batch).
      {"take_timer_id",
       "INSERT INTO meta (key, value) VALUES ('next_timer_id', coalesce((SELECT max(id) FROM "
       "timers), 0) + 2) ON CONFLICT (key) DO UPDATE SET value=greatest(meta.value, "
       "coalesce((SELECT max(id) FROM timers), 0) + 1) + 1 RETURNING value - 1",
       {}},
      {"timer_fires",
       "SELECT timer_id, fire_ms, job_id, outcome, at_ms FROM timer_fires WHERE shard=$1 AND "
       "timer_id=$2 ORDER BY fire_ms DESC LIMIT $3",
       {kInt8, kInt8, kInt8}},
      {"next_timer_id",
       "SELECT greatest(coalesce((SELECT value FROM meta WHERE key='next_timer_id'), 1), "
       "coalesce((SELECT max(id) FROM timers), 0) + 1)",
       {}},
  };
}

}  // namespace delayd::store::pg
