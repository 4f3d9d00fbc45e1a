// Leases: which node runs the clock of which shard (doc/cluster.md).
//
// The table shard_leases holds one row per shard: its owner (or none), an
// epoch that rises with every change of owner, and when the lease runs out,
// by PostgreSQL's clock, so that nodes whose clocks disagree still agree on
// who owns what. The table nodes holds one row per node, with when it was
// last seen.
//
// Each node calls Round() every lease/3 or so. A round, in one transaction:
// records the node as seen; renews the leases it holds that have not run
// out; counts the live nodes (seen within one lease) and takes free or
// expired shards up to its fair share, ceil(shards / live nodes); gives up
// any it holds above that share, so that a node that joins finds free
// shards within a round or two. A node that stops renewing loses its shards
// to the others once its leases run out; Leave() hands them over at once.
//
// A lease is its shard and epoch: every write made as the shard's owner
// must check both in its own transaction (doc/cluster.md, "fencing"), so a
// node that stalled past its lease cannot act on the shard after another
// took it, whatever it believes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/postgres/pg_conn.h"

namespace delayd::cluster {

struct LeaseOptions {
  std::string node_id;      // unique in the cluster
  int64_t lease_ms = 3000;  // how long a lease lasts unless renewed
};

struct Lease {
  int shard = 0;
  int64_t epoch = 0;
  bool operator==(const Lease&) const = default;
};

class Leases {
 public:
  explicit Leases(LeaseOptions options) : options_(std::move(options)) {}

  // One round on `conn` (outside any transaction). Returns the leases held
  // after it, by shard. A failed round changes nothing; the caller must act
  // as if it held only leases whose expiry it knows has not passed.
  Result<std::vector<Lease>> Round(store::pg::PgConn& conn);

  // Gives up every lease and the node's row at once (a clean stop): the
  // others take the shards at their next round, without waiting for expiry.
  Status Leave(store::pg::PgConn& conn);

  const LeaseOptions& options() const { return options_; }

 private:
  LeaseOptions options_;
};

}  // namespace delayd::cluster
