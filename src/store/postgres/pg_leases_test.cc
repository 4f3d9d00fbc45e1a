// Shard leases on a real PostgreSQL: fair shares as nodes join, expiry of a
// node that stops renewing, hand-over on leave, and epochs that rise with
// every change of owner.
#include "store/postgres/pg_leases.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "store/postgres/pg_schema.h"
#include "store/testing/pg_test_db.h"

namespace delayd::store::pg {
namespace {

constexpr int kShards = 16;

class LeasesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(db_.uri().empty()) << db_.error();
    auto c = PgConn::Connect(db_.uri(), "leases-test");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    int shards = 0;
    ASSERT_TRUE(Migrate(**c, kShards, &shards).ok());
    ASSERT_EQ(shards, kShards);
  }
  // A node of its own, on a connection of its own.
  struct Node {
    std::unique_ptr<PgLeaseTable> leases;
    std::vector<Lease> held;
    void Round() {
      auto r = leases->Round();
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      held = *r;
    }
    std::set<int> Shards() const {
      std::set<int> out;
      for (const Lease& l : held) out.insert(l.shard);
      return out;
    }
  };
  std::unique_ptr<Node> Start(const std::string& id, int64_t lease_ms = 60'000) {
    auto t = PgLeaseTable::Open(db_.uri(), {.node_id = id, .lease_ms = lease_ms});
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return std::make_unique<Node>(Node{std::move(t).value(), {}});
  }
  // The owner and epoch of every shard, as the table has them.
  std::map<int, std::pair<std::string, int64_t>> Table() {
    std::map<int, std::pair<std::string, int64_t>> out;
    PGconn* c = PQconnectdb(db_.uri().c_str());
    PGresult* r = PQexec(c, "SELECT shard, coalesce(owner, ''), epoch FROM shard_leases");
    for (int i = 0; i < PQntuples(r); ++i) {
      out[std::stoi(PQgetvalue(r, i, 0))] = {PQgetvalue(r, i, 1), std::stoll(PQgetvalue(r, i, 2))};
    }
    PQclear(r);
    PQfinish(c);
    return out;
  }
  // Each shard held by exactly one of `nodes`, as each believes and as the
  // table says, with the table's epoch.
  void ExpectOneOwnerEach(const std::vector<Node*>& nodes) {
    auto table = Table();
    std::map<int, int> holders;
    for (Node* n : nodes) {
      for (const Lease& l : n->held) {
        ++holders[l.shard];
        EXPECT_EQ(table[l.shard].first, n->leases->options().node_id) << "shard " << l.shard;
        EXPECT_EQ(table[l.shard].second, l.epoch) << "shard " << l.shard;
      }
    }
    EXPECT_EQ(holders.size(), static_cast<size_t>(kShards));
    for (auto [shard, count] : holders) EXPECT_EQ(count, 1) << "shard " << shard;
  }

  store::testing::PgTestDb db_;
};

TEST_F(LeasesTest, ASingleNodeTakesEveryShardAndRenewingKeepsTheEpochs) {
  auto a = Start("a");
  a->Round();
  ASSERT_EQ(a->held.size(), static_cast<size_t>(kShards));
  for (const Lease& l : a->held) EXPECT_EQ(l.epoch, 1) << "shard " << l.shard;
  const auto first = a->held;
  a->Round();
  EXPECT_EQ(a->held, first) << "a renewal changed an epoch";
  ExpectOneOwnerEach({a.get()});
}

// No node holds more than ceil(S/N)+1 once stable, and every shard has an
// owner; a shard that moved has a higher epoch than before.
TEST_F(LeasesTest, NodesThatJoinGetAFairShareWithinAFewRounds) {
  auto a = Start("a");
  a->Round();
  const std::map<int, std::pair<std::string, int64_t>> before = Table();
  auto b = Start("b");
  auto c = Start("c");
  for (int round = 0; round < 4; ++round) {
    a->Round();
    b->Round();
    c->Round();
  }
  ExpectOneOwnerEach({a.get(), b.get(), c.get()});
  const size_t most = (kShards + 2) / 3 + 1;
  for (Node* n : {a.get(), b.get(), c.get()}) {
    EXPECT_LE(n->held.size(), most) << n->leases->options().node_id;
    EXPECT_GE(n->held.size(), 1u) << n->leases->options().node_id;
  }
  for (const Lease& l : b->held) EXPECT_GT(l.epoch, before.at(l.shard).second);
  for (const Lease& l : c->held) EXPECT_GT(l.epoch, before.at(l.shard).second);
}

// A node that stops renewing (dead, or stalled) loses its shards once its
// leases run out; when it comes back it holds none of them, and a write
// under its old epoch would be refused (doc/cluster.md).
TEST_F(LeasesTest, ANodeThatStopsRenewingLosesItsShardsOnceTheyRunOut) {
  const int64_t lease_ms = 1000;  // rounds take milliseconds: far shorter
  auto a = Start("a", lease_ms);
  auto b = Start("b", lease_ms);
  for (int round = 0; round < 3; ++round) {
    a->Round();
    b->Round();
  }
  ASSERT_EQ(a->held.size(), static_cast<size_t>(kShards / 2));
  const std::vector<Lease> a_had = a->held;
  // Only b goes on, as a node's rounds would every lease/3.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (b->held.size() < static_cast<size_t>(kShards) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(lease_ms / 3));
    b->Round();
  }
  ASSERT_EQ(b->held.size(), static_cast<size_t>(kShards)) << "a's shards never moved";
  std::map<int, int64_t> b_epoch;
  for (const Lease& l : b->held) b_epoch[l.shard] = l.epoch;
  for (const Lease& l : a_had) EXPECT_GT(b_epoch[l.shard], l.epoch) << "shard " << l.shard;
  a->Round();  // a wakes up: b's leases are fresh, so a gets nothing back at once
  for (const Lease& l : a->held) {
    for (const Lease& old : a_had) EXPECT_FALSE(l == old) << "kept shard " << l.shard;
  }
  b->Round();  // a is live again: b gives up its surplus, and a takes it
  a->Round();
  ExpectOneOwnerEach({a.get(), b.get()});
  EXPECT_EQ(a->held.size(), static_cast<size_t>(kShards / 2));
}

// A clean stop hands every shard over at once: the others take them at
// their next round, without waiting for the (here one-minute) lease.
TEST_F(LeasesTest, LeaveHandsTheShardsOverAtOnce) {
  auto a = Start("a");
  auto b = Start("b");
  for (int round = 0; round < 3; ++round) {
    a->Round();
    b->Round();
  }
  ASSERT_EQ(a->held.size(), static_cast<size_t>(kShards / 2));
  const std::vector<Lease> a_had = a->held;
  ASSERT_TRUE(a->leases->Leave().ok());
  b->Round();
  ASSERT_EQ(b->held.size(), static_cast<size_t>(kShards));
  std::map<int, int64_t> b_epoch;
  for (const Lease& l : b->held) b_epoch[l.shard] = l.epoch;
  for (const Lease& l : a_had) EXPECT_EQ(b_epoch[l.shard], l.epoch + 2) << "released, then taken";
  ExpectOneOwnerEach({b.get()});
}

// Rounds of several nodes at once never give one shard to two of them: no
// (shard, epoch) is ever held by two nodes, and no take replaces an owner
// whose lease has not run out (a trigger logs any such change; with leases
// of a minute, none runs out here).
TEST_F(LeasesTest, ConcurrentRoundsNeverTakeAShardFromALiveOwner) {
  ASSERT_TRUE(db_.Exec(R"sql(
    CREATE TABLE steals (shard smallint, old_owner text, new_owner text);
    CREATE FUNCTION log_steal() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF OLD.owner IS NOT NULL AND NEW.owner IS NOT NULL AND OLD.owner <> NEW.owner
         AND OLD.expires_at > now() THEN
        INSERT INTO steals VALUES (OLD.shard, OLD.owner, NEW.owner);
      END IF;
      RETURN NEW;
    END $$;
    CREATE TRIGGER steal BEFORE UPDATE ON shard_leases FOR EACH ROW EXECUTE FUNCTION log_steal();
  )sql"))
      << db_.error();
  std::vector<std::unique_ptr<Node>> nodes;
  for (const char* id : {"a", "b", "c"}) nodes.push_back(Start(id));
  std::vector<std::vector<Lease>> seen(nodes.size());  // every lease each node ever held
  std::vector<std::thread> threads;
  for (size_t i = 0; i < nodes.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int round = 0; round < 30; ++round) {
        nodes[i]->Round();
        seen[i].insert(seen[i].end(), nodes[i]->held.begin(), nodes[i]->held.end());
      }
    });
  }
  for (auto& t : threads) t.join();
  std::map<std::pair<int, int64_t>, size_t> holder;
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const Lease& l : seen[i]) {
      auto [it, fresh] = holder.emplace(std::make_pair(l.shard, l.epoch), i);
      EXPECT_TRUE(fresh || it->second == i)
          << "shard " << l.shard << " epoch " << l.epoch << " held by two nodes";
    }
  }
  PGconn* c = PQconnectdb(db_.uri().c_str());
  PGresult* r = PQexec(c, "SELECT count(*) FROM steals");
  EXPECT_STREQ(PQgetvalue(r, 0, 0), "0") << "a take replaced a live owner";
  PQclear(r);
  PQfinish(c);
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& n : nodes) n->Round();  // settled, one after another
  }
  ExpectOneOwnerEach({nodes[0].get(), nodes[1].get(), nodes[2].get()});
}

// A live node of a build that fences by row locks (no `fencing` in its
// nodes row) would take a shard without waiting for this build's advisory
// lock, so while one lives this build takes no shard; it renews what it
// holds, and takes its share once the older node is gone.
TEST_F(LeasesTest, ThisBuildTakesNoShardWhileANodeOfAnOlderBuildLives) {
  auto a = Start("a");
  a->Round();
  ASSERT_EQ(a->held.size(), static_cast<size_t>(kShards));
  ASSERT_TRUE(a->leases->Leave().ok());
  ASSERT_TRUE(db_.Exec("INSERT INTO nodes (id, seen_at) VALUES ('old', now())")) << db_.error();
  auto b = Start("b");
  b->Round();
  EXPECT_TRUE(b->held.empty()) << "took " << b->held.size() << " shards beside an older node";
  ASSERT_TRUE(db_.Exec("UPDATE nodes SET seen_at = now() - interval '1 hour' WHERE id = 'old'"))
      << db_.error();
  b->Round();
  EXPECT_EQ(b->held.size(), static_cast<size_t>(kShards));
  ExpectOneOwnerEach({b.get()});
}

}  // namespace
}  // namespace delayd::store::pg
