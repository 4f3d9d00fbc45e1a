#include "store/postgres/pg_owner.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>

namespace delayd::store::pg {
namespace {

// The advisory lock's key, as two int4: "dela" and 2 (1 is the migration
// lock of pg_schema.cc, taken per transaction with an int8 key, which
// PostgreSQL keeps apart from two-key locks).
constexpr int kOwnerKey1 = 0x64656c61;
constexpr int kOwnerKey2 = 2;

std::string Text(const PGresult* r, int row, int col) { return GetBytes(r, row, col); }

// Who holds the lock now, one line per session, or "" when nobody does
// (the holder just left) or the server does not say.
std::string Holders(PgConn& conn, bool* holder_is_cluster) {
  auto r = conn.Query(fmt::format(
      "SELECT coalesce(a.application_name, '')::text, coalesce(host(a.client_addr), 'a local "
      "socket')::text, coalesce(to_char(a.backend_start AT TIME ZONE 'UTC', "
      "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), '?')::text, l.mode::text "
      "FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
      "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = {} AND l.objid = {} "
      "AND l.objsubid = 2 AND l.database = (SELECT oid FROM pg_database WHERE datname = "
      "current_database()) ORDER BY a.backend_start LIMIT 4",
      kOwnerKey1, kOwnerKey2));
  if (!r.ok()) return "";
  std::string out;
  for (int i = 0; i < PQntuples(r->get()); ++i) {
    const std::string name = Text(r->get(), i, 0);
    *holder_is_cluster = Text(r->get(), i, 3) == "ShareLock";
    if (!out.empty()) out += "; ";
    out += fmt::format("{} at address {}, since {}",
                       name.empty() ? std::string("a session that does not say its name") : name,
                       Text(r->get(), i, 1), Text(r->get(), i, 2));
  }
  return out;
}

}  // namespace

Status HoldDatabase(PgConn& conn, bool cluster, const std::string& node) {
  const std::string app = fmt::format("delayd {} {}", cluster ? "cluster" : "single", node);
  auto named =
      conn.Query("SELECT set_config('application_name', $1, false)", Params().Bytes(app), {kText});
  if (!named.ok()) return named.status();
  // A holder that has just exited (a restart) keeps the lock until its
  // server process has ended, a few ms later: try for a while before
  // refusing.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (;;) {
    auto got = conn.Query(fmt::format(
        "SELECT {}({}, {})::int::int8",
        cluster ? "pg_try_advisory_lock_shared" : "pg_try_advisory_lock", kOwnerKey1, kOwnerKey2));
    if (!got.ok()) return got.status();
    if (GetInt(got->get(), 0, 0) != 0) return Status::Ok();
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  auto where = conn.Query(
      "SELECT current_database()::text, coalesce(inet_server_addr()::text, 'a local socket') || "
      "':' || coalesce(inet_server_port()::text, current_setting('port'))");
  std::string db = "?", server = "?";
  if (where.ok() && PQntuples(where->get()) == 1) {
    db = Text(where->get(), 0, 0);
    server = Text(where->get(), 0, 1);
  }
  bool holder_is_cluster = !cluster;
  std::string holders = Holders(conn, &holder_is_cluster);
  if (holders.empty()) holders = "another delayd, which did not say who";
  std::string advice;
  if (cluster && !holder_is_cluster) {
    advice =
        "a single node (started without --cluster) holds it alone; stop it, then start every "
        "node with --cluster to share the database";
  } else if (!cluster && holder_is_cluster) {
    advice = "delayd cluster nodes share it; start this node with --cluster to join them";
  } else {
    advice =
        "stop that delayd first, or start every node with --cluster to share one database, or "
        "give this one a database of its own";
  }
  return Status::Conflict(fmt::format(
      "postgres: database \"{}\" on {} is held by another delayd ({}): {}; this process wrote "
      "nothing to it",
      db, server, holders, advice));
}

bool HoldsDatabase(PgConn& conn) {
  auto r = conn.Query(
      fmt::format("SELECT count(*)::int8 FROM pg_locks WHERE locktype = 'advisory' AND granted AND "
                  "pid = pg_backend_pid() AND classid = {} AND objid = {} AND objsubid = 2",
                  kOwnerKey1, kOwnerKey2));
  return r.ok() && PQntuples(r->get()) == 1 && GetInt(r->get(), 0, 0) > 0;
}

}  // namespace delayd::store::pg
