// ShardClock on a real PostgreSQL, with nodes of their own (stores with node
// ids, leases, clocks) on one database: due jobs of owned shards become
// ready at their due time, never before; a taken shard loads what was
// written before and hears what is written after; another node takes over
// when the owner stalls, and the stale owner's writes are refused; dead
// nodes' reservations are swept back (doc/cluster.md).
#include "cluster/shard_clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "cluster/testing/flaky_queue.h"
#include "cluster/testing/test_node.h"
#include "store/testing/inbox.h"
#include "store/testing/pg_test_db.h"

namespace delayd::cluster {
namespace {

using store::JobRecord;
using store::Mutation;
using store::StoredState;
using Steady = std::chrono::steady_clock;

constexpr int kShards = 8;

using Node = testing::TestNode;

class ShardClockTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(db_.uri().empty()) << db_.error(); }

  // A node with a clock; `with_clock` false: a node that only serves
  // clients (puts, claims).
  Node& Start(const std::string& id, int64_t lease_ms = 60'000, ShardClockOptions o = {},
              bool with_clock = true) {
    return cluster_.Start(id, {.lease_ms = lease_ms, .clock = with_clock, .clock_options = o});
  }
  bool Drive(const std::function<bool()>& done) { return cluster_.Drive(done); }

  Status Put(Node& n, const JobRecord& j) { return n.Apply(Mutation::Insert(j), cluster_.inbox()); }
  static JobRecord Delayed(uint64_t id, int64_t due_ms) {
    JobRecord j;
    j.id = id;
    j.tube = "d";
    j.state = StoredState::kDelayed;
    j.due_ms = due_ms;
    j.ttr_ms = 1000;
    j.body = "b";
    return j;
  }
  // The state of every job, by id.
  std::map<uint64_t, StoredState> States() {
    std::map<uint64_t, StoredState> out;
    PGconn* c = PQconnectdb(db_.uri().c_str());
    PGresult* r = PQexec(c, "SELECT id, state FROM jobs");
    for (int i = 0; i < PQntuples(r); ++i) {
      out[std::stoull(PQgetvalue(r, i, 0))] =
          static_cast<StoredState>(std::stoi(PQgetvalue(r, i, 1)));
    }
    PQclear(r);
    PQfinish(c);
    return out;
  }
  int64_t Now() const { return cluster_.clock().WallMillis(); }

  // Drives until every job of `ids` is ready, checking on the way (every
  // 10 ms or so) that none is ready before its due time.
  bool ReadyOnTime(const std::map<uint64_t, int64_t>& due) {
    auto next_look = Steady::now();
    return Drive([&] {
      if (Steady::now() < next_look) return false;
      next_look = Steady::now() + std::chrono::milliseconds(10);
      auto states = States();
      const int64_t seen = Now();
      size_t ready = 0;
      for (const auto& [id, due_ms] : due) {
        if (states[id] != StoredState::kReady) continue;
        ++ready;
        EXPECT_GE(seen, due_ms) << "job " << id << " was ready before its due time";
      }
      return ready == due.size();
    });
  }

  store::testing::PgTestDb db_;
  testing::TestCluster cluster_{db_.uri(), kShards};
};

// Jobs written before the owner took its shards (some overdue) and jobs
// written by another node after (heard as due notices) become ready at
// their due time; a job due beyond the horizon stays delayed and unheld.
TEST_F(ShardClockTest, OwnedDueJobsBecomeReadyAtTheirTimeWhoeverWroteThem) {
  Node& a = Start("a");
  Node& b = Start("b", 60'000, {}, /*with_clock=*/false);
  std::map<uint64_t, int64_t> due;
  const int64_t t0 = Now();
  for (uint64_t id = 1; id <= 16; ++id) {
    due[id] = id <= 4 ? t0 - 60'000 : t0 + 300 + static_cast<int64_t>(id) * 20;
    ASSERT_TRUE(Put(b, Delayed(id, due[id])).ok());
  }
  ASSERT_TRUE(Put(b, Delayed(100, t0 + 10 * 60'000)).ok());
  a.Round();
  ASSERT_TRUE(Drive([&] { return a.clock->stats().held >= 12; }))
      << a.clock->stats().held << " held";
  // Written after the load, by b: heard.
  for (uint64_t id = 17; id <= 24; ++id) {
    due[id] = Now() + 200 + static_cast<int64_t>(id) * 10;
    ASSERT_TRUE(Put(b, Delayed(id, due[id])).ok());
  }
  ASSERT_TRUE(ReadyOnTime(due));
  EXPECT_EQ(States()[100], StoredState::kDelayed);
  EXPECT_TRUE(Drive([&] { return a.clock->stats().promoted == 24; })) << a.clock->stats().promoted;
  const ShardClockStats st = a.clock->stats();
  EXPECT_EQ(st.shards, static_cast<size_t>(kShards));
  EXPECT_EQ(st.held, 0u);
  EXPECT_EQ(st.fencing_refusals, 0u);
}

// Jobs that come due while a promotion is in flight wait for its answer and
// then go in one promotion, not a write each: under 2,000 due jobs a second
// a write per tick once queued promotions faster than the writer took them.
TEST_F(ShardClockTest, JobsDueWhileAPromotionIsInFlightGoInOneWrite) {
  Node& a = Start("a");
  // Six jobs of one shard, due 20 ms apart: without the wait each tick
  // below would be a write of its own.
  std::vector<int64_t> dues;
  const int64_t t0 = Now() + 300;
  uint64_t id = 0;
  for (int i = 1; i <= 6; ++i) {
    JobRecord j = Delayed(++id, t0 + i * 20);
    while (a.store->ShardOf(j) != 0) j.id = ++id;
    ASSERT_TRUE(Put(a, j).ok());
    dues.push_back(j.due_ms);
  }
  a.Round();
  ASSERT_TRUE(Drive([&] { return a.clock->stats().held == 6; })) << a.clock->stats().held;
  // A tick at each due time, the store's answers not run between them: the
  // first promotion stays in flight throughout.
  for (int64_t due_ms : dues) {
    while (Now() < due_ms) {
    }
    a.clock->Tick();
  }
  ASSERT_TRUE(Drive([&] { return a.clock->stats().promoted == 6; })) << a.clock->stats().promoted;
  EXPECT_EQ(a.clock->stats().promotions, 2u);
  EXPECT_EQ(a.clock->stats().held, 0u);
}

// Jobs of several shards due at one tick go in one write: a write per shard
// made the writer's cost a statement per due job, since jobs due within a
// millisecond rarely share one of 256 shards.
TEST_F(ShardClockTest, JobsOfSeveralShardsDueAtOneTickGoInOneWrite) {
  Node& a = Start("a");
  const int64_t due_ms = Now() + 300;
  std::set<int> shards;
  for (uint64_t id = 1; shards.size() < 4; ++id) {
    JobRecord j = Delayed(id, due_ms);
    ASSERT_TRUE(Put(a, j).ok());
    shards.insert(a.store->ShardOf(j));
  }
  a.Round();
  const size_t put = States().size();
  ASSERT_TRUE(Drive([&] { return a.clock->stats().held == put; })) << a.clock->stats().held;
  // One tick after the due time, the store's answers not run before it.
  while (Now() <= due_ms) {
  }
  a.clock->Tick();
  ASSERT_TRUE(Drive([&] { return a.clock->stats().promoted == put; })) << a.clock->stats().promoted;
  EXPECT_EQ(a.clock->stats().promotions, 1u);
  for (const auto& [id, state] : States()) EXPECT_EQ(state, StoredState::kReady) << id;
}

// One shard's lease moves while the owner still holds the others: the
// write of the round is refused as a whole, the owner writes again shard by
// shard, drops the one that moved, and promotes the rest.
TEST_F(ShardClockTest, ARefusedRoundDropsOnlyTheShardsThatMoved) {
  Node& a = Start("a");
  const int64_t due_ms = Now() + 300;
  std::map<int, uint64_t> job_of;  // shard -> a job of it
  for (uint64_t id = 1; job_of.size() < 3; ++id) {
    JobRecord j = Delayed(id, due_ms);
    if (job_of.count(a.store->ShardOf(j)) != 0) continue;
    ASSERT_TRUE(Put(a, j).ok());
    job_of[a.store->ShardOf(j)] = id;
  }
  a.Round();
  ASSERT_TRUE(Drive([&] { return a.clock->stats().held == 3; })) << a.clock->stats().held;
  // Another node takes one shard (as after a's lease on it ran out).
  const int moved = job_of.begin()->first;
  PGconn* c = PQconnectdb(db_.uri().c_str());
  PQclear(PQexec(
      c, ("UPDATE shard_leases SET owner='b', epoch=epoch+1 WHERE shard=" + std::to_string(moved))
             .c_str()));
  PQfinish(c);
  ASSERT_TRUE(Drive([&] { return a.clock->stats().promoted == 2; })) << a.clock->stats().promoted;
  EXPECT_TRUE(Drive([&] { return a.clock->stats().shards == static_cast<size_t>(kShards - 1); }));
  // The round's refusal, then the moved shard's own.
  EXPECT_EQ(a.clock->stats().fencing_refusals, 2u);
  const auto states = States();
  for (const auto& [shard, id] : job_of) {
    EXPECT_EQ(states.at(id), shard == moved ? StoredState::kDelayed : StoredState::kReady)
        << "shard " << shard;
  }
}

// The owner stalls past its lease: another node takes the shards and makes
// the jobs ready on time; the stale owner, once it runs again, is refused
// by the database and drops every shard.
TEST_F(ShardClockTest, AnotherNodeTakesOverAStalledOwnerWhichIsThenFenced) {
  Node& a = Start("a", /*lease_ms=*/300);
  Node& b = Start("b", /*lease_ms=*/300);
  a.Round();
  std::map<uint64_t, int64_t> due;
  for (uint64_t id = 1; id <= 16; ++id) {
    due[id] = Now() + 1500 + static_cast<int64_t>(id) * 10;
    ASSERT_TRUE(Put(a, Delayed(id, due[id])).ok());
  }
  ASSERT_TRUE(Drive([&] { return a.clock->stats().held == 16; }));
  a.stalled = true;
  const auto deadline = Steady::now() + std::chrono::seconds(10);
  while (b.clock->stats().shards < static_cast<size_t>(kShards)) {
    ASSERT_LT(Steady::now(), deadline) << "b never took a's shards";
    cluster_.inbox().RunFor(std::chrono::milliseconds(20));
    b.Round();
  }
  ASSERT_TRUE(ReadyOnTime(due));
  // A promote is visible before its answer comes back.
  EXPECT_TRUE(Drive([&] { return b.clock->stats().promoted == 16; })) << b.clock->stats().promoted;

  // a wakes with its old leases and promotes what it held: refused.
  a.stalled = false;
  ASSERT_TRUE(Drive([&] { return a.clock->stats().shards == 0; }));
  EXPECT_GE(a.clock->stats().fencing_refusals, 1u);
  EXPECT_EQ(a.clock->stats().promoted, 0u);
  EXPECT_EQ(a.clock->stats().held, 0u);
}

// A reservation whose node died (it never expires it itself) goes back to
// ready once its deadline is past by the grace, counted as a timeout.
TEST_F(ShardClockTest, TheOwnerSweepsADeadNodesExpiredReservationsBack) {
  Node& a = Start("a", 60'000, {.sweep_ms = 50, .sweep_grace_ms = 100});
  Node& c = Start("c", 60'000, {}, /*with_clock=*/false);
  JobRecord j = Delayed(1, 0);
  j.state = StoredState::kReady;
  ASSERT_TRUE(Put(c, j).ok());
  std::atomic<int> claimed{0};
  const int64_t claim_ms = Now();
  c.store->Claim({{"d"}, 1, claim_ms}, [&](Result<std::vector<JobRecord>> r) {
    EXPECT_TRUE(r.ok() && r->size() == 1);
    ++claimed;
  });
  cluster_.inbox().RunUntil(claimed, 1);  // c then "dies" holding it
  const int64_t deadline_ms = claim_ms + 1000;
  a.Round();
  ASSERT_TRUE(Drive([&] { return States()[1] == StoredState::kReady; }));
  EXPECT_GE(Now(), deadline_ms + 100);
  auto back = a.store->Get(1);
  ASSERT_TRUE(back.ok() && back->has_value());
  EXPECT_EQ((*back)->counters.timeouts, 1u);
  EXPECT_EQ((*back)->reserved_by, "");
}

// Loading again (after notices may have been missed) holds each job once;
// a shard given up takes its jobs off the clock.
TEST_F(ShardClockTest, ReloadsHoldEachJobOnceAndALostShardIsDropped) {
  Node& a = Start("a");
  std::map<int, size_t> per_shard;
  for (uint64_t id = 1; id <= 40; ++id) {
    JobRecord j = Delayed(id, Now() + 30'000);
    ASSERT_TRUE(Put(a, j).ok());
    ++per_shard[a.store->ShardOf(j)];
  }
  a.Round();
  ASSERT_TRUE(Drive([&] { return a.clock->stats().held == 40; }));
  a.clock->Hear({store::Notice{.kind = store::Notice::Kind::kListening}});
  EXPECT_EQ(a.clock->stats().pending, static_cast<size_t>(kShards));
  ASSERT_TRUE(Drive([&] { return a.clock->stats().pending == 0; }));
  EXPECT_EQ(a.clock->stats().held, 40u);

  // Keep only shard 0..3.
  std::vector<store::Lease> keep;
  size_t kept = 0;
  for (int s = 0; s < 4; ++s) {
    keep.push_back({s, 1});
    kept += per_shard[s];
  }
  a.clock->SetOwnership(store::Ownership(keep));
  EXPECT_EQ(a.clock->stats().shards, 4u);
  EXPECT_EQ(a.clock->stats().held, kept);
}

// A load that fails (a lost connection) is made again, and the jobs it was
// for become ready all the same.
TEST_F(ShardClockTest, AFailedLoadIsMadeAgain) {
  Node& a = Start("a", 60'000, {}, /*with_clock=*/false);
  testing::FlakyQueue flaky(*a.store, cluster_.inbox().executor());
  flaky.fail_dues = 2;
  a.clock = std::make_unique<ShardClock>(
      *a.store, flaky, cluster_.clock(), ShardClockOptions{.retry_ms = 50},
      [&a](int64_t us) { a.clock_wake_us = std::min(a.clock_wake_us, us); });
  ASSERT_TRUE(a.store->Listen([&a](std::vector<store::Notice> ns) { a.clock->Hear(ns); }).ok());
  const int64_t due = Now() + 200;
  ASSERT_TRUE(Put(a, Delayed(1, due)).ok());
  a.Round();
  ASSERT_TRUE(Drive([&] { return States()[1] == StoredState::kReady; }));
  EXPECT_GE(Now(), due);
  EXPECT_EQ(flaky.fail_dues.load(), 0) << "the failures were not met";
  // Counted once its write's answer is run.
  EXPECT_TRUE(Drive([&] { return a.clock->stats().promoted == 1; }));
}

}  // namespace
}  // namespace delayd::cluster
