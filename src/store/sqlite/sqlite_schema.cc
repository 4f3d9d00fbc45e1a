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
// them on open. NULL stands for "none", so plain jobs cost no bytes for them.
constexpr const char* kAddedColumns[][2] = {
    {"jobs", "key TEXT"},          {"jobs", "spec TEXT"},       {"jobs", "attempt_log TEXT"},
    {"jobs", "last_error TEXT"},   {"jobs", "done_ms INTEGER"}, {"tubes", "settings TEXT"},
    {"jobs", "run_at_ms INTEGER"},
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
  for (const auto& [table, column] : kAddedColumns) {
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
      if (!s.ok()) return s;
    }
  }
  return Status::Ok();
}

}  // namespace

Status MakeSchema(sqlite3* db) {
  Status s = Exec(db, kSchema);
  if (s.ok()) s = AddMissingColumns(db);
  if (s.ok()) s = Exec(db, kIndexes);
  if (s.ok()) s = Exec(db, kTimerSchema);
  return s;
}

}  // namespace delayd::store::sqlite
