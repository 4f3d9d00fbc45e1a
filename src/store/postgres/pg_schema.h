// The PostgreSQL schema: versioned migrations applied on open, and the shard
// of each job and timer. doc/store.md describes the tables.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/status.h"
#include "store/postgres/pg_conn.h"

namespace delayd::store::pg {

// The schema version this build creates and understands.
int SchemaVersion();

// Brings the database to SchemaVersion(), each migration in a transaction
// of its own, under an advisory lock so that nodes starting together apply
// each once. A new database gets `shards` shards; `*shards_out` is the
// count the database has. A database of a newer version is an error.
Status Migrate(PgConn& conn, int shards, int* shards_out);

// The advisory lock that fences a shard, as two int4 (classid "dels",
// objid the shard). An owner's write holds it shared from before it reads
// the shard's lease until it commits (the store's lock_leases); a take of
// the lease by another node must get it exclusive (pg_leases.cc), so it
// passes the shard by while a write is in flight, and the next write of the
// old owner, which locks first and then reads, finds the new epoch. Unlike
// a row lock, it writes nothing to the WAL (doc/cluster.md, "Fencing").
constexpr int32_t kShardLockClass = 0x64656c73;

// A job's shard: from its key when it has one, so that the unique index
// on (shard, tube, key) holds across all shards; else from its id. A job
// never moves.
int JobShard(uint64_t id, std::string_view tube, std::string_view key, int shards);
// A timer's shard, from its id.
int TimerShard(uint64_t id, int shards);

}  // namespace delayd::store::pg
