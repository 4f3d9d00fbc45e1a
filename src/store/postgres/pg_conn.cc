#include "store/postgres/pg_conn.h"

#include <endian.h>

#include <cstring>

namespace delayd::store::pg {
namespace {

constexpr int kBinary = 1;

// libpq's messages end with a newline; a Status reads better without it.
std::string Trimmed(const char* message) {
  std::string m = message ? message : "";
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m;
}

}  // namespace

Params& Params::Int(int64_t v) {
  auto buf = std::make_unique<char[]>(8);
  const uint64_t be = htobe64(static_cast<uint64_t>(v));
  std::memcpy(buf.get(), &be, 8);
  values_.push_back(buf.get());
  lengths_.push_back(8);
  formats_.push_back(kBinary);
  ints_.push_back(std::move(buf));
  return *this;
}

Params& Params::Bytes(std::string_view v) {
  // A zero-length value must still be non-NULL.
  values_.push_back(v.empty() ? "" : v.data());
  lengths_.push_back(static_cast<int>(v.size()));
  formats_.push_back(kBinary);
  return *this;
}

Params& Params::OptionalBytes(std::string_view v) { return v.empty() ? Null() : Bytes(v); }

Params& Params::Null() {
  values_.push_back(nullptr);
  lengths_.push_back(0);
  formats_.push_back(kBinary);
  return *this;
}

int64_t GetInt(const PGresult* r, int row, int col) {
  if (PQgetisnull(r, row, col)) return 0;
  const char* v = PQgetvalue(r, row, col);
  switch (PQgetlength(r, row, col)) {
    case 8: {
      uint64_t be;
      std::memcpy(&be, v, 8);
      return static_cast<int64_t>(be64toh(be));
    }
    case 4: {
      uint32_t be;
      std::memcpy(&be, v, 4);
      return static_cast<int32_t>(be32toh(be));
    }
    case 2: {
      uint16_t be;
      std::memcpy(&be, v, 2);
      return static_cast<int16_t>(be16toh(be));
    }
    default:
      return 0;
  }
}

std::string GetBytes(const PGresult* r, int row, int col) {
  if (PQgetisnull(r, row, col)) return {};
  return {PQgetvalue(r, row, col), static_cast<size_t>(PQgetlength(r, row, col))};
}

PgConn::~PgConn() { PQfinish(conn_); }

Result<std::unique_ptr<PgConn>> PgConn::Connect(const std::string& conninfo) {
  PGconn* conn = PQconnectdb(conninfo.c_str());
  if (conn == nullptr) return Status::IoError("postgres: out of memory");
  if (PQstatus(conn) != CONNECTION_OK) {
    Status s = Status::IoError("postgres: cannot connect: " + Trimmed(PQerrorMessage(conn)));
    PQfinish(conn);
    return s;
  }
  // Notices (a table that already exists, ...) are not delayd's to print.
  PQsetNoticeProcessor(
      conn, [](void*, const char*) {}, nullptr);
  return std::unique_ptr<PgConn>(new PgConn(conn, conninfo));
}

bool PgConn::ok() const { return PQstatus(conn_) == CONNECTION_OK; }

Status PgConn::Reconnect() {
  PQreset(conn_);
  if (PQstatus(conn_) != CONNECTION_OK) {
    return Status::IoError("postgres: cannot connect: " + Trimmed(PQerrorMessage(conn_)));
  }
  return Status::Ok();
}

Status PgConn::Error(const PGresult* r, const char* what) const {
  std::string message = std::string("postgres: ") + what + ": ";
  if (r != nullptr && PQresultErrorMessage(r)[0] != '\0') {
    message += Trimmed(PQresultErrorMessage(r));
  } else {
    message += Trimmed(PQerrorMessage(conn_));
  }
  const char* state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
  if (state != nullptr) {
    if (std::strcmp(state, "23505") == 0) return Status::Conflict(message);  // unique_violation
    if (std::strcmp(state, "53100") == 0) return Status::NoSpace(message);   // disk_full
  }
  return Status::IoError(message);
}

Status PgConn::Exec(std::string_view sql) {
  PgResult r(PQexec(conn_, std::string(sql).c_str()));
  const ExecStatusType st = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    return Error(r.get(), std::string(sql.substr(0, 40)).c_str());
  }
  return Status::Ok();
}

Status PgConn::Prepare(const char* name, const std::string& sql, const std::vector<Oid>& types) {
  PgResult r(PQprepare(conn_, name, sql.c_str(), static_cast<int>(types.size()), types.data()));
  if (!r || PQresultStatus(r.get()) != PGRES_COMMAND_OK) return Error(r.get(), name);
  return Status::Ok();
}

Result<PgResult> PgConn::Run(const char* name, const Params& p) {
  PgResult r(PQexecPrepared(conn_, name, p.size(), p.values(), p.lengths(), p.formats(), kBinary));
  const ExecStatusType st = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return Error(r.get(), name);
  return r;
}

Status PgConn::EnterPipeline() {
  if (PQenterPipelineMode(conn_) != 1) return Error(nullptr, "enter pipeline");
  return Status::Ok();
}

Status PgConn::ExitPipeline() {
  if (PQexitPipelineMode(conn_) != 1) return Error(nullptr, "exit pipeline");
  return Status::Ok();
}

Status PgConn::Send(const char* name, const Params& p) {
  if (PQsendQueryPrepared(conn_, name, p.size(), p.values(), p.lengths(), p.formats(), kBinary) !=
      1) {
    return Error(nullptr, name);
  }
  return Status::Ok();
}

Status PgConn::SendSql(const char* sql) {
  if (PQsendQueryParams(conn_, sql, 0, nullptr, nullptr, nullptr, nullptr, kBinary) != 1) {
    return Error(nullptr, sql);
  }
  return Status::Ok();
}

Status PgConn::Sync() {
  if (PQpipelineSync(conn_) != 1) return Error(nullptr, "pipeline sync");
  return Status::Ok();
}

Status PgConn::Next(uint64_t* changed) {
  // One statement's results end with a NULL.
  Status s;
  bool got = false;
  while (PGresult* raw = PQgetResult(conn_)) {
    PgResult r(raw);
    got = true;
    switch (PQresultStatus(raw)) {
      case PGRES_COMMAND_OK:
      case PGRES_TUPLES_OK:
        if (changed != nullptr) {
          const char* n = PQcmdTuples(raw);
          *changed = n[0] ? std::strtoull(n, nullptr, 10) : 0;
        }
        break;
      case PGRES_PIPELINE_ABORTED:
        if (s.ok()) s = Status::IoError("postgres: statement skipped after an earlier failure");
        break;
      default:
        if (s.ok()) s = Error(raw, "statement");
        break;
    }
  }
  if (!got && s.ok()) return Error(nullptr, "no result");
  return s;
}

Status PgConn::DrainToSync() {
  Status first;
  for (;;) {
    PGresult* raw = PQgetResult(conn_);
    if (raw == nullptr) {
      // Between two statements' results; a broken connection ends here too.
      if (!ok()) return first.ok() ? Error(nullptr, "connection") : first;
      continue;
    }
    PgResult r(raw);
    const ExecStatusType st = PQresultStatus(raw);
    if (st == PGRES_PIPELINE_SYNC) return first;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK && st != PGRES_PIPELINE_ABORTED &&
        first.ok()) {
      first = Error(raw, "statement");
    }
  }
}

}  // namespace delayd::store::pg
