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
#include <deque>
#include <functional>
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
inline constexpr Oid kInt8Array = 1016;
inline constexpr Oid kTextArray = 1009;
inline constexpr Oid kByteaArray = 1001;

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, ResultDeleter>;

// A one-dimensional array parameter (int8[], text[] or bytea[]) in the
// binary format of array_send: a header, then each element as its length
// and bytes (-1 for NULL). The element adders match Params' own, so one
// function can fill either (PgStore's JobFields).
class ArrayParam {
 public:
  explicit ArrayParam(Oid element) : element_(element) {}
  void Int(int64_t v);
  void Bytes(std::string_view v);
  void OptionalBytes(std::string_view v) { v.empty() ? Null() : Bytes(v); }
  void Null();
  size_t size() const { return count_; }
  // The encoded array, header first.
  std::string Encode() const;

 private:
  Oid element_;
  bool has_null_ = false;
  size_t count_ = 0;
  std::string elements_;
};

// The parameters of one statement. Text and bytes are not copied: they must
// outlive the call that sends them. Integers and arrays are kept here.
class Params {
 public:
  Params() = default;
  Params(Params&&) = default;
  Params& operator=(Params&&) = default;
  Params(const Params&) = delete;  // values_ points into owned_
  Params& operator=(const Params&) = delete;

  Params& Int(int64_t v);
  Params& Bytes(std::string_view v);  // text or bytea
  // Bytes, or NULL when empty: "none" in an optional column.
  Params& OptionalBytes(std::string_view v);
  Params& Null();
  Params& Array(const ArrayParam& a);

  int size() const { return static_cast<int>(values_.size()); }
  const char* const* values() const { return values_.data(); }
  const int* lengths() const { return lengths_.data(); }
  const int* formats() const { return formats_.data(); }

 private:
  std::vector<const char*> values_;
  std::vector<int> lengths_;
  std::vector<int> formats_;
  std::deque<std::string> owned_;  // encoded integers and arrays; a deque never moves them
};

// Reading a binary-format result.
int64_t GetInt(const PGresult* r, int row, int col);        // int8; 0 when NULL
std::string GetBytes(const PGresult* r, int row, int col);  // "" when NULL

class PgConn {
 public:
  ~PgConn();
  // Connects with a libpq connection string or URI. A connection that cannot
  // be made is kIoError, with libpq's reason. Unless the string or the
  // environment says otherwise, connecting gives up after 5 s and a server
  // that stops acknowledging what was sent is given up after 10 s
  // (kTimeoutDefaults), so that no call waits on a vanished server for
  // TCP's quarter of an hour. `name` is the application_name the server
  // shows (pg_stat_activity) unless the string gives one.
  static Result<std::unique_ptr<PgConn>> Connect(const std::string& conninfo, const char* name);

  PGconn* get() { return conn_; }
  // Whether the connection is still usable (it may have broken since).
  bool ok() const;
  // Whether an idle connection is still usable, as far as can be told
  // without a round trip: a server that ended the session (it crashed or
  // restarted, or the session was terminated) has said so or closed the
  // socket, which this reads. A batch sent on such a connection would have
  // its outcome in doubt; found out before, it is sent on a new one.
  bool StillOpen();
  // Drops the connection and connects again.
  Status Reconnect();

  // Runs SQL that returns no rows (one or more statements, text protocol).
  Status Exec(std::string_view sql);
  // Prepares `sql` as `name` with parameters of `types`.
  Status Prepare(const char* name, const std::string& sql, const std::vector<Oid>& types);
  // Runs prepared statement `name` and returns its result (rows or not).
  Result<PgResult> Run(const char* name, const Params& p);
  // Runs `sql` unprepared (parameter types from `types`, or inferred when it
  // is empty) and returns its result, binary like Run's.
  Result<PgResult> Query(const std::string& sql, const Params& p = {},
                         const std::vector<Oid>& types = {});

  // A pipeline: Send queues a prepared statement without waiting; Sync
  // marks the end of a group, Next reads the next result in order (the
  // sync's own result is read by the caller).
  Status EnterPipeline();
  Status Send(const char* name, const Params& p);
  Status SendSql(const char* sql);  // a statement without parameters
  Status Sync();
  // The result of the next statement sent: its status, the rows it changed
  // or returned in `changed`, and its rows, when it succeeded, to `rows`.
  // After a failure, the statements that follow up to the next Sync come
  // back as aborted.
  Status Next(uint64_t* changed = nullptr,
              const std::function<void(const PGresult*)>& rows = nullptr);

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
