// PgConn: one libpq connection, with what PgStore needs of it: prepared
// statements with binary parameters and results, a pipeline for a batch of
// writes, and failures as Status.
//
// Every parameter and result is in binary format: integers as big-endian
// int8, text and bytea as their bytes. So bodies, keys and errors travel
// byte for byte, with no escaping and no NUL-termination.
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace delayd::store::pg {

// Type OIDs of the parameters PgStore declares (pg_type.h).
inline constexpr Oid kInt8 = 20;
inline constexpr Oid kText = 25;
inline constexpr Oid kBytea = 17;

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, ResultDeleter>;

// The parameters of one statement. Text and bytes are not copied: they must
// outlive the call that sends them.
class Params {
 public:
  Params& Int(int64_t v);
  Params& Bytes(std::string_view v);  // text or bytea
  // Bytes, or NULL when empty: "none" in an optional column.
  Params& OptionalBytes(std::string_view v);
  Params& Null();

  int size() const { return static_cast<int>(values_.size()); }
  const char* const* values() const { return values_.data(); }
  const int* lengths() const { return lengths_.data(); }
  const int* formats() const { return formats_.data(); }

 private:
  std::vector<const char*> values_;
  std::vector<int> lengths_;
  std::vector<int> formats_;
  std::vector<std::unique_ptr<char[]>> ints_;  // the big-endian integers
};

// Reading a binary-format result.
int64_t GetInt(const PGresult* r, int row, int col);        // int8; 0 when NULL
std::string GetBytes(const PGresult* r, int row, int col);  // "" when NULL

class PgConn {
 public:
  ~PgConn();
  // Connects with a libpq connection string or URI. A connection that cannot
  // be made is kIoError, with libpq's reason.
  static Result<std::unique_ptr<PgConn>> Connect(const std::string& conninfo);

  PGconn* get() { return conn_; }
  // Whether the connection is still usable (it may have broken since).
  bool ok() const;
  // Drops the connection and connects again.
  Status Reconnect();

  // Runs SQL that returns no rows (one or more statements, text protocol).
  Status Exec(std::string_view sql);
  // Prepares `sql` as `name` with parameters of `types`.
  Status Prepare(const char* name, const std::string& sql, const std::vector<Oid>& types);
  // Runs prepared statement `name` and returns its result (rows or not).
  Result<PgResult> Run(const char* name, const Params& p);

  // A pipeline: Send queues a prepared statement without waiting; Sync
  // marks the end of a group, Next reads the next result in order.
  Status EnterPipeline();
  Status ExitPipeline();
  Status Send(const char* name, const Params& p);
  Status SendSql(const char* sql);  // a statement without parameters
  Status Sync();
  // The result of the next statement sent: its status, and the rows it
  // changed in `changed` (INSERT/UPDATE/DELETE). After a failure, the
  // statements that follow up to the next Sync come back as aborted.
  Status Next(uint64_t* changed = nullptr);
  // Reads the results up to and including the next Sync's.
  Status DrainToSync();

  // The failure of the last call on this connection as a Status: a unique
  // violation is kConflict, a full disk kNoSpace, anything else (a lost
  // connection among them) kIoError, which clients are told to retry.
  Status Error(const PGresult* r, const char* what) const;

 private:
  PgConn(PGconn* conn, std::string conninfo) : conn_(conn), conninfo_(std::move(conninfo)) {}
  PGconn* conn_;
  std::string conninfo_;
};

}  // namespace delayd::store::pg
