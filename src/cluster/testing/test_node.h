// Test support: nodes of a cluster on a test database. A TestNode is a
// store node (store/testing/pg_node.h: a PgStore with the node's id and its
// lease table) and, when asked for, a shard clock and a claimer hearing the
// store's notices. A TestCluster starts nodes and drives them: it runs the
// store answers (the Inbox) and ticks what asked to be woken.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cluster/claimer.h"
#include "cluster/shard_clock.h"
#include "common/clock.h"
#include "common/executor.h"
#include "store/testing/inbox.h"
#include "store/testing/pg_node.h"

namespace delayd::cluster::testing {

struct TestNode : store::testing::PgNode {
  std::unique_ptr<ShardClock> clock;
  std::unique_ptr<Claimer> claimer;
  int64_t clock_wake_us = INT64_MAX;
  int64_t claimer_wake_us = INT64_MAX;
  bool stalled = false;  // neither ticks nor renews (a SIGSTOP)
  uint64_t notices = 0;  // store notices heard

  // One round of the leases; returns what it holds after it, which the
  // clock, if any, takes.
  std::vector<store::Lease> Round() {
    std::vector<store::Lease> now = PgNode::Round();
    if (clock) clock->SetOwnership(store::Ownership(now));
    return now;
  }
  // Ticks what asked to be woken by `now_us` (steady), unless stalled.
  void TickDue(int64_t now_us) {
    if (stalled) return;
    if (clock && clock_wake_us <= now_us) {
      clock_wake_us = INT64_MAX;
      clock->Tick();
    }
    if (claimer && claimer_wake_us <= now_us) {
      claimer_wake_us = INT64_MAX;
      claimer->Tick();
    }
  }
};

// What a TestCluster node runs beside its store.
struct NodeParts {
  int64_t lease_ms = 60'000;
  bool clock = false;
  ShardClockOptions clock_options = {};
  bool claimer = false;
  ClaimerOptions claimer_options = {};
};

class TestCluster {
 public:
  TestCluster(std::string uri, int shards) : uri_(std::move(uri)), shards_(shards) {}
  // The stores first: their last answers reach clocks and claimers alive.
  ~TestCluster() {
    for (auto& n : nodes_) n->store->Close();
  }

  TestNode& Start(const std::string& id, NodeParts parts = {}) {
    auto node = std::make_unique<TestNode>();
    TestNode* n = node.get();
    nodes_.push_back(std::move(node));
    n->Open(uri_, id, shards_, parts.lease_ms, inbox_.executor());
    if (parts.clock) {
      n->clock = std::make_unique<ShardClock>(
          *n->store, *n->store, clock_, parts.clock_options,
          [n](int64_t us) { n->clock_wake_us = std::min(n->clock_wake_us, us); });
    }
    if (parts.claimer) {
      n->claimer = std::make_unique<Claimer>(
          *n->store, *n->store, clock_, parts.claimer_options,
          [n](int64_t us) { n->claimer_wake_us = std::min(n->claimer_wake_us, us); });
    }
    // As a server wires them: the owner's promotions serve its own waiters.
    if (n->clock && n->claimer) n->clock->ServeWaiters(n->claimer.get());
    if (parts.clock || parts.claimer) {
      Status s = n->store->Listen([n](std::vector<store::Notice> ns) {
        n->notices += ns.size();
        if (n->clock) n->clock->Hear(ns);
        if (n->claimer) n->claimer->Hear(ns);
      });
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    return *n;
  }

  // Runs the store answers and ticks the nodes until `done` holds or
  // `limit` passes; returns whether it held.
  bool Drive(const std::function<bool()>& done,
             std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      inbox_.RunFor(std::chrono::microseconds(500));
      for (auto& n : nodes_) n->TickDue(clock_.SteadyMicros());
    }
    return true;
  }

  store::testing::Inbox& inbox() { return inbox_; }
  const Clock& clock() const { return clock_; }

 private:
  const std::string uri_;
  const int shards_;
  SystemClock clock_;
  store::testing::Inbox inbox_;
  std::vector<std::unique_ptr<TestNode>> nodes_;
};

}  // namespace delayd::cluster::testing
