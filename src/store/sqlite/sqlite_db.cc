#include "store/sqlite/sqlite_db.h"

namespace delayd::store::sqlite {

Status StoreError(int rc, std::string message) {
  if ((rc & 0xff) == SQLITE_FULL) return Status::NoSpace(std::move(message));
  return Status::IoError(std::move(message));
}

Status SqlError(sqlite3* db, const char* what) {
  return StoreError(sqlite3_extended_errcode(db), std::string(what) + ": " + sqlite3_errmsg(db));
}

Status Exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err); rc != SQLITE_OK) {
    Status s = StoreError(rc, std::string(sql).substr(0, 40) + ": " + (err ? err : "?"));
    sqlite3_free(err);
    return s;
  }
  return Status::Ok();
}

Status OpenDb(const std::string& path, int cache_kib, sqlite3** db) {
  // SQLite's memory statistics take one process-wide mutex on every
  // allocation, so the writer and the loop's reads would take turns on it;
  // nothing here reads them. The setting must precede SQLite's
  // initialization: where something else initialized it first, the call is
  // refused and changes nothing.
  [[maybe_unused]] static const int memstatus = sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
  int rc = sqlite3_open_v2(
      path.c_str(), db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status s = Status::IoError("open " + path + ": " + (*db ? sqlite3_errmsg(*db) : "?"));
    sqlite3_close(*db);
    *db = nullptr;
    return s;
  }
  sqlite3_busy_timeout(*db, 5000);
  // Checkpoints are the store's own (sqlite_checkpointer.h), not SQLite's
  // automatic ones after a commit.
  std::string pragmas =
      "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA wal_autocheckpoint=0; "
      "PRAGMA cache_size=-" +
      std::to_string(cache_kib) + ";";
  return Exec(*db, pragmas.c_str());
}

}  // namespace delayd::store::sqlite
