#include "store/sqlite/sqlite_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>
#include <optional>
#include <string_view>
#include <tuple>
#include <utility>

#include "common/overloaded.h"
#include "common/thread_name.h"
#include "store/sqlite/sqlite_checkpointer.h"
#include "store/sqlite/sqlite_db.h"
#include "store/sqlite/sqlite_schema.h"

namespace delayd::store {

using sqlite::Checkpointer;
using sqlite::Exec;
using sqlite::MakeSchema;
using sqlite::OpenDb;
using sqlite::SqlError;
using sqlite::Stmt;
using sqlite::StoreError;

namespace {

constexpr const char* kTimerColumns =
    "id, name, definition, next_fire_ms, last_fire_ms, created_ms";

constexpr const char* kJobColumns =
    "id, tube, pri, state, due_ms, delay_ms, ttr_ms, created_ms, reserves, timeouts, releases, "
    "buries, kicks, body, key, spec, attempt_log, last_error, done_ms, run_at_ms, bury_seq";

// Done jobs removed per purge statement, so a purge never holds the writer long.
constexpr int64_t kPurgeChunk = 20'000;

// Binds the five counters to parameters first .. first + 4.
void BindCounters(Stmt& st, int first, const JobCounters& c) {
  st.Bind(first, c.reserves);
  st.Bind(first + 1, c.timeouts);
  st.Bind(first + 2, c.releases);
  st.Bind(first + 3, c.buries);
  st.Bind(first + 4, c.kicks);
}

std::string ColumnText(sqlite3_stmt* s, int i) {
  const unsigned char* text = sqlite3_column_text(s, i);
  if (text == nullptr) return {};
  return {reinterpret_cast<const char*>(text), static_cast<size_t>(sqlite3_column_bytes(s, i))};
}

// Binds the mutable fields of `j` in the order of kUpdateSet, from `first`
// (2), and the two added later, at 22 and 23.
void BindMutable(Stmt& st, int first, const JobRecord& j) {
  st.Bind(first, j.priority);
  st.Bind(first + 1, static_cast<int64_t>(j.state));
  st.Bind(first + 2, j.due_ms);
  st.Bind(first + 3, DueMinute(j.due_ms));
  st.Bind(first + 4, j.delay_ms);
  st.Bind(first + 5, j.ttr_ms);
  BindCounters(st, first + 6, j.counters);
  st.BindOptional(first + 11, j.attempt_log);
  st.BindOptional(first + 12, j.last_error);
  if (j.state == StoredState::kDone) {
    st.Bind(first + 13, j.done_ms);
  } else {
    sqlite3_bind_null(st.get(), first + 13);
  }
  st.Bind(22, int64_t{j.push ? 1 : 0});
  if (j.state == StoredState::kBuried) {
    st.Bind(23, static_cast<int64_t>(j.bury_seq));
  } else {
    sqlite3_bind_null(st.get(), 23);
  }
}
constexpr const char* kUpdateSet =
    "pri=?2, state=?3, due_ms=?4, due_min=?5, delay_ms=?6, ttr_ms=?7, reserves=?8, timeouts=?9, "
    "releases=?10, buries=?11, kicks=?12, attempt_log=?13, last_error=?14, done_ms=?15, push=?22, "
    "bury_seq=?23";

JobRecord ReadJob(sqlite3_stmt* s) {
  JobRecord j;
  j.id = static_cast<uint64_t>(sqlite3_column_int64(s, 0));
  j.tube.assign(reinterpret_cast<const char*>(sqlite3_column_text(s, 1)),
                static_cast<size_t>(sqlite3_column_bytes(s, 1)));
  j.priority = static_cast<uint32_t>(sqlite3_column_int64(s, 2));
  j.state = static_cast<StoredState>(sqlite3_column_int(s, 3));
  j.due_ms = sqlite3_column_int64(s, 4);
  j.delay_ms = sqlite3_column_int64(s, 5);
  j.ttr_ms = sqlite3_column_int64(s, 6);
  j.created_ms = sqlite3_column_int64(s, 7);
  j.counters.reserves = static_cast<uint32_t>(sqlite3_column_int64(s, 8));
  j.counters.timeouts = static_cast<uint32_t>(sqlite3_column_int64(s, 9));
  j.counters.releases = static_cast<uint32_t>(sqlite3_column_int64(s, 10));
  j.counters.buries = static_cast<uint32_t>(sqlite3_column_int64(s, 11));
  j.counters.kicks = static_cast<uint32_t>(sqlite3_column_int64(s, 12));
  const void* body = sqlite3_column_blob(s, 13);
  j.body.assign(static_cast<const char*>(body ? body : ""),
                static_cast<size_t>(sqlite3_column_bytes(s, 13)));
  j.key = ColumnText(s, 14);
  j.spec = ColumnText(s, 15);
  j.attempt_log = ColumnText(s, 16);
  j.last_error = ColumnText(s, 17);
  j.done_ms = sqlite3_column_int64(s, 18);
  j.run_at_ms = sqlite3_column_int64(s, 19);
  j.bury_seq = static_cast<uint64_t>(sqlite3_column_int64(s, 20));
  return j;
}

TimerRecord ReadTimer(sqlite3_stmt* s) {
  TimerRecord t;
  t.id = static_cast<uint64_t>(sqlite3_column_int64(s, 0));
  t.name = ColumnText(s, 1);
  t.definition = ColumnText(s, 2);
  t.next_fire_ms = sqlite3_column_int64(s, 3);
  t.last_fire_ms = sqlite3_column_int64(s, 4);
  t.created_ms = sqlite3_column_int64(s, 5);
  return t;
}

// Steps a bound query to its end, collecting its rows read by `read`; room
// is made for `expected` rows at once (a page's limit), so that a large
// page's rows are not moved as it grows.
template <typename Read>
auto ReadRows(Stmt& q, Read read, size_t expected = 0)
    -> Result<std::vector<decltype(read(q.get()))>> {
  Status status;
  std::vector<decltype(read(q.get()))> out;
  out.reserve(expected);
  while (q.Step(&status)) out.push_back(read(q.get()));
  if (!status.ok()) return status;
  return out;
}

Result<std::vector<TimerRecord>> ReadTimers(Stmt& q) { return ReadRows(q, ReadTimer); }
Result<std::vector<JobRecord>> ReadJobs(Stmt& q, size_t expected = 0) {
  return ReadRows(q, ReadJob, expected);
}

}  // namespace

// The prepared statements of one connection.
class SqliteStore::Statements {
 public:
  Stmt insert, update, replace, remove, pause, settings, purge, set_next_id;  // writer
  Stmt timer_put, timer_delete, timer_delete_fires, timer_advance, fire_insert, fire_prune,
      set_next_timer_id;                           // writer
  Stmt get, get_by_key, load_minute, far_delayed;  // reader
  // Reader, the engine's windows: a set's rows after a key (major, id) are
  // read as those of the same major after the id, then those of greater
  // majors. (A row value `(pri, id) > (?, ?)` would seek on pri only and
  // step over every row of that priority before the id: a backlog's jobs
  // in memory, hundreds of thousands of them.) Each set has statements of
  // its own, by JobSet, with `push` written out: bound as a parameter it
  // would choose between two partial indexes, and SQLite would prepare the
  // statement again at every run.
  Stmt scan_at[kJobSets], scan_after[kJobSets];

  Status PrepareWriter(sqlite3* db) {
    Status s = insert.Prepare(
        db,
        "INSERT INTO jobs (id, tube, pri, state, due_ms, due_min, delay_ms, ttr_ms, reserves, "
        "timeouts, releases, buries, kicks, attempt_log, last_error, done_ms, created_ms, "
        "key, spec, body, run_at_ms, push, bury_seq) VALUES (?1,?16,?2,?3,?4,?5,?6,?7,?8,?9,?10,"
        "?11,?12,?13,?14,?15,?17,?18,?19,?20,?21,?22,?23)");
    if (s.ok())
      s = update.Prepare(db, std::string("UPDATE jobs SET ") + kUpdateSet + " WHERE id=?1");
    if (s.ok())
      s = replace.Prepare(db, std::string("UPDATE jobs SET ") + kUpdateSet +
                                  ", key=?18, spec=?19, body=?20, run_at_ms=?21 WHERE id=?1");
    if (s.ok()) s = remove.Prepare(db, "DELETE FROM jobs WHERE id=?");
    if (s.ok())
      s = pause.Prepare(db,
                        "INSERT INTO tubes (name, pause_ms, unpause_ms) VALUES (?,?,?) "
                        "ON CONFLICT(name) DO UPDATE SET pause_ms=excluded.pause_ms, "
                        "unpause_ms=excluded.unpause_ms");
    if (s.ok())
      s = settings.Prepare(db,
                           "INSERT INTO tubes (name, pause_ms, unpause_ms, settings) "
                           "VALUES (?1, 0, 0, ?2) ON CONFLICT(name) DO UPDATE SET settings=?2");
    if (s.ok())
      s = purge.Prepare(db,
                        "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE state=3 AND "
                        "done_ms<? ORDER BY done_ms LIMIT " +
                            std::to_string(kPurgeChunk) + ")");
    if (s.ok())
      s = set_next_id.Prepare(db, "INSERT OR REPLACE INTO meta (key, value) VALUES ('next_id', ?)");
    if (s.ok())
      s = timer_put.Prepare(
          db,
          "INSERT INTO timers (id, name, definition, next_fire_ms, last_fire_ms, created_ms) "
          "VALUES (?1,?2,?3,?4,?5,?6) ON CONFLICT(id) DO UPDATE SET name=?2, definition=?3, "
          "next_fire_ms=?4, last_fire_ms=?5");
    if (s.ok()) s = timer_delete.Prepare(db, "DELETE FROM timers WHERE id=?");
    if (s.ok()) s = timer_delete_fires.Prepare(db, "DELETE FROM timer_fires WHERE timer_id=?");
    if (s.ok())
      s = timer_advance.Prepare(db,
                                "UPDATE timers SET next_fire_ms=?2, last_fire_ms=?3 WHERE id=?1");
    if (s.ok())
      s = fire_insert.Prepare(db,
                              "INSERT INTO timer_fires (timer_id, fire_ms, job_id, outcome, at_ms) "
                              "VALUES (?,?,?,?,?)");
    if (s.ok())
      s = fire_prune.Prepare(db,
                             "DELETE FROM timer_fires WHERE timer_id=?1 AND fire_ms < (SELECT "
                             "fire_ms FROM timer_fires WHERE timer_id=?1 ORDER BY fire_ms DESC "
                             "LIMIT 1 OFFSET " +
                                 std::to_string(kTimerFiresKept - 1) + ")");
    if (s.ok())
      s = set_next_timer_id.Prepare(db,
                                    "INSERT INTO meta (key, value) VALUES ('next_timer_id', ?1) "
                                    "ON CONFLICT(key) DO UPDATE SET value=max(value, ?1)");
    return s;
  }
  Status PrepareReader(sqlite3* db) {
    Status s = get.Prepare(db, std::string("SELECT ") + kJobColumns + " FROM jobs WHERE id=?");
    if (s.ok())
      s = get_by_key.Prepare(
          db, std::string("SELECT ") + kJobColumns + " FROM jobs WHERE tube=? AND key=?");
    if (s.ok())
      s = load_minute.Prepare(db, std::string("SELECT ") + kJobColumns +
                                      " FROM jobs WHERE state=1 AND due_min=? AND id>? "
                                      "ORDER BY id LIMIT ?");
    if (s.ok())
      s = far_delayed.Prepare(db, std::string("SELECT ") + kJobColumns +
                                      " FROM jobs WHERE state=1 AND due_min>? AND tube=? "
                                      "ORDER BY due_ms, id LIMIT ?");
    const std::string select = std::string("SELECT ") + kJobColumns + " FROM jobs WHERE tube=?1";
    for (auto [set, where, major] : {std::tuple{JobSet::kReady, " AND state=0 AND push=0", "pri"},
                                     {JobSet::kPushReady, " AND state=0 AND push=1", "pri"},
                                     {JobSet::kBuried, " AND state=2", "bury_seq"}}) {
      const std::string rows = select + where + " AND " + major;
      const int i = static_cast<int>(set);
      if (s.ok()) s = scan_at[i].Prepare(db, rows + "=?3 AND id>?4 ORDER BY id LIMIT ?5");
      if (s.ok()) s = scan_after[i].Prepare(db, rows + ">?3 ORDER BY " + major + ", id LIMIT ?5");
    }
    return s;
  }

  // SqliteStore::ScanSet on this connection (a reader's).
  Result<std::vector<JobRecord>> ScanSet(const std::string& tube, JobSet set, SetKey after,
                                         size_t limit) {
    const int i = static_cast<int>(set);
    std::vector<JobRecord> out;
    for (Stmt* q : {&scan_at[i], &scan_after[i]}) {
      if (out.size() >= limit) break;
      q->Bind(1, tube);
      q->Bind(3, static_cast<int64_t>(after.major));
      q->Bind(4, static_cast<int64_t>(after.id));
      q->Bind(5, static_cast<int64_t>(limit - out.size()));
      auto rows = ReadJobs(*q, limit - out.size());
      if (!rows.ok()) return rows.status();
      if (out.empty()) {
        out = std::move(*rows);
      } else {
        std::move(rows->begin(), rows->end(), std::back_inserter(out));
      }
    }
    return out;
  }
};

SqliteStore::SqliteStore(SqliteOptions options, Executor executor)
    : options_(std::move(options)),
      executor_(executor),
      queue_(*this,
             {.max_batch = options_.max_batch,
              .sync_delay_ms = options_.sync_delay_ms,
              .writer_nice = options_.writer_nice},
             std::move(executor)) {}

Result<std::unique_ptr<SqliteStore>> SqliteStore::Open(SqliteOptions options, Executor executor) {
  std::unique_ptr<SqliteStore> store(new SqliteStore(std::move(options), std::move(executor)));
  Status s = OpenDb(store->options_.path, store->options_.write_cache_kib, &store->write_db_);
  if (s.ok()) s = MakeSchema(store->write_db_);
  // A damaged file shows up here rather than at the first write.
  if (s.ok()) s = Exec(store->write_db_, "SELECT count(*) FROM meta");
  if (s.ok()) s = OpenDb(store->options_.path, store->options_.read_cache_kib, &store->read_db_);
  if (s.ok()) s = OpenDb(store->options_.path, store->options_.read_cache_kib, &store->ahead_db_);
  if (!s.ok()) return s;
  store->write_stmts_ = std::make_unique<Statements>();
  store->read_stmts_ = std::make_unique<Statements>();
  store->ahead_stmts_ = std::make_unique<Statements>();
  s = store->write_stmts_->PrepareWriter(store->write_db_);
  if (s.ok()) s = store->read_stmts_->PrepareReader(store->read_db_);
  if (s.ok()) s = store->ahead_stmts_->PrepareReader(store->ahead_db_);
  if (!s.ok()) return s;
  store->ahead_thread_ =
      StartNamedThread("sqlite-ahead", [raw = store.get()] { raw->AheadLoop(); });
  store->log_path_ = std::string(sqlite3_db_filename(store->write_db_, "main")) + "-wal";
  // A VFS may read URI parameters after a name: end it with several NULs.
  store->log_name_ = store->log_path_ + std::string(4, '\0');
  auto checkpointer = Checkpointer::Start(store->options_.path);
  if (!checkpointer.ok()) return checkpointer.status();
  store->checkpointer_ = std::move(checkpointer).value();
  sqlite3_wal_hook(store->write_db_, &Checkpointer::Hook, store->checkpointer_.get());
  store->queue_.Start();
  return store;
}

SqliteStore::~SqliteStore() {
  Close();
  write_stmts_.reset();
  read_stmts_.reset();
  ahead_stmts_.reset();
  checkpointer_.reset();
  sqlite3_close(ahead_db_);
  sqlite3_close(read_db_);
  sqlite3_close(write_db_);  // the last connection: checkpoints all, removes the log
}

Result<Recovered> SqliteStore::Recover(int64_t horizon_minute) {
  Recovered r;
  Status status;
  // Two plain scans of the table, each in rowid order. Through the
  // due-minute index, every far row cost a lookup of its tube in the table:
  // 2.5 s of a 2.7 s restart with 1M far jobs. One scan reading whole rows
  // for both purposes decoded every column of every far row: 6.3 s with
  // 10M. These two take 1.7 s and 2.1 s (this 2-core machine).
  {
    // Delayed through the horizon: read whole.
    Stmt q;
    Status s = q.Prepare(read_db_, std::string("SELECT ") + kJobColumns +
                                       " FROM jobs NOT INDEXED WHERE state=1 AND due_min<=? "
                                       "ORDER BY id");
    if (!s.ok()) return s;
    q.Bind(1, horizon_minute);
    while (q.Step(&status)) r.jobs.push_back(ReadJob(q.get()));
    if (!status.ok()) return status;
  }
  {
    // Ready and buried: counted per tube and set; the engine reads the
    // windows it keeps (ScanSet). A count is a walk of the set's index.
    Stmt q;
    Status s = q.Prepare(read_db_,
                         "SELECT tube, state, push, count(*), sum(pri < 1024), max(bury_seq) "
                         "FROM jobs WHERE state IN (0, 2) GROUP BY tube, state, push");
    if (!s.ok()) return s;
    while (q.Step(&status)) {
      const bool buried = sqlite3_column_int(q.get(), 1) == 2;
      SetCount c;
      c.tube = ColumnText(q.get(), 0);
      c.set = buried                                ? JobSet::kBuried
              : sqlite3_column_int(q.get(), 2) != 0 ? JobSet::kPushReady
                                                    : JobSet::kReady;
      c.jobs = static_cast<uint64_t>(sqlite3_column_int64(q.get(), 3));
      c.urgent = buried ? 0 : static_cast<uint64_t>(sqlite3_column_int64(q.get(), 4));
      r.max_bury_seq =
          std::max(r.max_bury_seq, static_cast<uint64_t>(sqlite3_column_int64(q.get(), 5)));
      r.sets.push_back(std::move(c));
    }
    if (!status.ok()) return status;
  }
  {
    // Delayed beyond the horizon: they stay in the store, counted per tube
    // and due hour. Rows come in id order, mostly in runs of one tube.
    Stmt q;
    Status s = q.Prepare(read_db_,
                         "SELECT tube, due_min FROM jobs NOT INDEXED WHERE state=1 AND due_min>?");
    if (!s.ok()) return s;
    q.Bind(1, horizon_minute);
    std::map<std::string, std::map<int64_t, uint64_t>, std::less<>> far;
    auto last = far.end();
    while (q.Step(&status)) {
      std::string_view tube(reinterpret_cast<const char*>(sqlite3_column_text(q.get(), 0)),
                            static_cast<size_t>(sqlite3_column_bytes(q.get(), 0)));
      if (last == far.end() || last->first != tube) {
        last = far.find(tube);
        if (last == far.end()) last = far.try_emplace(std::string(tube)).first;
      }
      ++last->second[DueHourOfMinute(sqlite3_column_int64(q.get(), 1))];
    }
    if (!status.ok()) return status;
    for (auto& [tube, hours] : far) {
      for (auto [hour, n] : hours) r.far.push_back({tube, hour, n});
    }
  }
  {
    Stmt q;
    Status s = q.Prepare(read_db_, "SELECT name, pause_ms, unpause_ms, settings FROM tubes");
    if (!s.ok()) return s;
    while (q.Step(&status)) {
      std::string name = ColumnText(q.get(), 0);
      if (sqlite3_column_int64(q.get(), 1) > 0) {
        r.pauses.push_back(
            {name, sqlite3_column_int64(q.get(), 1), sqlite3_column_int64(q.get(), 2)});
      }
      std::string settings = ColumnText(q.get(), 3);
      if (!settings.empty()) r.settings.push_back({name, std::move(settings)});
    }
    if (!status.ok()) return status;
  }
  {
    Stmt q;
    Status s = q.Prepare(read_db_,
                         "SELECT max(coalesce((SELECT value FROM meta WHERE key='next_id'), 1), "
                         "coalesce((SELECT max(id) FROM jobs), 0) + 1)");
    if (!s.ok()) return s;
    if (q.Step(&status)) {
      r.next_id = static_cast<uint64_t>(sqlite3_column_int64(q.get(), 0));
      while (q.Step(&status)) {
      }
    }
    if (!status.ok()) return status;
  }
  auto next_timer = NextTimerId();
  if (!next_timer.ok()) return next_timer.status();
  r.next_timer_id = *next_timer;
  return r;
}

void SqliteStore::Submit(Mutation m, Done done) { queue_.Submit(std::move(m), std::move(done)); }

void SqliteStore::SubmitAll(std::vector<Mutation> ms, Done done) {
  queue_.SubmitAll(std::move(ms), std::move(done));
}

Status SqliteStore::Sync() {
  // A handle of our own on the write-ahead log, opened through the VFS the
  // database uses: syncing it syncs the file (the page cache is per file),
  // without touching the writer's handle, which is busy with the next batch.
  if (!log_file_) {
    sqlite3_vfs* vfs = nullptr;
    if (sqlite3_file_control(write_db_, "main", SQLITE_FCNTL_VFS_POINTER, &vfs) != SQLITE_OK ||
        vfs == nullptr) {
      return Status::IoError("sync: no VFS for the database");
    }
    auto file = std::unique_ptr<sqlite3_file, void (*)(sqlite3_file*)>(
        static_cast<sqlite3_file*>(sqlite3_malloc(vfs->szOsFile)),
        [](sqlite3_file* f) { sqlite3_free(f); });
    if (!file) return Status::IoError("sync: out of memory");
    std::memset(file.get(), 0, static_cast<size_t>(vfs->szOsFile));
    int flags = 0;
    if (int rc = vfs->xOpen(vfs, log_name_.c_str(), file.get(),
                            SQLITE_OPEN_READWRITE | SQLITE_OPEN_WAL, &flags);
        rc != SQLITE_OK) {
      if (file->pMethods != nullptr) file->pMethods->xClose(file.get());
      return StoreError(rc, "open " + log_path_ + " to sync it: " + sqlite3_errstr(rc));
    }
    log_file_ = std::move(file);
  }
  if (int rc = log_file_->pMethods->xSync(log_file_.get(), SQLITE_SYNC_NORMAL); rc != SQLITE_OK) {
    return StoreError(rc, "sync " + log_path_ + ": " + sqlite3_errstr(rc));
  }
  return Status::Ok();
}

void SqliteStore::CloseLogFile() {
  if (log_file_ && log_file_->pMethods != nullptr) log_file_->pMethods->xClose(log_file_.get());
  log_file_.reset();
}

Status SqliteStore::Apply(const Mutation& m, uint64_t* max_id) {
  Statements& st = *write_stmts_;
  auto insert_or_replace = [&](Stmt& q, const JobRecord& j, const char* what) {
    q.Bind(1, static_cast<int64_t>(j.id));
    BindMutable(q, 2, j);
    q.Bind(16, j.tube);
    q.Bind(17, j.created_ms);
    q.BindOptional(18, j.key);
    q.BindOptional(19, j.spec);
    q.BindBlob(20, j.body);
    q.Bind(21, j.run_at_ms);
    *max_id = std::max(*max_id, j.id);
    return q.Run(what);
  };
  return std::visit(
      Overloaded{
          [&](const change::InsertJob& c) {
            return insert_or_replace(st.insert, c.job, "insert job");
          },
          [&](const change::ReplaceJob& c) {
            return insert_or_replace(st.replace, c.job, "replace job");
          },
          [&](const change::UpdateJob& c) {
            st.update.Bind(1, static_cast<int64_t>(c.job.id));
            BindMutable(st.update, 2, c.job);
            return st.update.Run("update job");
          },
          [&](const change::DeleteJob& c) {
            st.remove.Bind(1, static_cast<int64_t>(c.id));
            return st.remove.Run("delete job");
          },
          [&](const change::PauseTube& c) {
            st.pause.Bind(1, c.tube);
            st.pause.Bind(2, c.pause_ms);
            st.pause.Bind(3, c.unpause_ms);
            return st.pause.Run("pause tube");
          },
          [&](const change::SetTopicSettings& c) {
            st.settings.Bind(1, c.tube);
            st.settings.BindOptional(2, c.settings);
            return st.settings.Run("topic settings");
          },
          [&](const change::PurgeDone& c) {
            st.purge.Bind(1, c.before_ms);
            return st.purge.Run("purge done jobs");
          },
          [&](const change::PutTimer& c) {
            const TimerRecord& t = c.timer;
            st.timer_put.Bind(1, static_cast<int64_t>(t.id));
            st.timer_put.Bind(2, t.name);
            st.timer_put.Bind(3, t.definition);
            st.timer_put.Bind(4, t.next_fire_ms);
            st.timer_put.Bind(5, t.last_fire_ms);
            st.timer_put.Bind(6, t.created_ms);
            Status s = st.timer_put.Run("put timer");
            // Like job ids, timer ids never repeat: a new timer's fire keys
            // (timer:<id>:<time>) must not meet a deleted one's finished jobs.
            if (s.ok()) {
              st.set_next_timer_id.Bind(1, static_cast<int64_t>(t.id + 1));
              s = st.set_next_timer_id.Run("set next timer id");
            }
            return s;
          },
          [&](const change::DeleteTimer& c) {
            st.timer_delete_fires.Bind(1, static_cast<int64_t>(c.id));
            Status s = st.timer_delete_fires.Run("delete timer fires");
            if (!s.ok()) return s;
            st.timer_delete.Bind(1, static_cast<int64_t>(c.id));
            return st.timer_delete.Run("delete timer");
          },
          [&](const change::AdvanceTimer& c) {
            // c.fence: SQLite has one node and no leases (store.h).
            st.timer_advance.Bind(1, static_cast<int64_t>(c.id));
            st.timer_advance.Bind(2, c.next_fire_ms);
            st.timer_advance.Bind(3, c.last_fire_ms);
            Status s = st.timer_advance.Run("advance timer");
            if (!s.ok()) return s;
            if (sqlite3_changes(write_db_) == 0) {
              return Status::Conflict("advance timer: no such timer");
            }
            for (const TimerFire& f : c.fires) {
              st.fire_insert.Bind(1, static_cast<int64_t>(f.timer_id));
              st.fire_insert.Bind(2, f.fire_ms);
              st.fire_insert.Bind(3, static_cast<int64_t>(f.job_id));
              st.fire_insert.Bind(4, f.outcome);
              st.fire_insert.Bind(5, f.at_ms);
              s = st.fire_insert.Run("record timer fire");
              if (!s.ok()) return s;
            }
            st.fire_prune.Bind(1, static_cast<int64_t>(c.id));
            return st.fire_prune.Run("prune timer fires");
          },
          // Writes of a shard's owner: there are no shards to own here.
          [&](const change::PromoteDue&) {
            return Status::Internal("promote due jobs: cluster mode only");
          },
          [&](const change::RequeueExpired&) {
            return Status::Internal("requeue expired reservations: cluster mode only");
          },
      },
      m.change);
}

Status SqliteStore::ApplyOne(const CommitQueue::Submission& p, uint64_t* max_id) {
  Status s = Apply(p.mutation, max_id);
  for (size_t i = 0; s.ok() && i < p.more.size(); ++i) s = Apply(p.more[i], max_id);
  return s;
}

Status SqliteStore::Commit(CommitQueue::Batch& batch) {
  Statements& st = *write_stmts_;
  Status s = Exec(write_db_, "BEGIN IMMEDIATE");
  if (!s.ok()) return s;
  uint64_t max_id = 0;
  for (auto& p : batch) {
    if (batch.size() == 1 || !p.MayConflict()) {
      s = ApplyOne(p, &max_id);
      if (!s.ok()) break;
      continue;
    }
    s = Exec(write_db_, "SAVEPOINT one");
    if (!s.ok()) break;
    uint64_t one_max_id = max_id;
    Status one = ApplyOne(p, &one_max_id);
    if (one.ok()) {
      max_id = one_max_id;
    } else if (one.code() == StatusCode::kConflict) {
      s = Exec(write_db_, "ROLLBACK TO one");
      p.status = one;  // this submission fails alone
    } else {
      s = one;
    }
    if (s.ok()) s = Exec(write_db_, "RELEASE one");
    if (!s.ok()) break;
  }
  // The id high-water mark survives even when the newest jobs are deleted, so
  // ids never repeat across restarts.
  if (s.ok() && max_id >= next_id_floor_) {
    next_id_floor_ = max_id + 1;
    st.set_next_id.Bind(1, static_cast<int64_t>(next_id_floor_));
    s = st.set_next_id.Run("set next id");
  }
  if (s.ok()) s = Exec(write_db_, "COMMIT");
  if (!s.ok()) {
    Status rollback = Exec(write_db_, "ROLLBACK");
    (void)rollback;  // the batch already failed; a failed rollback adds nothing
  }
  return s;
}

namespace {

// The timer whose column `column` equals `key`, if any.
template <typename Key>
Result<std::optional<TimerRecord>> OneTimer(sqlite3* db, const char* column, const Key& key) {
  Stmt q;
  Status s =
      q.Prepare(db, std::string("SELECT ") + kTimerColumns + " FROM timers WHERE " + column + "=?");
  if (!s.ok()) return s;
  q.Bind(1, key);
  auto rows = ReadTimers(q);
  if (!rows.ok()) return rows.status();
  if (rows->empty()) return std::optional<TimerRecord>();
  return std::optional<TimerRecord>(std::move(rows->front()));
}

}  // namespace

Result<std::optional<TimerRecord>> SqliteStore::GetTimer(uint64_t id) {
  return OneTimer(read_db_, "id", static_cast<int64_t>(id));
}

Result<std::optional<TimerRecord>> SqliteStore::GetTimerByName(const std::string& name) {
  return OneTimer(read_db_, "name", name);
}

Result<std::vector<TimerRecord>> SqliteStore::ListTimers(uint64_t after_id, size_t limit) {
  Stmt q;
  Status s = q.Prepare(read_db_, std::string("SELECT ") + kTimerColumns +
                                     " FROM timers WHERE id>? ORDER BY id LIMIT ?");
  if (!s.ok()) return s;
  q.Bind(1, static_cast<int64_t>(after_id));
  q.Bind(2, static_cast<int64_t>(limit));
  return ReadTimers(q);
}

Result<std::vector<TimerRecord>> SqliteStore::TimersDue(int64_t from_ms, uint64_t after_id,
                                                        int64_t before_ms, size_t limit) {
  Stmt q;
  Status s = q.Prepare(read_db_, std::string("SELECT ") + kTimerColumns +
                                     " FROM timers WHERE next_fire_ms>0 AND next_fire_ms<?3 AND "
                                     "(next_fire_ms, id) > (?1, ?2) ORDER BY next_fire_ms, id "
                                     "LIMIT ?4");
  if (!s.ok()) return s;
  q.Bind(1, from_ms);
  q.Bind(2, static_cast<int64_t>(after_id));
  q.Bind(3, before_ms);
  q.Bind(4, static_cast<int64_t>(limit));
  return ReadTimers(q);
}

Result<uint64_t> SqliteStore::NextTimerId() {
  Stmt q;
  Status s =
      q.Prepare(read_db_,
                "SELECT max(coalesce((SELECT value FROM meta WHERE key='next_timer_id'), 1), "
                "coalesce((SELECT max(id) FROM timers), 0) + 1)");
  if (!s.ok()) return s;
  Status status;
  uint64_t next = 1;
  while (q.Step(&status)) next = static_cast<uint64_t>(sqlite3_column_int64(q.get(), 0));
  if (!status.ok()) return status;
  return next;
}

Result<std::vector<TimerFire>> SqliteStore::TimerFires(uint64_t timer_id, size_t limit) {
  Stmt q;
  Status s = q.Prepare(read_db_,
                       "SELECT timer_id, fire_ms, job_id, outcome, at_ms FROM timer_fires "
                       "WHERE timer_id=? ORDER BY fire_ms DESC LIMIT ?");
  if (!s.ok()) return s;
  q.Bind(1, static_cast<int64_t>(timer_id));
  q.Bind(2, static_cast<int64_t>(limit));
  Status status;
  std::vector<TimerFire> out;
  while (q.Step(&status)) {
    out.push_back({static_cast<uint64_t>(sqlite3_column_int64(q.get(), 0)),
                   sqlite3_column_int64(q.get(), 1),
                   static_cast<uint64_t>(sqlite3_column_int64(q.get(), 2)), ColumnText(q.get(), 3),
                   sqlite3_column_int64(q.get(), 4)});
  }
  if (!status.ok()) return status;
  return out;
}

Result<std::optional<JobRecord>> SqliteStore::Get(uint64_t id) {
  Stmt& q = read_stmts_->get;
  q.Bind(1, static_cast<int64_t>(id));
  Status status;
  std::optional<JobRecord> out;
  while (q.Step(&status)) out = ReadJob(q.get());
  if (!status.ok()) return status;
  return out;
}

Result<std::optional<JobRecord>> SqliteStore::GetByKey(const std::string& tube,
                                                       const std::string& key) {
  Stmt& q = read_stmts_->get_by_key;
  q.Bind(1, tube);
  q.Bind(2, key);
  Status status;
  std::optional<JobRecord> out;
  while (q.Step(&status)) out = ReadJob(q.get());
  if (!status.ok()) return status;
  return out;
}

namespace {

// The least string greater than every string starting with `prefix`; empty
// when there is none (all bytes 0xff).
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty() && static_cast<unsigned char>(prefix.back()) == 0xff) prefix.pop_back();
  if (!prefix.empty()) prefix.back() = static_cast<char>(prefix.back() + 1);
  return prefix;
}

}  // namespace

Result<std::vector<JobRecord>> SqliteStore::List(const ListQuery& lq) {
  // The state goes into the statement as a literal, so that the planner can
  // use the partial index of that state (jobs_buried, jobs_due); a key prefix
  // is a range, which jobs_key serves within a tube.
  std::string sql = std::string("SELECT ") + kJobColumns + " FROM jobs WHERE id>?1";
  if (lq.tube) sql += " AND tube=?2";
  if (lq.state) sql += " AND state=" + std::to_string(static_cast<int>(*lq.state));
  const std::string end = PrefixEnd(lq.key_prefix);
  if (!lq.key_prefix.empty()) sql += end.empty() ? " AND key>=?4" : " AND key>=?4 AND key<?3";
  if (lq.due_after_ms) sql += " AND due_ms>=?5";
  if (lq.due_before_ms) sql += " AND due_ms<?6";
  if (!lq.error_contains.empty()) sql += " AND last_error IS NOT NULL AND instr(last_error, ?8)>0";
  sql += " ORDER BY id LIMIT ?7";
  Stmt q;
  Status s = q.Prepare(read_db_, sql);
  if (!s.ok()) return s;
  q.Bind(1, static_cast<int64_t>(lq.after_id));
  if (lq.tube) q.Bind(2, *lq.tube);
  if (!lq.key_prefix.empty()) {
    q.Bind(4, lq.key_prefix);
    if (!end.empty()) q.Bind(3, end);
  }
  if (lq.due_after_ms) q.Bind(5, *lq.due_after_ms);
  if (lq.due_before_ms) q.Bind(6, *lq.due_before_ms);
  q.Bind(7, static_cast<int64_t>(lq.limit));
  if (!lq.error_contains.empty()) q.Bind(8, lq.error_contains);
  return ReadJobs(q);
}

Result<std::vector<ErrorGroup>> SqliteStore::BuriedByError(const std::optional<std::string>& tube,
                                                           size_t limit) {
  // Reads the dead letters through jobs_buried, not every job.
  Stmt q;
  Status s = q.Prepare(read_db_, std::string("SELECT coalesce(last_error, ''), count(*), min(id) "
                                             "FROM jobs WHERE state = 2") +
                                     (tube ? " AND tube = ?2" : "") +
                                     " GROUP BY 1 ORDER BY 2 DESC, 3 LIMIT ?1");
  if (!s.ok()) return s;
  q.Bind(1, static_cast<int64_t>(limit));
  if (tube) q.Bind(2, *tube);
  std::vector<ErrorGroup> out;
  Status status;
  while (q.Step(&status)) {
    out.push_back({ColumnText(q.get(), 0), static_cast<uint64_t>(sqlite3_column_int64(q.get(), 1)),
                   static_cast<uint64_t>(sqlite3_column_int64(q.get(), 2))});
  }
  if (!status.ok()) return status;
  return out;
}

Result<std::vector<uint64_t>> SqliteStore::DueCounts(int64_t now_ms, int64_t from_minute,
                                                     int64_t bucket_minutes, size_t buckets,
                                                     const std::optional<std::string>& tube) {
  // The minutes after now's are counted from the partial index jobs_due
  // alone (unless a tube is asked for); now's minute, row by row, from now on.
  const int64_t now_minute = DueMinute(now_ms);
  const std::string where = std::string("state = 1") + (tube ? " AND tube = ?4" : "");
  std::vector<uint64_t> out(buckets);
  for (bool current : {true, false}) {
    Stmt q;
    Status s =
        q.Prepare(read_db_, current ? "SELECT (?1 - ?5) / ?3, count(*) FROM jobs WHERE " + where +
                                          " AND due_min = ?1 AND due_ms >= ?2"
                                    : "SELECT (due_min - ?5) / ?3, count(*) FROM jobs WHERE " +
                                          where + " AND due_min > ?1 AND due_min < ?6 GROUP BY 1");
    if (!s.ok()) return s;
    q.Bind(1, now_minute);
    if (current) q.Bind(2, now_ms);
    q.Bind(3, bucket_minutes);
    if (tube) q.Bind(4, *tube);
    q.Bind(5, from_minute);
    if (!current) q.Bind(6, from_minute + bucket_minutes * static_cast<int64_t>(buckets));
    Status status;
    while (q.Step(&status)) {
      const int64_t b = sqlite3_column_int64(q.get(), 0);
      if (b >= 0 && b < static_cast<int64_t>(buckets)) {
        out[static_cast<size_t>(b)] += static_cast<uint64_t>(sqlite3_column_int64(q.get(), 1));
      }
    }
    if (!status.ok()) return status;
  }
  return out;
}

Result<std::vector<JobRecord>> SqliteStore::LoadMinute(int64_t minute, uint64_t after_id,
                                                       size_t limit) {
  Stmt& q = read_stmts_->load_minute;
  q.Bind(1, minute);
  q.Bind(2, static_cast<int64_t>(after_id));
  q.Bind(3, static_cast<int64_t>(limit));
  return ReadJobs(q);
}

Result<std::vector<JobRecord>> SqliteStore::FarDelayed(const std::string& tube,
                                                       int64_t after_minute, size_t limit) {
  Stmt& q = read_stmts_->far_delayed;
  q.Bind(1, after_minute);
  q.Bind(2, tube);
  q.Bind(3, static_cast<int64_t>(limit));
  return ReadJobs(q);
}

Result<std::vector<JobRecord>> SqliteStore::ScanSet(const std::string& tube, JobSet set,
                                                    SetKey after, size_t limit) {
  return read_stmts_->ScanSet(tube, set, after, limit);
}

std::shared_ptr<SetRead> SqliteStore::ScanSetAhead(const std::string& tube, JobSet set,
                                                   SetKey after, size_t limit,
                                                   std::function<void()> ready) {
  auto read = std::make_shared<SetRead>();
  auto work = [this, read, tube, set, after, limit, ready = std::move(ready)]() mutable {
    read->Set(ahead_stmts_->ScanSet(tube, set, after, limit));
    executor_(std::move(ready));
  };
  {
    std::lock_guard<std::mutex> lock(ahead_mu_);
    if (!ahead_stop_) {
      ahead_work_.push_back(std::move(work));
      ahead_cv_.notify_one();
      return read;
    }
  }
  return nullptr;  // closed: the caller reads aside
}

void SqliteStore::AheadLoop() {
  std::unique_lock<std::mutex> lock(ahead_mu_);
  for (;;) {
    ahead_cv_.wait(lock, [this] { return ahead_stop_ || !ahead_work_.empty(); });
    if (ahead_work_.empty()) return;  // stopped, nothing left
    auto work = std::move(ahead_work_.front());
    ahead_work_.pop_front();
    lock.unlock();
    work();
    lock.lock();
  }
}

void SqliteStore::StopAhead() {
  {
    std::lock_guard<std::mutex> lock(ahead_mu_);
    ahead_stop_ = true;
  }
  ahead_cv_.notify_one();
  if (ahead_thread_.joinable()) ahead_thread_.join();
}

StoreStats SqliteStore::stats() const { return queue_.stats(); }

void SqliteStore::Close() {
  StopAhead();     // the reads ahead made and answered
  queue_.Close();  // everything committed, synced and answered
  CloseLogFile();
  if (checkpointer_) checkpointer_->Stop();
}

}  // namespace delayd::store
