// What every part of the SQLite store uses: a connection opened with the
// store's pragmas, prepared statements, and SQLite's failures as Statuses.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "common/status.h"

namespace delayd::store::sqlite {

// A failed SQLite call `rc` as a Status: a full disk is NoSpace, which
// clients may retry once space returns; any other failure an IoError.
Status StoreError(int rc, std::string message);
// The connection's last failure, of `what`.
Status SqlError(sqlite3* db, const char* what);
// Runs `sql`, statements that return no rows.
Status Exec(sqlite3* db, const char* sql);
// Opens (creating) the database at `path` in WAL mode, synchronous=NORMAL,
// with a page cache of `cache_kib` and no automatic checkpoints (the
// store's own: sqlite_checkpointer.h).
Status OpenDb(const std::string& path, int cache_kib, sqlite3** db);

// A prepared statement, reset after each use.
class Stmt {
 public:
  Stmt() = default;
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt() { sqlite3_finalize(stmt_); }

  Status Prepare(sqlite3* db, const std::string& sql) {
    db_ = db;
    if (sqlite3_prepare_v3(db, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr) !=
        SQLITE_OK) {
      return SqlError(db, "prepare");
    }
    return Status::Ok();
  }
  sqlite3_stmt* get() { return stmt_; }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void Bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
  }
  void BindBlob(int i, const std::string& v) {
    sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
  }
  // Binds text, or NULL when empty.
  void BindOptional(int i, const std::string& v) {
    if (v.empty()) {
      sqlite3_bind_null(stmt_, i);
    } else {
      Bind(i, v);
    }
  }
  // Runs a statement that returns no rows.
  // A constraint violation (a taken key or name) is a Conflict; any other
  // failure an IoError.
  Status Run(const char* what) {
    int rc = sqlite3_step(stmt_);
    Status s = rc == SQLITE_DONE ? Status::Ok() : SqlError(db_, what);
    if ((rc & 0xff) == SQLITE_CONSTRAINT) {
      s = Status::Conflict(std::string(what) + ": " + sqlite3_errmsg(db_));
    }
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    return s;
  }
  // Steps a query: true while there is a row; resets at the end or on error.
  bool Step(Status* status) {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) *status = SqlError(db_, "query");
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    return false;
  }

 private:
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
};

}  // namespace delayd::store::sqlite
