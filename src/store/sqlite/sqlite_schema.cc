#include "store/sqlite/sqlite_schema.h"

#include <string>
#include <string_view>

#include "store/job_record.h"
#include "store/sqlite/sqlite_db.h"

namespace delayd::store::sqlite {
namespace {

// The SQL below names stored states by these numbers (state=1 is delayed);
// they are on disk, so they never change.
static_assert(static_cast<int>(StoredState::kReady) == 0);
static_assert(static_cast<int>(StoredState::kDelayed) == 1);
static_assert(static_cast<int>(StoredState::kBuried) == 2);
static_assert(static_cast<int>(StoredState::kDone) == 3);

// The schema. `jobs_due` is a partial index over delayed jobs only, keyed by
// due minute then id: ids rise, so each minute is a single insertion front and
// a batch dirties few index pages even when due times arrive in random order.
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  id         INTEGER PRIMARY KEY,
  tube       TEXT    NOT NULL,
  pri        INTEGER NOT NULL,
  state      INTEGER NOT NULL,
  due_ms     INTEGER NOT NULL,
  due_min    INTEGER NOT NULL,
  delay_ms   INTEGER NOT NULL,
  ttr_ms     INTEGER NOT NULL,
  created_ms INTEGER NOT NULL,
  reserves   INTEGER NOT NULL,
  timeouts   INTEGER NOT NULL,
  releases   INTEGER NOT NULL,
  buries     INTEGER NOT NULL,
  kicks      INTEGER NOT NULL,
  body       BLOB    NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_due ON jobs(due_min, id) WHERE state = 1;
CREATE TABLE IF NOT EXISTS tubes (
  name       TEXT PRIMARY KEY,
  pause_ms   INTEGER NOT NULL,
  unpause_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
  key   TEXT PRIMARY KEY,
  value INTEGER NOT NULL
);
)sql";

// Columns added after the first release (0.1.0); a database from then gets
// them on open, with the backfill that gives rows from before their value.
// NULL stands for "none", so plain jobs cost no bytes for them.
struct AddedColumn {
  const char* table;
  const char* column;
  const char* backfill;  // null: none
};
constexpr AddedColumn kAddedColumns[] = {
    {"jobs", "key TEXT", nullptr},
    {"jobs", "spec TEXT", nullptr},
    {"jobs", "attempt_log TEXT", nullptr},
    {"jobs", "last_error TEXT", nullptr},
    {"jobs", "done_ms INTEGER", nullptr},
    {"tubes", "settings TEXT", nullptr},
    {"jobs", "run_at_ms INTEGER", nullptr},
    // 0.4: ready and buried jobs beyond the engine's windows are read back
    // in their order (doc/engine.md, "Windows"): push jobs apart from pull
    // ones (a stored spec with a target is a push job, spec_codec.cc), and
    // buried jobs in bury order, which before was memory's only; rows from
    // before come back in id order, as a restart brought them back then.
    {"jobs", "push INTEGER NOT NULL DEFAULT 0",
     "UPDATE jobs SET push = 1 WHERE spec IS NOT NULL AND CASE WHEN json_valid(spec) THEN "
     "coalesce(json_type(spec, '$.target'), 'null') <> 'null' ELSE 0 END"},
    {"jobs", "bury_seq INTEGER", "UPDATE jobs SET bury_seq = id WHERE state = 2"},
};

// Indexes over the added columns. Done jobs are purged in finish order, so
// `jobs_done` grows at one front like `jobs_due`.
constexpr const char* kIndexes = R"sql(
CREATE UNIQUE INDEX IF NOT EXISTS jobs_key ON jobs(tube, key) WHERE key IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_done ON jobs(done_ms) WHERE state = 3;
-- The console's lists: dead letters, and jobs by their error text, in id
-- order without reading every job (bench/console).
CREATE INDEX IF NOT EXISTS jobs_buried ON jobs(id) WHERE state = 2;
CREATE INDEX IF NOT EXISTS jobs_erred ON jobs(id) WHERE last_error IS NOT NULL;
-- The engine's windows (ScanSet): each tube's ready jobs of either kind in
-- beanstalkd's order, and its buried jobs in bury order.
CREATE INDEX IF NOT EXISTS jobs_ready ON jobs(tube, pri, id) WHERE state = 0 AND push = 0;
CREATE INDEX IF NOT EXISTS jobs_push ON jobs(tube, pri, id) WHERE state = 0 AND push = 1;
CREATE INDEX IF NOT EXISTS jobs_buried_seq ON jobs(tube, bury_seq, id) WHERE state = 2;
)sql";

// Recurring timers and the fires they handled. The primary key of
// timer_fires makes "one fire per fire time" a property of the store too.
constexpr const char* kTimerSchema = R"sql(
CREATE TABLE IF NOT EXISTS timers (
  id           INTEGER PRIMARY KEY,
  name         TEXT    NOT NULL UNIQUE,
  definition   TEXT    NOT NULL,
  next_fire_ms INTEGER NOT NULL,
  last_fire_ms INTEGER NOT NULL,
  created_ms   INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS timers_next ON timers(next_fire_ms) WHERE next_fire_ms > 0;
CREATE TABLE IF NOT EXISTS timer_fires (
  timer_id INTEGER NOT NULL,
  fire_ms  INTEGER NOT NULL,
  job_id   INTEGER NOT NULL,
  outcome  TEXT    NOT NULL,
  at_ms    INTEGER NOT NULL,
  PRIMARY KEY (timer_id, fire_ms)
) WITHOUT ROWID;
)sql";

Status AddMissingColumns(sqlite3* db) {
  for (const auto& [table, column, backfill] : kAddedColumns) {
    std::string name(column, std::string_view(column).find(' '));
    Stmt q;
    Status s = q.Prepare(db, std::string("SELECT 1 FROM pragma_table_info('") + table +
                                 "') WHERE name='" + name + "'");
    if (!s.ok()) return s;
    bool present = false;
    while (q.Step(&s)) present = true;
    if (!s.ok()) return s;
    if (!present) {
      s = Exec(db, (std::string("ALTER TABLE ") + table + " ADD COLUMN " + column).c_str());
      if (s.ok() && backfill != nullptr) s = Exec(db, backfill);
      if (!s.ok()) return s;
    }
  }
  return Status::Ok();
}

}  // namespace

// One transaction: a column is never added without its backfill.
Status MakeSchema(sqlite3* db) {
  Status s = Exec(db, "BEGIN IMMEDIATE");
  if (!s.ok()) return s;
  s = Exec(db, kSchema);
  if (s.ok()) s = AddMissingColumns(db);
  if (s.ok()) s = Exec(db, kIndexes);
  if (s.ok()) s = Exec(db, kTimerSchema);
  if (s.ok()) return Exec(db, "COMMIT");
  (void)Exec(db, "ROLLBACK");
  return s;
}

}  // namespace delayd::store::sqlite
