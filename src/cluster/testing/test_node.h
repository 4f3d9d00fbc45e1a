// Test support: a node of a cluster on a test database: its store (a
// PgStore with the node's id) and its leases, on a connection of their own.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cluster/leases.h"
#include "common/executor.h"
#include "store/postgres/pg_store.h"
#include "store/testing/inbox.h"

namespace delayd::cluster::testing {

struct TestNode {
  std::string id;
  std::unique_ptr<store::PgStore> store;
  std::unique_ptr<Leases> leases;
  std::unique_ptr<store::pg::PgConn> conn;
  std::map<int, int64_t> held;  // shard -> epoch, after the last round

  // Opens the store and the connection; a failure fails the test.
  void Open(const std::string& uri, std::string node_id, int shards, int64_t lease_ms,
            Executor executor) {
    id = std::move(node_id);
    auto s = store::PgStore::Open({.conninfo = uri, .shards = shards, .node_id = id},
                                  std::move(executor));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store = std::move(s).value();
    auto c = store::pg::PgConn::Connect(uri, id.c_str());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    conn = std::move(c).value();
    leases = std::make_unique<Leases>(LeaseOptions{.node_id = id, .lease_ms = lease_ms});
  }
  // One round of the leases; returns what it holds after it.
  std::vector<Lease> Round() {
    auto r = leases->Round(*conn);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    held.clear();
    if (!r.ok()) return {};
    for (const Lease& l : *r) held[l.shard] = l.epoch;
    return *r;
  }
  // Submits `m` and runs `inbox` (the store's executor) until it is answered.
  Status Apply(store::Mutation m, store::testing::Inbox& inbox) {
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
  store::change::Fence Fence(int shard) const {
    auto it = held.find(shard);
    return {shard, it == held.end() ? 0 : it->second};
  }
};

}  // namespace delayd::cluster::testing
