// LeaseTable: the shard leases and node rows cluster nodes share
// (doc/cluster.md, "Leases and fencing"): what cluster::Member needs of a
// store beyond store.h and shared_queue.h. PostgreSQL's is
// store/postgres/pg_leases.h; SQLite has none (one node, no leases).
//
// A lease is a shard and an epoch that rises with every change of owner.
// Expiry is by the database's clock, so that nodes whose clocks disagree
// still agree on who owns what. Every write made as a shard's owner checks
// its lease in its own transaction (change::Fence), so a node that stalled
// past its lease cannot act on the shard after another took it.
//
// Threads: a table is used by one thread at a time (the member's); it owns
// its connection and makes it again after it broke.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace delayd::store {

struct LeaseOptions {
  std::string node_id;      // unique in the cluster
  int64_t lease_ms = 3000;  // how long a lease lasts unless renewed
};

struct Lease {
  int shard = 0;
  int64_t epoch = 0;
  bool operator==(const Lease&) const = default;
};

// What a node tells the others of itself with each round, for the view.
struct NodeCard {
  std::string beanstalk = {};  // where clients reach it ("host:port"), or empty
  std::string http = {};
  std::string figures = {};  // a JSON object, or empty
};

// The cluster as the database has it (GET /v1/cluster).
struct NodeView {
  std::string id;
  int64_t started_ms = 0;
  int64_t seen_ms = 0;
  bool live = false;  // seen within one lease
  std::string beanstalk;
  std::string http;
  std::string figures;  // a JSON object, or empty
  size_t shards = 0;    // leases held that have not run out
};
struct ShardView {
  int shard = 0;
  std::string owner;  // empty: free
  int64_t epoch = 0;
  int64_t expires_ms = 0;  // 0: free
  bool live = false;       // an owner whose lease has not run out
};
struct ClusterView {
  int64_t now_ms = 0;  // the database's clock
  std::vector<NodeView> nodes;
  std::vector<ShardView> shards;
};

class LeaseTable {
 public:
  virtual ~LeaseTable() = default;

  // One round, in one transaction: records the node as seen; renews the
  // leases it holds that have not run out; counts the live nodes (seen
  // within one lease) and takes free or expired shards up to its fair
  // share, ceil(shards / live nodes); gives up the highest it holds above
  // that share, so that a node that joins finds free shards within a round
  // or two. Returns the leases held after it, by shard. A failed round
  // changes nothing; the caller must act as if it held only leases whose
  // expiry it knows has not passed.
  virtual Result<std::vector<Lease>> Round() = 0;

  // Records `card` in the node's row (after a round made the row).
  virtual Status Describe(const NodeCard& card) = 0;

  // Gives up every lease and the node's row at once (a clean stop): the
  // others take the shards at their next round, without waiting for expiry.
  virtual Status Leave() = 0;

  // Every node and shard, as the database has them now.
  virtual Result<ClusterView> View() = 0;

  virtual const LeaseOptions& options() const = 0;
};

}  // namespace delayd::store
