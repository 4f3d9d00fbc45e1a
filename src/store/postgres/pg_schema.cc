#include "store/postgres/pg_schema.h"

#include <fmt/format.h>

#include <iterator>
#include <string>

namespace delayd::store::pg {
namespace {

// Each migration, in order; migration i brings the schema to version i + 1.
// Never edit one that has shipped: add the next.
//
// Version 1. Columns are as in the SQLite store (store/job_record.h gives
// their meaning). Bytes a client chose (body, key, spec, errors, timer name
// and definition) are bytea, so they come back byte for byte whatever their
// encoding. `shard` leads the primary keys, so a distributed PostgreSQL can
// distribute the tables by it; `jobs_id` finds a job by id alone (until
// version 9, whose key of jobs leads with id). The
// due-time index is over delayed jobs only, keyed by due minute then id, as
// on SQLite: each minute is one insertion front.
constexpr const char* kMigrations[] = {
    R"sql(
CREATE TABLE meta (
  key   text PRIMARY KEY,
  value bigint NOT NULL
);
CREATE TABLE jobs (
  shard       smallint NOT NULL,
  id          bigint   NOT NULL,
  tube        text     NOT NULL,
  pri         bigint   NOT NULL,
  state       smallint NOT NULL,
  due_ms      bigint   NOT NULL,
  due_min     bigint   NOT NULL,
  delay_ms    bigint   NOT NULL,
  ttr_ms      bigint   NOT NULL,
  created_ms  bigint   NOT NULL,
  done_ms     bigint,
  run_at_ms   bigint   NOT NULL,
  reserves    bigint   NOT NULL,
  timeouts    bigint   NOT NULL,
  releases    bigint   NOT NULL,
  buries      bigint   NOT NULL,
  kicks       bigint   NOT NULL,
  key         bytea,
  spec        bytea,
  attempt_log bytea,
  last_error  bytea,
  body        bytea    NOT NULL,
  PRIMARY KEY (shard, id)
);
CREATE INDEX jobs_id ON jobs (id);
CREATE UNIQUE INDEX jobs_key ON jobs (shard, tube, key) WHERE key IS NOT NULL;
CREATE INDEX jobs_due ON jobs (due_min, id) WHERE state = 1;
CREATE INDEX jobs_done ON jobs (done_ms) WHERE state = 3;
CREATE TABLE tubes (
  name       text   PRIMARY KEY,
  pause_ms   bigint NOT NULL,
  unpause_ms bigint NOT NULL,
  settings   bytea
);
CREATE TABLE timers (
  shard        smallint NOT NULL,
  id           bigint   NOT NULL,
  name         bytea    NOT NULL UNIQUE,
  definition   bytea    NOT NULL,
  next_fire_ms bigint   NOT NULL,
  last_fire_ms bigint   NOT NULL,
  created_ms   bigint   NOT NULL,
  PRIMARY KEY (shard, id)
);
CREATE INDEX timers_id ON timers (id);
CREATE INDEX timers_next ON timers (next_fire_ms, id) WHERE next_fire_ms > 0;
CREATE TABLE timer_fires (
  shard    smallint NOT NULL,
  timer_id bigint   NOT NULL,
  fire_ms  bigint   NOT NULL,
  job_id   bigint   NOT NULL,
  outcome  bytea    NOT NULL,
  at_ms    bigint   NOT NULL,
  PRIMARY KEY (shard, timer_id, fire_ms)
);
)sql",
    // Version 2: the nodes of a cluster and the lease of each shard
    // (doc/cluster.md). Lease times are PostgreSQL's clock, never a node's.
    // A shard's epoch rises with every change of its owner; it starts free.
    R"sql(
CREATE TABLE nodes (
  id         text        PRIMARY KEY,
  started_at timestamptz NOT NULL DEFAULT now(),
  seen_at    timestamptz NOT NULL,
  beanstalk  text,
  http       text,
  figures    jsonb
);
CREATE TABLE shard_leases (
  shard      smallint    PRIMARY KEY,
  owner      text,
  epoch      bigint      NOT NULL,
  expires_at timestamptz NOT NULL
);
INSERT INTO shard_leases (shard, owner, epoch, expires_at)
  SELECT s, NULL, 0, '-infinity'
  FROM generate_series(0, (SELECT value FROM meta WHERE key = 'shards') - 1) AS s;
)sql",
    // Version 3: the queue of cluster mode (doc/cluster.md). Every change of
    // a row raises its version, so a node can require that nobody changed it
    // since it read it; a claimed job is state 4, held by a node until a
    // deadline. jobs_ready is the claim order (beanstalkd's: priority, then
    // id) per tube; jobs_held finds a shard's reservations by deadline.
    R"sql(
ALTER TABLE jobs ADD COLUMN ver bigint NOT NULL DEFAULT 0,
                 ADD COLUMN reserved_by text,
                 ADD COLUMN deadline_ms bigint;
CREATE INDEX jobs_ready ON jobs (tube, pri, id) WHERE state = 0;
CREATE INDEX jobs_held ON jobs (shard, deadline_ms) WHERE state = 4;
)sql",
    // Version 4: push jobs are delivered by the owner of their shard and
    // never claimed by consumers (doc/cluster.md, "Push jobs on their
    // shard's owner"), so the ready index is split: consumers' claims walk
    // jobs_ready, owners' claims jobs_push.
    R"sql(
ALTER TABLE jobs ADD COLUMN push smallint NOT NULL DEFAULT 0;
DROP INDEX jobs_ready;
CREATE INDEX jobs_ready ON jobs (tube, pri, id) WHERE state = 0 AND push = 0;
CREATE INDEX jobs_push ON jobs (tube, pri, id) WHERE state = 0 AND push = 1;
)sql",
    // Version 5: the console's lists, dead letters and jobs by their error
    // text, in id order without reading every job (bench/console).
    R"sql(
CREATE INDEX jobs_buried ON jobs (id) WHERE state = 2;
CREATE INDEX jobs_erred ON jobs (id) WHERE last_error IS NOT NULL;
)sql",
    // Version 6: the jobs of each tube and state, kept by the statements
    // that change them, so that stats never count the jobs table
    // (doc/cluster.md, "Counts"). A statement-level trigger adds what each
    // statement changed to the rows of its own session (`slot`): no two
    // sessions write one row, so counting never waits on a lock or
    // deadlocks, and a rolled-back or lost transaction takes its deltas
    // with it. The counts are the sums over the slots; delayd_fold_counts
    // folds the rows of ended sessions into slot ''. Done jobs (state 3)
    // are not counted; `urgent`: ready with a priority below 1024.
    R"sql(
CREATE TABLE job_counts (
  slot   text     NOT NULL,
  tube   text     NOT NULL,
  state  smallint NOT NULL,
  urgent boolean  NOT NULL,
  n      bigint   NOT NULL,
  PRIMARY KEY (slot, tube, state, urgent)
);
CREATE FUNCTION delayd_session(pid integer, started timestamptz) RETURNS text
  LANGUAGE sql IMMUTABLE AS $f$
  SELECT pid::text || '/' || (extract(epoch FROM started) * 1000000)::int8::text
$f$;
CREATE FUNCTION delayd_count_jobs() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE
  s text := current_setting('delayd.count_slot', true);
  tubes text[];
  states smallint[];
  urgents boolean[];
  ns bigint[];
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT array_agg(tube), array_agg(state), array_agg(urgent), array_agg(n)
      INTO tubes, states, urgents, ns FROM (
        SELECT tube, state, state = 0 AND pri < 1024 AS urgent, count(*) AS n FROM new_rows
        WHERE state <> 3 GROUP BY 1, 2, 3) d;
  ELSIF TG_OP = 'DELETE' THEN
    SELECT array_agg(tube), array_agg(state), array_agg(urgent), array_agg(n)
      INTO tubes, states, urgents, ns FROM (
        SELECT tube, state, state = 0 AND pri < 1024 AS urgent, -count(*) AS n FROM old_rows
        WHERE state <> 3 GROUP BY 1, 2, 3) d;
  ELSE
    SELECT array_agg(tube), array_agg(state), array_agg(urgent), array_agg(n)
      INTO tubes, states, urgents, ns FROM (
        SELECT tube, state, urgent, sum(x) AS n FROM (
          SELECT tube, state, state = 0 AND pri < 1024 AS urgent, 1 AS x FROM new_rows
          UNION ALL
          SELECT tube, state, state = 0 AND pri < 1024, -1 FROM old_rows) c
        WHERE state <> 3 GROUP BY 1, 2, 3 HAVING sum(x) <> 0) d;
  END IF;
  IF tubes IS NULL THEN
    RETURN NULL;
  END IF;
  IF s IS NULL OR s = '' THEN
    SELECT delayd_session(a.pid, a.backend_start) INTO s FROM pg_stat_activity a
      WHERE a.pid = pg_backend_pid();
    PERFORM set_config('delayd.count_slot', s, false);
  END IF;
  -- An update of the rows there are, then an insert of the rest: an
  -- upsert alone also writes a lock record per row (half again the WAL).
  WITH d AS (SELECT * FROM unnest(tubes, states, urgents, ns) AS d(tube, state, urgent, n)),
  u AS (UPDATE job_counts c SET n = c.n + d.n FROM d
        WHERE (c.slot, c.tube, c.state, c.urgent) = (s, d.tube, d.state, d.urgent)
        RETURNING c.tube, c.state, c.urgent)
  INSERT INTO job_counts AS c
    SELECT s, d.tube, d.state, d.urgent, d.n FROM d WHERE NOT EXISTS (
      SELECT 1 FROM u WHERE (u.tube, u.state, u.urgent) = (d.tube, d.state, d.urgent))
    ON CONFLICT (slot, tube, state, urgent) DO UPDATE SET n = c.n + excluded.n;
  RETURN NULL;
END
$f$;
CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION delayd_count_jobs();
CREATE TRIGGER job_counts_update AFTER UPDATE ON jobs
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION delayd_count_jobs();
CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION delayd_count_jobs();
CREATE FUNCTION delayd_fold_counts() RETURNS void LANGUAGE plpgsql AS $f$
BEGIN
  -- One fold at a time ("delayd" 2; Migrate's lock is "delayd" 1).
  IF NOT pg_try_advisory_xact_lock(7234307542344794114) THEN
    RETURN;
  END IF;
  -- A row locked is a session's that is still writing (whatever
  -- pg_stat_activity shows a role that may not see it): left for the next
  -- fold, so that a fold never waits for a session, nor deadlocks with one.
  WITH gone AS (
    DELETE FROM job_counts c WHERE c.ctid IN (
      SELECT ctid FROM job_counts o WHERE o.slot <> '' AND NOT EXISTS (
        SELECT 1 FROM pg_stat_activity a WHERE delayd_session(a.pid, a.backend_start) = o.slot)
      FOR UPDATE SKIP LOCKED)
    RETURNING tube, state, urgent, n)
  INSERT INTO job_counts AS c
    SELECT '', tube, state, urgent, sum(n) FROM gone GROUP BY 2, 3, 4 ORDER BY 2, 3, 4
    ON CONFLICT (slot, tube, state, urgent) DO UPDATE SET n = c.n + excluded.n;
  DELETE FROM job_counts WHERE slot = '' AND n = 0;
END
$f$;
INSERT INTO job_counts
  SELECT '', tube, state, state = 0 AND pri < 1024, count(*) FROM jobs
  WHERE state <> 3 GROUP BY 2, 3, 4;
)sql",
    // Version 7: each statement's counts appended as deltas, not added to
    // rows in place (doc/cluster.md, "Counts"). Version 6's trigger updated
    // its session's few rows thousands of times a second, each update a
    // new row version the next one walked past: about 100 us of PostgreSQL
    // CPU a job (bench/postgres). Now the trigger appends to job_deltas,
    // which has no index and no row anyone updates, and delayd_fold_counts
    // (every node, every second, one at a time) moves them into
    // job_counts, one row per tube, state and urgency. A count is the sum
    // of both tables. Writers held off (SHARE) while the rows of version
    // 6's sessions are summed, so that none is written after.
    R"sql(
LOCK TABLE jobs IN SHARE MODE;
CREATE TABLE job_deltas (
  tube   text     NOT NULL,
  state  smallint NOT NULL,
  urgent boolean  NOT NULL,
  n      bigint   NOT NULL
);
CREATE OR REPLACE FUNCTION delayd_count_jobs() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO job_deltas
      SELECT tube, state, state = 0 AND pri < 1024, count(*) FROM new_rows
      WHERE state <> 3 GROUP BY 1, 2, 3;
  ELSIF TG_OP = 'DELETE' THEN
    INSERT INTO job_deltas
      SELECT tube, state, state = 0 AND pri < 1024, -count(*) FROM old_rows
      WHERE state <> 3 GROUP BY 1, 2, 3;
  ELSE
    INSERT INTO job_deltas
      SELECT tube, state, urgent, sum(x) FROM (
        SELECT tube, state, state = 0 AND pri < 1024 AS urgent, 1 AS x FROM new_rows
        UNION ALL
        SELECT tube, state, state = 0 AND pri < 1024, -1 FROM old_rows) c
      WHERE state <> 3 GROUP BY 1, 2, 3 HAVING sum(x) <> 0;
  END IF;
  RETURN NULL;
END
$f$;
-- TRUNCATE fires no row or statement trigger of the others: it empties the counts.
CREATE FUNCTION delayd_truncate_counts() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  DELETE FROM job_deltas;
  DELETE FROM job_counts;
  RETURN NULL;
END
$f$;
CREATE TRIGGER job_counts_truncate AFTER TRUNCATE ON jobs
  FOR EACH STATEMENT EXECUTE FUNCTION delayd_truncate_counts();
ALTER TABLE job_counts RENAME TO job_counts_6;
CREATE TABLE job_counts (
  tube   text     NOT NULL,
  state  smallint NOT NULL,
  urgent boolean  NOT NULL,
  n      bigint   NOT NULL,
  PRIMARY KEY (tube, state, urgent)
);
INSERT INTO job_counts
  SELECT tube, state, urgent, sum(n) FROM job_counts_6 GROUP BY 1, 2, 3 HAVING sum(n) <> 0;
DROP TABLE job_counts_6;
DROP FUNCTION delayd_fold_counts();
DROP FUNCTION delayd_session(integer, timestamptz);
CREATE FUNCTION delayd_fold_counts() RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
  -- One fold at a time ("delayd" 2; Migrate's lock is "delayd" 1); the
  -- others skip it (false). Deltas committed after this statement began
  -- are left for the next fold. Lost in a crash, a fold is lost whole, so
  -- it need not wait for its commit to reach the disk.
  IF NOT pg_try_advisory_xact_lock(7234307542344794114) THEN
    RETURN false;
  END IF;
  PERFORM set_config('synchronous_commit', 'off', true);
  WITH gone AS (DELETE FROM job_deltas RETURNING tube, state, urgent, n)
  INSERT INTO job_counts AS c
    SELECT tube, state, urgent, sum(n) FROM gone GROUP BY 1, 2, 3 HAVING sum(n) <> 0
    ON CONFLICT (tube, state, urgent) DO UPDATE SET n = c.n + excluded.n;
  DELETE FROM job_counts WHERE n = 0;
  RETURN true;
END
$f$;
)sql",
    // Version 8: jobs rewritten with the columns a state change writes
    // first and room on each page for the row's next version. An update
    // that is not HOT (every state change: `state` is in the partial
    // indexes' predicates) logs its new row version whole, except that a
    // version on the same page as the old one logs only what lies between
    // their common prefix and common suffix. Versions 3 and 4 had appended
    // ver, reserved_by, deadline_ms and push after the body, so a claim
    // logged the row from `state` to its end (268 bytes for a 64-byte
    // body), and 40 % of the claims found no room on the page and logged
    // it all (299 bytes, and a lock record before it). Now a claim logs
    // state to reserved_by (126 bytes), and fillfactor 70 keeps most new
    // versions on their page: WAL of 4 serial consumers draining one
    // --cluster node fell from 723 to 563 bytes a job (bench/cluster-wal).
    // Columns are copied by name; no statement of delayd depends on their
    // order. The counts stay: the rows are the same.
    R"sql(
LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE;
ALTER TABLE jobs RENAME TO jobs_7;
ALTER INDEX jobs_pkey RENAME TO jobs_7_pkey;
CREATE TABLE jobs (
  shard       smallint NOT NULL,
  push        smallint NOT NULL DEFAULT 0,
  id          bigint   NOT NULL,
  state       smallint NOT NULL,
  ver         bigint   NOT NULL DEFAULT 0,
  reserves    bigint   NOT NULL,
  deadline_ms bigint,
  reserved_by text,
  tube        text     NOT NULL,
  pri         bigint   NOT NULL,
  due_ms      bigint   NOT NULL,
  due_min     bigint   NOT NULL,
  delay_ms    bigint   NOT NULL,
  ttr_ms      bigint   NOT NULL,
  created_ms  bigint   NOT NULL,
  done_ms     bigint,
  run_at_ms   bigint   NOT NULL,
  timeouts    bigint   NOT NULL,
  releases    bigint   NOT NULL,
  buries      bigint   NOT NULL,
  kicks       bigint   NOT NULL,
  key         bytea,
  spec        bytea,
  attempt_log bytea,
  last_error  bytea,
  body        bytea    NOT NULL
) WITH (fillfactor = 70);
INSERT INTO jobs (shard, push, id, state, ver, reserves, deadline_ms, reserved_by, tube, pri,
                  due_ms, due_min, delay_ms, ttr_ms, created_ms, done_ms, run_at_ms, timeouts,
                  releases, buries, kicks, key, spec, attempt_log, last_error, body)
  SELECT shard, push, id, state, ver, reserves, deadline_ms, reserved_by, tube, pri,
         due_ms, due_min, delay_ms, ttr_ms, created_ms, done_ms, run_at_ms, timeouts,
         releases, buries, kicks, key, spec, attempt_log, last_error, body FROM jobs_7;
DROP TABLE jobs_7;
ALTER TABLE jobs ADD PRIMARY KEY (shard, id);
CREATE INDEX jobs_id ON jobs (id);
CREATE UNIQUE INDEX jobs_key ON jobs (shard, tube, key) WHERE key IS NOT NULL;
CREATE INDEX jobs_due ON jobs (due_min, id) WHERE state = 1;
CREATE INDEX jobs_done ON jobs (done_ms) WHERE state = 3;
CREATE INDEX jobs_ready ON jobs (tube, pri, id) WHERE state = 0 AND push = 0;
CREATE INDEX jobs_push ON jobs (tube, pri, id) WHERE state = 0 AND push = 1;
CREATE INDEX jobs_held ON jobs (shard, deadline_ms) WHERE state = 4;
CREATE INDEX jobs_buried ON jobs (id) WHERE state = 2;
CREATE INDEX jobs_erred ON jobs (id) WHERE last_error IS NOT NULL;
CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION delayd_count_jobs();
CREATE TRIGGER job_counts_update AFTER UPDATE ON jobs
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION delayd_count_jobs();
CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION delayd_count_jobs();
CREATE TRIGGER job_counts_truncate AFTER TRUNCATE ON jobs
  FOR EACH STATEMENT EXECUTE FUNCTION delayd_truncate_counts();
ANALYZE jobs;
)sql",
    // Version 9. One index of jobs finds a job by id: the primary key is
    // (id, shard) instead of (shard, id) beside `jobs_id` (id). Every row
    // version a state change writes (put, promotion, claim, release) had
    // an entry in both, since no state change is a HOT update; now it has
    // one (doc/store.md). No statement walks the key by shard alone: an
    // owner's work by shard goes through jobs_due, jobs_held and jobs_push,
    // and a lookup by (shard, id) is one probe of the new key. `shard`
    // stays in the key, so a distributed PostgreSQL can still distribute
    // jobs by it (doc/cluster.md).
    // Also: each node says how it fences its writes. `fencing` 2: by the
    // shard's advisory lock (kShardLockClass); NULL: a node of an older
    // build, which locks lease rows and whose takes would not wait for an
    // advisory lock, so nodes of this build take no shard while one lives
    // (pg_leases.cc). An older build no longer starts on this schema.
    R"sql(
LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE;
ALTER TABLE jobs DROP CONSTRAINT jobs_pkey;
DROP INDEX jobs_id;
ALTER TABLE jobs ADD PRIMARY KEY (id, shard);
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS fencing smallint;
)sql",
    // Version 10: job_deltas is UNLOGGED. Its rows were a fifth of a due
    // job's WAL (1.5 rows a job inserted, then deleted by the fold: about
    // 210 bytes a job of bench/cluster-wal's due phase); they live a second
    // at most, until a fold moves them into job_counts, which is logged. A
    // crash of the server empties an unlogged table, and a promoted standby
    // has it empty, which would lose the deltas not folded yet; so the table
    // holds a mark (state -1, n 0: no count changes by it), and a fold that
    // finds no mark counts the jobs again. It locks job_deltas EXCLUSIVE
    // first, which waits for every transaction that appended (each holds
    // ROW EXCLUSIVE until it ends) and holds off the next, so that every
    // change is counted once: in the count, or in a delta appended after
    // it. That recount reads the whole table once after a crash; nothing
    // else changes. TRUNCATE keeps the mark.
    R"sql(
LOCK TABLE jobs IN SHARE MODE;
ALTER TABLE job_deltas SET UNLOGGED;
INSERT INTO job_deltas SELECT '', -1, false, 0
  WHERE NOT EXISTS (SELECT 1 FROM job_deltas WHERE state = -1);
CREATE OR REPLACE FUNCTION delayd_fold_counts() RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
  -- One fold at a time ("delayd" 2; Migrate's lock is "delayd" 1); the
  -- others skip it (false). Deltas committed after this statement began
  -- are left for the next fold. Lost in a crash, a fold is lost whole
  -- with the deltas, so it need not wait for its commit to reach the disk.
  IF NOT pg_try_advisory_xact_lock(7234307542344794114) THEN
    RETURN false;
  END IF;
  PERFORM set_config('synchronous_commit', 'off', true);
  IF NOT EXISTS (SELECT 1 FROM job_deltas WHERE state = -1) THEN
    -- Each statement below reads the database as of after this lock.
    LOCK TABLE job_deltas IN EXCLUSIVE MODE;
    DELETE FROM job_deltas;
    DELETE FROM job_counts;
    INSERT INTO job_counts
      SELECT tube, state, state = 0 AND pri < 1024, count(*) FROM jobs
      WHERE state <> 3 GROUP BY 1, 2, 3;
    INSERT INTO job_deltas VALUES ('', -1, false, 0);
    RETURN true;
  END IF;
  WITH gone AS (DELETE FROM job_deltas WHERE state <> -1 RETURNING tube, state, urgent, n)
  INSERT INTO job_counts AS c
    SELECT tube, state, urgent, sum(n) FROM gone GROUP BY 1, 2, 3 HAVING sum(n) <> 0
    ON CONFLICT (tube, state, urgent) DO UPDATE SET n = c.n + excluded.n;
  DELETE FROM job_counts WHERE n = 0;
  RETURN true;
END
$f$;
CREATE OR REPLACE FUNCTION delayd_truncate_counts() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  DELETE FROM job_deltas WHERE state <> -1;
  DELETE FROM job_counts;
  RETURN NULL;
END
$f$;
)sql",
    // Version 11: a node of its own keeps each tube's ready and buried jobs
    // in memory only up to a window and reads the rest back in order
    // (Store::ScanSet; doc/engine.md, "Windows"), as on SQLite. Ready jobs
    // are read through jobs_ready and jobs_push; buried ones in the order
    // they were buried, which `bury_seq` keeps (the engine's count, as on
    // SQLite), through jobs_buried_seq. A job buried before this version
    // is placed by its id, as recovery ordered them then.
    R"sql(
ALTER TABLE jobs ADD COLUMN bury_seq bigint;
UPDATE jobs SET bury_seq = id WHERE state = 2;
CREATE INDEX jobs_buried_seq ON jobs (tube, bury_seq, id) WHERE state = 2;
)sql",
};

// A fixed hash (FNV-1a, 64 bits): shards are stored, so it never changes.
uint64_t Fnv1a(std::string_view a, std::string_view b) {
  uint64_t h = 14695981039346656037ull;
  auto add = [&](std::string_view s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ull;
    }
  };
  add(a);
  add(std::string_view("\n", 1));  // no tube name holds a newline
  add(b);
  return h;
}

// The one-row result of `sql` as an integer; `fallback` when it has no row.
Result<int64_t> Scalar(PgConn& conn, const char* sql, int64_t fallback) {
  auto r = conn.Query(sql);
  if (!r.ok()) return r.status();
  if (PQntuples(r->get()) == 0 || PQgetisnull(r->get(), 0, 0)) return fallback;
  return GetInt(r->get(), 0, 0);
}

// Any number that is this schema's own: the advisory lock's key.
constexpr int64_t kMigrationLock = 0x64656c6179640001;  // "delayd" 1

}  // namespace

int SchemaVersion() { return static_cast<int>(std::size(kMigrations)); }

Status Migrate(PgConn& conn, int shards, int* shards_out) {
  Status s = conn.Exec(
      "CREATE TABLE IF NOT EXISTS delayd_schema (version integer PRIMARY KEY, "
      "applied_at timestamptz NOT NULL DEFAULT now())");
  // Two nodes creating the table at once: the loser's unique violation is harmless.
  if (!s.ok() && s.code() != StatusCode::kConflict) return s;
  for (;;) {
    s = conn.Exec(fmt::format("BEGIN; SELECT pg_advisory_xact_lock({})", kMigrationLock));
    if (!s.ok()) return s;
    auto version = Scalar(conn, "SELECT max(version)::int8 FROM delayd_schema", 0);
    if (!version.ok()) {
      (void)conn.Exec("ROLLBACK");
      return version.status();
    }
    if (*version > SchemaVersion()) {
      (void)conn.Exec("ROLLBACK");
      return Status::InvalidArgument(
          fmt::format("postgres: the database has schema version {}, newer than this delayd's "
                      "{}: run the delayd that wrote it, or a newer one",
                      *version, SchemaVersion()));
    }
    if (*version == SchemaVersion()) {
      s = conn.Exec("COMMIT");
      break;
    }
    s = conn.Exec(kMigrations[*version]);
    if (s.ok() && *version == 0) {
      s = conn.Exec(fmt::format("INSERT INTO meta (key, value) VALUES ('shards', {})", shards));
    }
    if (s.ok()) {
      s = conn.Exec(
          fmt::format("INSERT INTO delayd_schema (version) VALUES ({}); COMMIT", *version + 1));
    }
    if (!s.ok()) {
      (void)conn.Exec("ROLLBACK");
      return s;
    }
  }
  if (!s.ok()) return s;
  auto n = Scalar(conn, "SELECT value FROM meta WHERE key = 'shards'", 0);
  if (!n.ok()) return n.status();
  if (*n <= 0 || *n > 32767) {
    return Status::IoError(fmt::format("postgres: the database's shard count {} is invalid", *n));
  }
  *shards_out = static_cast<int>(*n);
  return Status::Ok();
}

int JobShard(uint64_t id, std::string_view tube, std::string_view key, int shards) {
  const uint64_t n = static_cast<uint64_t>(shards);
  return static_cast<int>(key.empty() ? id % n : Fnv1a(tube, key) % n);
}

int TimerShard(uint64_t id, int shards) {
  return static_cast<int>(id % static_cast<uint64_t>(shards));
}

}  // namespace delayd::store::pg
