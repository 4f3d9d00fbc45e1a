// One owner per database (design.md, "One owner per database"). A delayd
// holds its PostgreSQL database with a session advisory lock for as long as
// it runs: a single node exclusively, a cluster node shared with the other
// nodes of its cluster. So a second single node, a cluster node on a single
// node's database and a single node on a cluster's database cannot take it.
//
// The lock lives as long as the session that took it; PostgreSQL itself
// releases it when the holder dies, so nothing stale is left to clean up.
// The holder is described by its session's application_name ("delayd single
// <node>" or "delayd cluster <node>"), its client address and the time it
// connected, all read from pg_stat_activity by whoever is refused.
#pragma once

#include <string>

#include "common/status.h"
#include "store/postgres/pg_conn.h"

namespace delayd::store::pg {

// Takes the database for this process on `conn`, a session of its own that
// must stay open while the process runs. `cluster`: share it with other
// cluster nodes; else hold it alone. `node` names this process to whoever is
// refused. Writes nothing to the database.
// Errors: kConflict naming the database, the holder and what to do; kIoError
// when the server cannot be asked.
Status HoldDatabase(PgConn& conn, bool cluster, const std::string& node);

// Whether `conn` still holds the database (false also when it broke).
bool HoldsDatabase(PgConn& conn);

}  // namespace delayd::store::pg
