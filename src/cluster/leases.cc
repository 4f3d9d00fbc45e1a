#include "cluster/leases.h"

#include <algorithm>

namespace delayd::cluster {

using store::pg::ArrayParam;
using store::pg::GetInt;
using store::pg::kInt8;
using store::pg::kInt8Array;
using store::pg::kText;
using store::pg::Params;
using store::pg::PgConn;
using store::pg::PgResult;

namespace {

// Lease times are PostgreSQL's (now()); `$2::float8 * interval '1 millisecond'` is a
// length in ms.
// The rows are locked in shard order, as a batch of fenced writes locks
// them (PgStore's lock_leases): renewing while this node's writer holds some
// of them waits for its commit instead of deadlocking with it.
constexpr const char* kRenew =
    "UPDATE shard_leases l SET expires_at = now() + $2::float8 * interval '1 millisecond' "
    "FROM (SELECT shard FROM shard_leases WHERE owner = $1 AND expires_at > now() "
    "      ORDER BY shard FOR NO KEY UPDATE) r "
    "WHERE l.shard = r.shard RETURNING l.shard::int8, l.epoch";
constexpr const char* kCount =
    "SELECT (SELECT count(*) FROM nodes "
    "        WHERE seen_at > now() - $1::float8 * interval '1 millisecond'), "
    "       (SELECT count(*) FROM shard_leases)";
// Free shards, and shards whose lease ran out (a stalled or dead owner,
// this node among them), lowest first; SKIP LOCKED leaves those another
// node is taking at this moment to it.
constexpr const char* kTake =
    "UPDATE shard_leases l SET owner = $1, epoch = l.epoch + 1, "
    "  expires_at = now() + $2::float8 * interval '1 millisecond' "
    "FROM (SELECT shard FROM shard_leases WHERE owner IS NULL OR expires_at <= now() "
    "      ORDER BY shard LIMIT $3 FOR UPDATE SKIP LOCKED) f "
    "WHERE l.shard = f.shard RETURNING l.shard::int8, l.epoch";
constexpr const char* kRelease =
    "UPDATE shard_leases SET owner = NULL, epoch = epoch + 1, expires_at = '-infinity' "
    "WHERE owner = $1 AND shard = ANY($2)";

void AddLeases(const PgResult& r, std::vector<Lease>& out) {
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    out.push_back({static_cast<int>(GetInt(r.get(), i, 0)), GetInt(r.get(), i, 1)});
  }
}

}  // namespace

Result<std::vector<Lease>> Leases::Round(PgConn& conn) {
  const std::string& me = options_.node_id;
  const int64_t lease = options_.lease_ms;
  Status s = conn.Exec("BEGIN");
  if (!s.ok()) return s;
  auto fail = [&conn](Status why) -> Result<std::vector<Lease>> {
    (void)conn.Exec("ROLLBACK");
    return why;
  };
  auto seen = conn.Query(
      "INSERT INTO nodes (id, seen_at) VALUES ($1, now()) "
      "ON CONFLICT (id) DO UPDATE SET seen_at = now()",
      Params().Bytes(me), {kText});
  if (!seen.ok()) return fail(seen.status());
  std::vector<Lease> held;
  auto renewed = conn.Query(kRenew, Params().Bytes(me).Int(lease), {kText, kInt8});
  if (!renewed.ok()) return fail(renewed.status());
  AddLeases(*renewed, held);
  auto counts = conn.Query(kCount, Params().Int(lease), {kInt8});
  if (!counts.ok()) return fail(counts.status());
  const int64_t live = std::max<int64_t>(1, GetInt(counts->get(), 0, 0));
  const int64_t shards = GetInt(counts->get(), 0, 1);
  const int64_t share = (shards + live - 1) / live;
  const int64_t have = static_cast<int64_t>(held.size());
  if (have < share) {
    auto taken =
        conn.Query(kTake, Params().Bytes(me).Int(lease).Int(share - have), {kText, kInt8, kInt8});
    if (!taken.ok()) return fail(taken.status());
    AddLeases(*taken, held);
  }
  std::sort(held.begin(), held.end(),
            [](const Lease& a, const Lease& b) { return a.shard < b.shard; });
  if (have > share) {
    // Gives up the highest shards above the share.
    ArrayParam surplus(kInt8);
    for (size_t i = static_cast<size_t>(share); i < held.size(); ++i) surplus.Int(held[i].shard);
    auto released = conn.Query(kRelease, Params().Bytes(me).Array(surplus), {kText, kInt8Array});
    if (!released.ok()) return fail(released.status());
    held.resize(static_cast<size_t>(share));
  }
  s = conn.Exec("COMMIT");
  if (!s.ok()) return fail(s);
  return held;
}

Status Leases::Leave(PgConn& conn) {
  Status s = conn.Exec("BEGIN");
  if (!s.ok()) return s;
  const std::string& me = options_.node_id;
  auto released = conn.Query(
      "UPDATE shard_leases SET owner = NULL, epoch = epoch + 1, expires_at = '-infinity' "
      "WHERE owner = $1",
      Params().Bytes(me), {kText});
  if (released.ok()) {
    released = conn.Query("DELETE FROM nodes WHERE id = $1", Params().Bytes(me), {kText});
  }
  if (!released.ok()) {
    (void)conn.Exec("ROLLBACK");
    return released.status();
  }
  return conn.Exec("COMMIT");
}

}  // namespace delayd::cluster
