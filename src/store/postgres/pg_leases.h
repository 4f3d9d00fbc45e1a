// PgLeaseTable: the shard leases and node rows on PostgreSQL (tables
// shard_leases and nodes, made by pg_schema.cc), on a connection of its own
// (store/lease_table.h says what each call does).
//
// Fencing: a round takes a shard only with the shard's advisory lock
// exclusive (kShardLockClass in pg_schema.h), which a fenced write in
// flight holds shared (PgStore's lock_leases); renewals take no such lock
// and never wait for a write.
#pragma once

#include <memory>
#include <string>

#include "store/lease_table.h"
#include "store/postgres/pg_conn.h"

namespace delayd::store::pg {

class PgLeaseTable final : public LeaseTable {
 public:
  // Connects to `conninfo` (the store's), whose schema is made already.
  static Result<std::unique_ptr<PgLeaseTable>> Open(std::string conninfo, LeaseOptions options);

  Result<std::vector<Lease>> Round() override;
  Status Describe(const NodeCard& card) override;
  Status Leave() override;
  Result<ClusterView> View() override;
  const LeaseOptions& options() const override { return options_; }

 private:
  PgLeaseTable(std::string conninfo, LeaseOptions options)
      : conninfo_(std::move(conninfo)), options_(std::move(options)) {}
  // The connection, made again if it broke.
  Result<PgConn*> Conn();

  const std::string conninfo_;
  const LeaseOptions options_;
  std::unique_ptr<PgConn> conn_;
  bool older_build_seen_ = false;  // said once while they run
};

}  // namespace delayd::store::pg
