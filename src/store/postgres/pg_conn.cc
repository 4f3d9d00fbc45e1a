#include "store/postgres/pg_conn.h"

#include <endian.h>
#include <poll.h>

#include <cstdlib>
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

void AppendBigEndian32(std::string& out, uint32_t v) {
  const uint32_t be = htobe32(v);
  out.append(reinterpret_cast<const char*>(&be), 4);
}

void AppendBigEndian64(std::string& out, uint64_t v) {
  const uint64_t be = htobe64(v);
  out.append(reinterpret_cast<const char*>(&be), 8);
}

// Connection settings delayd gives unless the connection string or the
// environment (libpq's PGCONNECT_TIMEOUT, ...) gives its own.
struct TimeoutDefault {
  const char* keyword;
  const char* env;
  const char* value;
};
constexpr TimeoutDefault kTimeoutDefaults[] = {
    {"connect_timeout", "PGCONNECT_TIMEOUT", "5"},      // seconds
    {"tcp_user_timeout", "PGTCPUSERTIMEOUT", "10000"},  // ms unacknowledged
    {"keepalives_idle", nullptr, "10"},                 // an idle connection probed after 10 s,
    {"keepalives_interval", nullptr, "3"},              // every 3 s,
    {"keepalives_count", nullptr, "3"},                 // and dropped after 3 unanswered
};

}  // namespace

void ArrayParam::Int(int64_t v) {
  AppendBigEndian32(elements_, 8);
  AppendBigEndian64(elements_, static_cast<uint64_t>(v));
  ++count_;
}

void ArrayParam::Bytes(std::string_view v) {
  AppendBigEndian32(elements_, static_cast<uint32_t>(v.size()));
  elements_.append(v);
  ++count_;
}

void ArrayParam::Null() {
  AppendBigEndian32(elements_, static_cast<uint32_t>(-1));
  has_null_ = true;
  ++count_;
}

std::string ArrayParam::Encode() const {
  std::string out;
  out.reserve(20 + elements_.size());
  AppendBigEndian32(out, 1);  // dimensions
  AppendBigEndian32(out, has_null_ ? 1 : 0);
  AppendBigEndian32(out, element_);
  AppendBigEndian32(out, static_cast<uint32_t>(count_));  // length of the dimension
  AppendBigEndian32(out, 1);                              // its lower bound
  out += elements_;
  return out;
}

Params& Params::Int(int64_t v) {
  std::string& buf = owned_.emplace_back();
  AppendBigEndian64(buf, static_cast<uint64_t>(v));
  return Bytes(buf);
}

Params& Params::Array(const ArrayParam& a) { return Bytes(owned_.emplace_back(a.Encode())); }

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

Result<std::unique_ptr<PgConn>> PgConn::Connect(const std::string& conninfo, const char* name) {
  // Keywords apply in order, the last of a repeated one winning: the
  // defaults first, then the caller's string (expanded from "dbname").
  std::vector<const char*> keywords;
  std::vector<const char*> values;
  for (const TimeoutDefault& d : kTimeoutDefaults) {
    if (d.env != nullptr && std::getenv(d.env) != nullptr) continue;
    keywords.push_back(d.keyword);
    values.push_back(d.value);
  }
  keywords.push_back("fallback_application_name");
  values.push_back(name);
  keywords.push_back("dbname");
  values.push_back(conninfo.c_str());
  keywords.push_back(nullptr);
  values.push_back(nullptr);
  PGconn* conn = PQconnectdbParams(keywords.data(), values.data(), /*expand_dbname=*/1);
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

bool PgConn::StillOpen() {
  // A session's end arrives as a FATAL error (which libpq, idle, takes for
  // a notice), then the end of the stream, which a read after it finds and
  // which breaks the connection. Each read takes what has arrived.
  for (int reads = 0; reads < 4 && ok(); ++reads) {
    pollfd p{.fd = PQsocket(conn_), .events = POLLIN, .revents = 0};
    if (poll(&p, 1, 0) <= 0) return true;  // nothing (more) arrived
    if (PQconsumeInput(conn_) == 0) return false;
  }
  return ok();
}

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

Result<PgResult> PgConn::Query(const std::string& sql, const Params& p,
                               const std::vector<Oid>& types) {
  PgResult r(PQexecParams(conn_, sql.c_str(), p.size(), types.empty() ? nullptr : types.data(),
                          p.values(), p.lengths(), p.formats(), kBinary));
  const ExecStatusType st = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    return Error(r.get(), sql.substr(0, 40).c_str());
  }
  return r;
}

Status PgConn::EnterPipeline() {
  if (PQenterPipelineMode(conn_) != 1) return Error(nullptr, "enter pipeline");
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

Status PgConn::Next(uint64_t* changed, const std::function<void(const PGresult*)>& rows) {
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
        if (rows && s.ok()) rows(raw);
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

}  // namespace delayd::store::pg
