// Member on a real PostgreSQL: the rounds run by themselves and hand the
// leases on, the view shows nodes and shards as the database has them, two
// members share the shards, a leave hands them over at once, and a lost
// connection costs a round, not the leases.
#include "cluster/member.h"

#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "store/testing/inbox.h"
#include "store/testing/pg_node.h"
#include "store/testing/pg_test_db.h"

namespace delayd::cluster {
namespace {

using store::ClusterView;
using store::Lease;
using store::NodeView;
using store::ShardView;

using Steady = std::chrono::steady_clock;
constexpr int kShards = 12;

class MemberTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(db_.uri().empty()) << db_.error();
    store::testing::MakeSchema(db_.uri(), kShards);
  }

  // A member and the leases it handed on last.
  struct Running {
    std::unique_ptr<Member> member;
    std::vector<Lease> held;
    int handed = 0;
    std::set<int> Shards() const {
      std::set<int> out;
      for (const Lease& l : held) out.insert(l.shard);
      return out;
    }
  };
  std::unique_ptr<Running> Start(const std::string& id, int64_t lease_ms) {
    auto r = std::make_unique<Running>();
    Running* p = r.get();
    auto m = Member::Start(
        store::testing::OpenLeaseTable(db_.uri(), {.node_id = id, .lease_ms = lease_ms}),
        {.beanstalk = id + ":11300", .http = id + ":8080"}, inbox_.executor(),
        [p](std::vector<Lease> held) {
          p->held = std::move(held);
          ++p->handed;
        });
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (m.ok()) r->member = std::move(m).value();
    return r;
  }
  // Runs the executor until `done` holds, 15 s at most.
  bool Until(const std::function<bool()>& done) {
    const auto deadline = Steady::now() + std::chrono::seconds(15);
    while (!done()) {
      if (Steady::now() > deadline) return false;
      inbox_.RunFor(std::chrono::milliseconds(5));
    }
    return true;
  }
  ClusterView View(Member& m) {
    std::atomic<int> done{0};
    ClusterView out;
    m.View([&](Result<ClusterView> v) {
      EXPECT_TRUE(v.ok()) << v.status().ToString();
      if (v.ok()) out = std::move(v).value();
      ++done;
    });
    inbox_.RunUntil(done, 1);
    return out;
  }

  store::testing::PgTestDb db_;
  store::testing::Inbox inbox_;
};

TEST_F(MemberTest, ALoneMemberTakesEveryShardAndTheViewShowsIt) {
  auto a = Start("a", 600);
  a->member->SetFigures(R"({"jobs":3})");
  ASSERT_TRUE(Until([&] { return a->held.size() == static_cast<size_t>(kShards); }));
  // The figures are written with a round after they were set.
  ASSERT_TRUE(Until([&] {
    ClusterView v = View(*a->member);
    return v.nodes.size() == 1 && !v.nodes[0].figures.empty();
  }));
  ClusterView v = View(*a->member);
  ASSERT_EQ(v.nodes.size(), 1u);
  const NodeView& n = v.nodes[0];
  EXPECT_EQ(n.id, "a");
  EXPECT_TRUE(n.live);
  EXPECT_EQ(n.beanstalk, "a:11300");
  EXPECT_EQ(n.http, "a:8080");
  EXPECT_EQ(n.figures, R"({"jobs": 3})");  // as jsonb prints it
  EXPECT_EQ(n.shards, static_cast<size_t>(kShards));
  EXPECT_LE(n.started_ms, n.seen_ms);
  EXPECT_LE(n.seen_ms, v.now_ms);
  ASSERT_EQ(v.shards.size(), static_cast<size_t>(kShards));
  for (const ShardView& s : v.shards) {
    EXPECT_EQ(s.owner, "a");
    EXPECT_TRUE(s.live);
    EXPECT_GE(s.epoch, 1);
    EXPECT_GT(s.expires_ms, v.now_ms);
  }
  // Renewals change no lease, so nothing more is handed on.
  const int handed = a->handed;
  const uint64_t rounds = a->member->stats().rounds;
  ASSERT_TRUE(Until([&] { return a->member->stats().rounds >= rounds + 3; }));
  EXPECT_EQ(a->handed, handed);
}

// Two members end with a fair share each and every shard owned once; one
// leaves, and the other has every shard long before the leaver's leases
// would have run out.
TEST_F(MemberTest, TwoMembersShareTheShardsAndALeaveHandsThemOverAtOnce) {
  auto a = Start("a", 3000);
  ASSERT_TRUE(Until([&] { return a->held.size() == static_cast<size_t>(kShards); }));
  auto b = Start("b", 3000);
  const size_t most = kShards / 2 + 1;
  ASSERT_TRUE(Until([&] {
    std::set<int> both = a->Shards();
    for (int s : b->Shards()) both.insert(s);
    return both.size() == static_cast<size_t>(kShards) &&
           a->held.size() + b->held.size() == static_cast<size_t>(kShards) &&
           a->held.size() <= most && b->held.size() <= most && !b->held.empty();
  })) << "a holds "
      << a->held.size() << ", b " << b->held.size();

  const auto left = Steady::now();
  ASSERT_TRUE(a->member->Leave().ok());
  ClusterView v = View(*b->member);
  for (const ShardView& s : v.shards) EXPECT_NE(s.owner, "a") << "shard " << s.shard;
  ASSERT_EQ(v.nodes.size(), 1u);
  EXPECT_EQ(v.nodes[0].id, "b");
  ASSERT_TRUE(Until([&] { return b->held.size() == static_cast<size_t>(kShards); }));
  // A round is every second; the lease is 3 s.
  EXPECT_LT(Steady::now() - left, std::chrono::milliseconds(2500));
}

// The database drops the member's connection: a round fails, the next
// reconnects, and the leases never changed hands.
TEST_F(MemberTest, ALostConnectionCostsARoundNotTheLeases) {
  auto a = Start("a", 900);
  ASSERT_TRUE(Until([&] { return a->held.size() == static_cast<size_t>(kShards); }));
  const std::vector<Lease> before = a->held;
  PGconn* c = PQconnectdb(db_.uri().c_str());
  PQclear(PQexec(c,
                 "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                 "application_name = 'delayd-member' AND datname = current_database()"));
  PQfinish(c);
  ASSERT_TRUE(Until([&] { return a->member->stats().failed_rounds >= 1; }));
  const uint64_t rounds = a->member->stats().rounds;
  ASSERT_TRUE(Until([&] { return a->member->stats().rounds >= rounds + 2; }));
  EXPECT_EQ(a->held, before);
  ClusterView v = View(*a->member);
  for (const ShardView& s : v.shards) EXPECT_EQ(s.owner, "a");
}

// Cut off from the database for longer than a lease, a member hands on no
// leases (the node stops acting as an owner by itself); once it can connect
// again it takes the shards back, at new epochs.
TEST_F(MemberTest, AMemberCutOffPastItsLeaseHoldsNothingUntilItIsBack) {
  auto a = Start("a", 600);
  ASSERT_TRUE(Until([&] { return a->held.size() == static_cast<size_t>(kShards); }));
  const std::vector<Lease> before = a->held;
  // On the admin database: this one refuses connections while cut off.
  auto admin = [&](const std::string& sql) {
    PGconn* c = PQconnectdb(db_.admin_uri().c_str());
    PGresult* r = PQexec(c, sql.c_str());
    EXPECT_NE(PQresultStatus(r), PGRES_FATAL_ERROR) << sql << ": " << PQerrorMessage(c);
    PQclear(r);
    PQfinish(c);
  };
  const std::string db = db_.uri().substr(db_.uri().rfind('/') + 1);
  admin("ALTER DATABASE " + db + " ALLOW_CONNECTIONS false");
  admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '" + db + "'");
  ASSERT_TRUE(Until([&] { return a->held.empty(); })) << "still holds " << a->held.size();
  EXPECT_GE(a->member->stats().failed_rounds, 1u);

  admin("ALTER DATABASE " + db + " ALLOW_CONNECTIONS true");
  ASSERT_TRUE(Until([&] { return a->held.size() == static_cast<size_t>(kShards); }));
  for (size_t i = 0; i < before.size(); ++i) EXPECT_GT(a->held[i].epoch, before[i].epoch);
}

}  // namespace
}  // namespace delayd::cluster
