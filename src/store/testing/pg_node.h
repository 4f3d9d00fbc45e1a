// Test support: one node of a cluster on a test database, as the store
// sees it: a PgStore with the node's id, and its lease table on a
// connection of its own. Store tests use it as it is; cluster tests
// (cluster/testing/test_node.h) add a shard clock and a claimer.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/executor.h"
#include "store/postgres/pg_leases.h"
#include "store/postgres/pg_schema.h"
#include "store/postgres/pg_store.h"
#include "store/testing/inbox.h"

namespace delayd::store::testing {

// Makes the schema on `uri` with `shards` shards; a failure fails the test.
inline void MakeSchema(const std::string& uri, int shards) {
  auto c = pg::PgConn::Connect(uri, "schema");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  int made = 0;
  Status s = pg::Migrate(**c, shards, &made);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(made, shards);
}

// A lease table on `uri`, whose schema is made; null (and the test failed)
// if it cannot be opened.
inline std::unique_ptr<LeaseTable> OpenLeaseTable(const std::string& uri, LeaseOptions options) {
  auto t = pg::PgLeaseTable::Open(uri, std::move(options));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return nullptr;
  return std::move(t).value();
}

struct PgNode {
  std::string id;
  std::unique_ptr<PgStore> store;
  std::unique_ptr<LeaseTable> leases;
  std::map<int, int64_t> held;  // shard -> epoch, after the last round

  // Opens the store (on `clock`, null: the system's) and the lease table;
  // a failure fails the test.
  void Open(const std::string& uri, std::string node_id, int shards, int64_t lease_ms,
            Executor executor, const Clock* clock = nullptr) {
    id = std::move(node_id);
    auto s = PgStore::Open({.conninfo = uri, .shards = shards, .node_id = id, .clock = clock},
                           std::move(executor));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store = std::move(s).value();
    leases = OpenLeaseTable(uri, {.node_id = id, .lease_ms = lease_ms});
  }
  // One round of the leases; returns what it holds after it.
  std::vector<Lease> Round() {
    auto r = leases->Round();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    held.clear();
    if (!r.ok()) return {};
    for (const Lease& l : *r) held[l.shard] = l.epoch;
    return *r;
  }
  // Submits `m` and runs `inbox` (the store's executor) until it is answered.
  Status Apply(Mutation m, Inbox& inbox) {
    std::atomic<int> done{0};
    Status out;
    store->Submit(std::move(m), [&](const Status& s) {
      out = s;
      ++done;
    });
    inbox.RunUntil(done, 1);
    return out;
  }
  // The fence of a shard as this node last held it (epoch 0: never).
  change::Fence Fence(int shard) const {
    auto it = held.find(shard);
    return {shard, it == held.end() ? 0 : it->second};
  }
};

}  // namespace delayd::store::testing
