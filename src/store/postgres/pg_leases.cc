#include "store/postgres/pg_leases.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "store/postgres/pg_schema.h"

namespace delayd::store::pg {

namespace {

// Lease times are PostgreSQL's (now()); `$2::float8 * interval '1 millisecond'` is a
// length in ms.
constexpr const char* kSeen =
    "INSERT INTO nodes (id, seen_at, fencing) VALUES ($1, now(), 2) "
    "ON CONFLICT (id) DO UPDATE SET seen_at = now(), fencing = 2";
// The leases this node holds that have not run out. A take locks only
// leases that ran out, FOR UPDATE SKIP LOCKED, and never waits: a renewal
// that meets one waits for its commit and then passes the row by (its owner
// changed). Nothing else locks lease rows, so no lock order is needed.
// (Until 2026-11-26 the renewal locked its rows in shard order first, since
// fenced writes key-share locked them; that lock was a WAL record a row.)
constexpr const char* kRenew =
    "UPDATE shard_leases SET expires_at = now() + $2::float8 * interval '1 millisecond' "
    "WHERE owner = $1 AND expires_at > now() RETURNING shard::int8, epoch";
// Live nodes, shards, and live nodes of a build that fences by row locks
// (schema version 9 in pg_schema.cc).
constexpr const char* kCount =
    "SELECT count(*), (SELECT count(*) FROM shard_leases), "
    "       count(*) FILTER (WHERE fencing IS NULL) FROM nodes "
    "WHERE seen_at > now() - $1::float8 * interval '1 millisecond'";
// Free shards, and shards whose lease ran out (a stalled or dead owner,
// this node among them), lowest first; SKIP LOCKED leaves those another
// node is taking at this moment to it. A shard whose advisory lock
// (kShardLockClass) a fenced write holds is passed by this round: taken
// exclusive, the lock keeps the old owner's next write waiting until this
// round commits, and that write then reads the new epoch and is refused
// (pg_statements.cc, kFence). Tried only on the shards the subquery chose.
constexpr const char* kTakeFormat =
    "UPDATE shard_leases l SET owner = $1, epoch = l.epoch + 1, "
    "  expires_at = now() + $2::float8 * interval '1 millisecond' "
    "FROM (SELECT shard FROM shard_leases WHERE owner IS NULL OR expires_at <= now() "
    "      ORDER BY shard LIMIT $3 FOR UPDATE SKIP LOCKED) f "
    "WHERE l.shard = f.shard AND pg_try_advisory_xact_lock({}, f.shard::int4) "
    "RETURNING l.shard::int8, l.epoch";
constexpr const char* kRelease =
    "UPDATE shard_leases SET owner = NULL, epoch = epoch + 1, expires_at = '-infinity' "
    "WHERE owner = $1 AND shard = ANY($2)";
constexpr const char* kReleaseAll =
    "UPDATE shard_leases SET owner = NULL, epoch = epoch + 1, expires_at = '-infinity' "
    "WHERE owner = $1";
constexpr const char* kForget = "DELETE FROM nodes WHERE id = $1";
constexpr const char* kDescribe =
    "UPDATE nodes SET beanstalk = nullif($2, ''), http = nullif($3, ''), "
    "figures = $4::jsonb WHERE id = $1";

// Times as ms since the Unix epoch, by the database's clock.
std::string Ms(const char* column) {
  return fmt::format("(extract(epoch FROM {}) * 1000)::int8", column);
}

void AddLeases(const PgResult& r, std::vector<Lease>& out) {
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    out.push_back({static_cast<int>(GetInt(r.get(), i, 0)), GetInt(r.get(), i, 1)});
  }
}

}  // namespace

Result<std::unique_ptr<PgLeaseTable>> PgLeaseTable::Open(std::string conninfo,
                                                         LeaseOptions options) {
  std::unique_ptr<PgLeaseTable> t(new PgLeaseTable(std::move(conninfo), std::move(options)));
  auto c = t->Conn();
  if (!c.ok()) return c.status();
  return t;
}

Result<PgConn*> PgLeaseTable::Conn() {
  if (conn_ && conn_->ok()) return conn_.get();
  auto c = PgConn::Connect(conninfo_, "delayd-member");
  if (!c.ok()) return c.status();
  conn_ = std::move(c).value();
  return conn_.get();
}

Result<std::vector<Lease>> PgLeaseTable::Round() {
  auto conn = Conn();
  if (!conn.ok()) return conn.status();
  PgConn& c = **conn;
  const std::string& me = options_.node_id;
  const int64_t lease = options_.lease_ms;
  Status s = c.Exec("BEGIN");
  if (!s.ok()) return s;
  auto fail = [&c](Status why) -> Result<std::vector<Lease>> {
    (void)c.Exec("ROLLBACK");
    return why;
  };
  auto seen = c.Query(kSeen, Params().Bytes(me), {kText});
  if (!seen.ok()) return fail(seen.status());
  std::vector<Lease> held;
  auto renewed = c.Query(kRenew, Params().Bytes(me).Int(lease), {kText, kInt8});
  if (!renewed.ok()) return fail(renewed.status());
  AddLeases(*renewed, held);
  auto counts = c.Query(kCount, Params().Int(lease), {kInt8});
  if (!counts.ok()) return fail(counts.status());
  const int64_t live = std::max<int64_t>(1, GetInt(counts->get(), 0, 0));
  const int64_t shards = GetInt(counts->get(), 0, 1);
  const int64_t older = GetInt(counts->get(), 0, 2);
  const int64_t share = (shards + live - 1) / live;
  const int64_t have = static_cast<int64_t>(held.size());
  if (older > 0 && !older_build_seen_) {
    spdlog::warn(
        "cluster: {} node(s) of an older delayd build are running; they fence writes "
        "differently, so this node takes no shard until they stop (doc/cluster.md, "
        "\"Upgrades\")",
        older);
  }
  older_build_seen_ = older > 0;
  if (have < share && older == 0) {
    static const std::string take = fmt::format(kTakeFormat, kShardLockClass);
    auto taken =
        c.Query(take, Params().Bytes(me).Int(lease).Int(share - have), {kText, kInt8, kInt8});
    if (!taken.ok()) return fail(taken.status());
    AddLeases(*taken, held);
  }
  std::sort(held.begin(), held.end(),
            [](const Lease& a, const Lease& b) { return a.shard < b.shard; });
  if (have > share) {
    // Gives up the highest shards above the share.
    ArrayParam surplus(kInt8);
    for (size_t i = static_cast<size_t>(share); i < held.size(); ++i) surplus.Int(held[i].shard);
    auto released = c.Query(kRelease, Params().Bytes(me).Array(surplus), {kText, kInt8Array});
    if (!released.ok()) return fail(released.status());
    held.resize(static_cast<size_t>(share));
  }
  s = c.Exec("COMMIT");
  if (!s.ok()) return fail(s);
  return held;
}

Status PgLeaseTable::Describe(const NodeCard& card) {
  auto conn = Conn();
  if (!conn.ok()) return conn.status();
  Params p;
  p.Bytes(options_.node_id).Bytes(card.beanstalk).Bytes(card.http).OptionalBytes(card.figures);
  return (*conn)->Query(kDescribe, p, {kText, kText, kText, kText}).status();
}

Status PgLeaseTable::Leave() {
  auto conn = Conn();
  if (!conn.ok()) return conn.status();
  PgConn& c = **conn;
  Status s = c.Exec("BEGIN");
  if (!s.ok()) return s;
  Params me;
  me.Bytes(options_.node_id);
  auto released = c.Query(kReleaseAll, me, {kText});
  if (released.ok()) released = c.Query(kForget, me, {kText});
  if (!released.ok()) {
    (void)c.Exec("ROLLBACK");
    return released.status();
  }
  return c.Exec("COMMIT");
}

Result<ClusterView> PgLeaseTable::View() {
  auto conn = Conn();
  if (!conn.ok()) return conn.status();
  PgConn& c = **conn;
  ClusterView view;
  auto now = c.Query(fmt::format("SELECT {}", Ms("now()")));
  if (!now.ok()) return now.status();
  view.now_ms = GetInt(now->get(), 0, 0);
  auto nodes = c.Query(
      fmt::format("SELECT id, {}, {}, (seen_at > now() - $1::float8 * interval '1 millisecond')"
                  "::int::int8, coalesce(beanstalk, ''), coalesce(http, ''), "
                  "coalesce(figures::text, ''), (SELECT count(*) FROM shard_leases l WHERE "
                  "l.owner = n.id AND l.expires_at > now()) FROM nodes n ORDER BY id",
                  Ms("started_at"), Ms("seen_at")),
      Params().Int(options_.lease_ms), {kInt8});
  if (!nodes.ok()) return nodes.status();
  for (int i = 0; i < PQntuples(nodes->get()); ++i) {
    const PGresult* r = nodes->get();
    view.nodes.push_back({GetBytes(r, i, 0), GetInt(r, i, 1), GetInt(r, i, 2), GetInt(r, i, 3) != 0,
                          GetBytes(r, i, 4), GetBytes(r, i, 5), GetBytes(r, i, 6),
                          static_cast<size_t>(GetInt(r, i, 7))});
  }
  auto shards = c.Query(fmt::format(
      "SELECT shard::int8, coalesce(owner, ''), epoch, CASE WHEN owner IS NULL THEN 0::int8 "
      "ELSE {} END, (owner IS NOT NULL AND expires_at > now())::int::int8 FROM shard_leases "
      "ORDER BY shard",
      Ms("expires_at")));
  if (!shards.ok()) return shards.status();
  for (int i = 0; i < PQntuples(shards->get()); ++i) {
    const PGresult* r = shards->get();
    view.shards.push_back({static_cast<int>(GetInt(r, i, 0)), GetBytes(r, i, 1), GetInt(r, i, 2),
                           GetInt(r, i, 3), GetInt(r, i, 4) != 0});
  }
  return view;
}

}  // namespace delayd::store::pg
