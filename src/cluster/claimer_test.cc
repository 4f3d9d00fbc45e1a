// Claimer on a real PostgreSQL, with three nodes on one database: jobs put
// through every node are granted exactly once, through every node; a due
// job reaches a waiter on a node that owns none of the shards; waiters get
// only the tubes they watch; a job claimed for a waiter that left goes back
// to ready for the others (doc/cluster.md).
#include "cluster/claimer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "cluster/testing/flaky_queue.h"
#include "cluster/testing/test_node.h"
#include "store/testing/pg_test_db.h"

namespace delayd::cluster {
namespace {

using store::JobRecord;
using store::Mutation;
using store::StoredState;
using testing::NodeParts;
using testing::TestNode;

constexpr int kShards = 8;

class ClaimerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(db_.uri().empty()) << db_.error(); }

  TestNode& Start(const std::string& id, bool clock = false) {
    return cluster_.Start(id, NodeParts{.clock = clock, .claimer = true});
  }
  Status Put(TestNode& n, const JobRecord& j) {
    return n.Apply(Mutation::Insert(j), cluster_.inbox());
  }
  static JobRecord Job(uint64_t id, const std::string& tube, int64_t due_ms = 0) {
    JobRecord j;
    j.id = id;
    j.tube = tube;
    j.state = due_ms > 0 ? StoredState::kDelayed : StoredState::kReady;
    j.due_ms = due_ms;
    j.ttr_ms = 60'000;
    j.body = "job " + std::to_string(id);
    return j;
  }
  int64_t Now() const { return cluster_.clock().WallMillis(); }

  // Keeps `count` waiters of `tubes` on `n`, each waiting again once
  // granted, recording what they get.
  struct Consumers {
    std::vector<JobRecord> got;
    std::vector<int64_t> at;  // wall ms of each grant
  };
  void Consume(TestNode& n, std::vector<std::string> tubes, int count, Consumers& into) {
    for (int i = 0; i < count; ++i) WaitOne(n, tubes, into);
  }
  void WaitOne(TestNode& n, std::vector<std::string> tubes, Consumers& into) {
    n.claimer->Wait(tubes, [this, &n, tubes, &into](JobRecord j) {
      EXPECT_EQ(j.state, StoredState::kReserved);
      EXPECT_EQ(j.reserved_by, n.id);
      into.got.push_back(std::move(j));
      into.at.push_back(Now());
      WaitOne(n, tubes, into);
    });
  }

  store::testing::PgTestDb db_;
  testing::TestCluster cluster_{db_.uri(), kShards};
};

TEST_F(ClaimerTest, JobsPutThroughEveryNodeAreGrantedOnceThroughEveryNode) {
  TestNode& a = Start("a");
  TestNode& b = Start("b");
  TestNode& c = Start("c");
  std::map<std::string, Consumers> by_node;
  for (TestNode* n : {&a, &b, &c}) Consume(*n, {"t"}, 3, by_node[n->id]);
  constexpr uint64_t kJobs = 600;
  TestNode* nodes[] = {&a, &b, &c};
  for (uint64_t id = 1; id <= kJobs; ++id) {
    ASSERT_TRUE(Put(*nodes[id % 3], Job(id, "t")).ok());
  }
  auto total = [&] {
    size_t n = 0;
    for (auto& [id, cs] : by_node) n += cs.got.size();
    return n;
  };
  ASSERT_TRUE(cluster_.Drive([&] { return total() == kJobs; })) << total() << " granted";
  std::set<uint64_t> seen;
  for (auto& [node, cs] : by_node) {
    EXPECT_FALSE(cs.got.empty()) << node << " got nothing";
    for (const JobRecord& j : cs.got) {
      EXPECT_TRUE(seen.insert(j.id).second) << "job " << j.id << " granted twice";
      EXPECT_EQ(j.body, "job " + std::to_string(j.id));
    }
  }
  EXPECT_EQ(seen.size(), kJobs);
  EXPECT_EQ(a.claimer->stats().returned + b.claimer->stats().returned + c.claimer->stats().returned,
            0u);
  // Nothing more comes: every job was granted once.
  EXPECT_FALSE(cluster_.Drive([&] { return total() > kJobs; }, std::chrono::milliseconds(300)));
}

// The owner's clock makes a delayed job ready; a waiter on another node,
// which owns no shard, gets it at its due time, never before.
TEST_F(ClaimerTest, ADueJobReachesAWaiterOnANodeThatOwnsNoneOfItsShards) {
  TestNode& owner = Start("owner", /*clock=*/true);
  TestNode& putter = Start("putter");
  TestNode& consumer = Start("consumer");
  owner.Round();
  ASSERT_EQ(owner.held.size(), static_cast<size_t>(kShards));
  Consumers got;
  Consume(consumer, {"due"}, 1, got);
  std::map<uint64_t, int64_t> due;
  for (uint64_t id = 1; id <= 20; ++id) {
    due[id] = Now() + 300 + static_cast<int64_t>(id) * 25;
    ASSERT_TRUE(Put(putter, Job(id, "due", due[id])).ok());
  }
  ASSERT_TRUE(cluster_.Drive([&] { return got.got.size() == due.size(); }));
  std::vector<int64_t> late;
  for (size_t i = 0; i < got.got.size(); ++i) {
    const uint64_t id = got.got[i].id;
    EXPECT_GE(got.at[i], due[id]) << "job " << id << " granted before its due time";
    late.push_back(got.at[i] - due[id]);
  }
  std::sort(late.begin(), late.end());
  // Informational: how late, on this machine, through three nodes.
  std::printf("due job to a waiter on a non-owner: median %lld ms, max %lld ms\n",
              static_cast<long long>(late[late.size() / 2]), static_cast<long long>(late.back()));
}

// The owner's promotion reserves due jobs for the owner's own waiters in its
// statement: they get the best of their tube with no claim of their own; a
// due job nobody there waits for becomes ready for another node's waiter.
TEST_F(ClaimerTest, TheOwnersPromotionServesItsOwnWaitersWithoutAClaim) {
  TestNode& owner = Start("owner", /*clock=*/true);
  TestNode& other = Start("other");
  // Two waiters on the owner, each waiting once; one on the other node.
  std::vector<JobRecord> at_owner;
  for (int i = 0; i < 2; ++i) {
    owner.claimer->Wait({"w"}, [&](JobRecord j) { at_owner.push_back(std::move(j)); });
  }
  Consumers at_other;
  Consume(other, {"x"}, 1, at_other);
  // Due together, and written before the owner takes the shards: one load,
  // one promotion.
  const int64_t due_ms = Now() + 500;
  const uint32_t pri[] = {7, 2, 5};
  for (uint64_t id = 1; id <= 3; ++id) {
    JobRecord j = Job(id, "w", due_ms);
    j.priority = pri[id - 1];
    ASSERT_TRUE(Put(other, j).ok());
  }
  ASSERT_TRUE(Put(other, Job(4, "x", due_ms)).ok());
  // The claims the waiters made on arrival found nothing.
  ASSERT_TRUE(cluster_.Drive([&] { return owner.claimer->stats().in_flight == 0; }));
  const uint64_t claims_before = owner.claimer->stats().claims;
  owner.Round();
  ASSERT_EQ(owner.held.size(), static_cast<size_t>(kShards));
  ASSERT_TRUE(cluster_.Drive([&] { return at_owner.size() == 2 && at_other.got.size() == 1; }))
      << at_owner.size() << " at the owner, " << at_other.got.size() << " at the other";
  std::set<uint64_t> owners;
  for (const JobRecord& j : at_owner) {
    owners.insert(j.id);
    EXPECT_EQ(j.reserved_by, "owner");
    EXPECT_EQ(j.state, StoredState::kReserved);
    EXPECT_EQ(j.body, "job " + std::to_string(j.id));
    EXPECT_GE(Now(), due_ms);
  }
  EXPECT_EQ(owners, (std::set<uint64_t>{2, 3}));  // the best two
  EXPECT_EQ(at_other.got[0].id, 4u);
  EXPECT_EQ(owner.clock->stats().reserved, 2u);
  // The owner made no claim: the promotion served its waiters, and the
  // ready notice of job 1 came while it was in flight or after, when none
  // waited any more.
  EXPECT_EQ(owner.claimer->stats().claims, claims_before);
  EXPECT_EQ(owner.claimer->stats().returned, 0u);
  // Job 1 was left ready: nobody waits for it.
  auto left = owner.store->Get(1);
  ASSERT_TRUE(left.ok() && left->has_value());
  EXPECT_EQ((*left)->state, StoredState::kReady);
}

// A claim that found nothing marks its tubes empty: waiters that come after
// it wait without claiming, until a notice names the tube; the job that
// notice announces reaches them.
TEST_F(ClaimerTest, AfterAClaimFoundNothingWaitersClaimOnlyOnANotice) {
  TestNode& a = Start("a");
  TestNode& b = Start("b");
  std::vector<JobRecord> got;
  auto wait = [&] { a.claimer->Wait({"e"}, [&](JobRecord j) { got.push_back(std::move(j)); }); };
  wait();
  ASSERT_TRUE(cluster_.Drive([&] { return a.claimer->stats().in_flight == 0; }));
  const uint64_t claims = a.claimer->stats().claims;
  ASSERT_GE(claims, 1u);
  wait();  // joins the group: the tube is known empty
  wait();
  EXPECT_EQ(a.claimer->stats().claims, claims);
  ASSERT_TRUE(Put(b, Job(1, "e")).ok());
  ASSERT_TRUE(cluster_.Drive([&] { return got.size() == 1; }));
  EXPECT_EQ(got[0].id, 1u);
  EXPECT_GT(a.claimer->stats().claims, claims);
}

// A job can become ready with no notice to come: a claim skipped its row
// while another transaction held it, and that transaction rolled back (a
// NOTIFY is sent only on commit). Known emptiness lasts empty_ms; then the
// waiters claim again and get it. Made here by an UPDATE with no notice.
TEST_F(ClaimerTest, AJobReadyWithoutANoticeReachesItsWaiterOnceTheTubesEmptinessRunsOut) {
  TestNode& a = cluster_.Start(
      "a", NodeParts{.claimer = true, .claimer_options = ClaimerOptions{.empty_ms = 1000}});
  ASSERT_TRUE(Put(a, Job(1, "quiet", Now() + 3'600'000)).ok());  // delayed: not claimable
  std::vector<JobRecord> got;
  const auto waited = std::chrono::steady_clock::now();  // the claim is answered after it
  a.claimer->Wait({"quiet"}, [&](JobRecord j) { got.push_back(std::move(j)); });
  ASSERT_TRUE(cluster_.Drive([&] { return a.claimer->stats().in_flight == 0; }));
  const uint64_t claims = a.claimer->stats().claims;
  ASSERT_TRUE(db_.Exec("UPDATE jobs SET state=0, due_ms=0 WHERE id=1"));
  // Known empty for 1 s from the claim's answer: no claim meanwhile. Looked
  // at only while that is sure; a machine too slow to get here within it
  // skips the look (the claim may then rightly have been made).
  const bool quiet = !cluster_.Drive([&] { return !got.empty(); }, std::chrono::milliseconds(300));
  if (std::chrono::steady_clock::now() < waited + std::chrono::milliseconds(1000)) {
    EXPECT_TRUE(quiet);
    EXPECT_EQ(a.claimer->stats().claims, claims);
  }
  ASSERT_TRUE(cluster_.Drive([&] { return got.size() == 1; }));
  EXPECT_EQ(got[0].id, 1u);
  EXPECT_EQ(a.claimer->stats().claims, claims + 1);
}

// A pause that runs out is not announced, and a claim finds a paused tube
// empty: the engine says Resumed, and the tube's next waiter claims at once
// instead of waiting out the known emptiness (an hour here).
TEST_F(ClaimerTest, AResumedTubeIsClaimedFromAtOnce) {
  TestNode& a = cluster_.Start(
      "a", NodeParts{.claimer = true, .claimer_options = ClaimerOptions{.empty_ms = 3'600'000}});
  ASSERT_TRUE(Put(a, Job(1, "p", Now() + 3'600'000)).ok());  // delayed: not claimable
  std::vector<JobRecord> got;
  auto wait = [&] { a.claimer->Wait({"p"}, [&](JobRecord j) { got.push_back(std::move(j)); }); };
  wait();
  ASSERT_TRUE(cluster_.Drive([&] { return a.claimer->stats().in_flight == 0; }));
  const uint64_t claims = a.claimer->stats().claims;
  // Ready with no notice, as a pause's end is.
  ASSERT_TRUE(db_.Exec("UPDATE jobs SET state=0, due_ms=0 WHERE id=1"));
  wait();  // known empty: no claim
  EXPECT_EQ(a.claimer->stats().claims, claims);
  a.claimer->Resumed("p");
  wait();
  EXPECT_EQ(a.claimer->stats().claims, claims + 1);
  ASSERT_TRUE(cluster_.Drive([&] { return got.size() == 1; }));
  EXPECT_EQ(got[0].id, 1u);
  EXPECT_EQ(got[0].reserved_by, "a");
}

// While a promotion sized by Wanted is in flight (Hold), a notice makes no
// claim: the promotion may serve the waiters, and a claim beside it would
// take the jobs it leaves to other nodes. Released, a group that heard one
// while it still waits claims.
TEST_F(ClaimerTest, ANoticeHeardWhileHeldIsClaimedForOnRelease) {
  // Known emptiness that outlasts the test: only the notice makes a claim.
  TestNode& a = cluster_.Start(
      "a", NodeParts{.claimer = true, .claimer_options = ClaimerOptions{.empty_ms = 3'600'000}});
  TestNode& b = Start("b");
  std::vector<JobRecord> got;
  a.claimer->Wait({"h"}, [&](JobRecord j) { got.push_back(std::move(j)); });
  ASSERT_TRUE(cluster_.Drive([&] { return a.claimer->stats().in_flight == 0; }));
  const uint64_t claims = a.claimer->stats().claims;
  a.claimer->Hold(true);
  const uint64_t heard = a.notices;
  ASSERT_TRUE(Put(b, Job(1, "h")).ok());
  ASSERT_TRUE(cluster_.Drive([&] { return a.notices > heard; }));  // job 1's ready notice
  ASSERT_TRUE(cluster_.Drive([&] { return a.claimer->stats().in_flight == 0; }));
  EXPECT_EQ(a.claimer->stats().claims, claims);
  EXPECT_TRUE(got.empty());
  a.claimer->Hold(false);
  ASSERT_TRUE(cluster_.Drive([&] { return got.size() == 1; }));
  EXPECT_EQ(got[0].id, 1u);
  EXPECT_EQ(a.claimer->stats().claims, claims + 1);
}

// The same for a claim that comes due while held (known emptiness ran out):
// it waits for the release.
TEST_F(ClaimerTest, AClaimDueWhileHeldWaitsForTheRelease) {
  TestNode& a = cluster_.Start(
      "a", NodeParts{.claimer = true, .claimer_options = ClaimerOptions{.empty_ms = 100}});
  ASSERT_TRUE(Put(a, Job(1, "q", Now() + 3'600'000)).ok());  // delayed: not claimable
  std::vector<JobRecord> got;
  a.claimer->Wait({"q"}, [&](JobRecord j) { got.push_back(std::move(j)); });
  ASSERT_TRUE(cluster_.Drive([&] { return a.claimer->stats().in_flight == 0; }));
  a.claimer->Hold(true);
  const uint64_t claims = a.claimer->stats().claims;
  ASSERT_TRUE(db_.Exec("UPDATE jobs SET state=0, due_ms=0 WHERE id=1"));  // no notice
  // Three times the known emptiness, ticking: no claim while held.
  EXPECT_FALSE(cluster_.Drive([&] { return !got.empty(); }, std::chrono::milliseconds(300)));
  EXPECT_EQ(a.claimer->stats().claims, claims);
  a.claimer->Hold(false);
  ASSERT_TRUE(cluster_.Drive([&] { return got.size() == 1; }));
  EXPECT_EQ(got[0].id, 1u);
  EXPECT_EQ(a.claimer->stats().claims, claims + 1);
}

// Waiters get jobs of the tubes they watch only, best (priority, id) first.
TEST_F(ClaimerTest, WaitersGetOnlyTheTubesTheyWatch) {
  TestNode& a = Start("a");
  TestNode& b = Start("b");
  Consumers xs, ys, both;
  Consume(a, {"x"}, 1, xs);
  Consume(b, {"y"}, 1, ys);
  Consume(b, {"y", "x"}, 1, both);
  for (uint64_t id = 1; id <= 30; ++id) ASSERT_TRUE(Put(a, Job(id, id % 2 ? "x" : "y")).ok());
  ASSERT_TRUE(
      cluster_.Drive([&] { return xs.got.size() + ys.got.size() + both.got.size() == 30; }));
  for (const JobRecord& j : xs.got) EXPECT_EQ(j.tube, "x");
  for (const JobRecord& j : ys.got) EXPECT_EQ(j.tube, "y");
  EXPECT_EQ(a.claimer->stats().waiters, 1u);
  EXPECT_EQ(b.claimer->stats().waiters, 2u);
}

// A waiter leaves while its claim is in flight: the job claimed for it goes
// back to ready, its reservation uncounted, and a waiter on another node
// gets it.
TEST_F(ClaimerTest, AJobClaimedForAWaiterThatLeftGoesBackToTheOthers) {
  TestNode& a = Start("a");
  TestNode& b = Start("b");
  ASSERT_TRUE(Put(a, Job(1, "r")).ok());
  bool granted_a = false;
  const Claimer::WaiterId w = a.claimer->Wait({"r"}, [&](JobRecord) { granted_a = true; });
  a.claimer->Cancel(w);  // before the claim's answer
  ASSERT_TRUE(cluster_.Drive([&] { return a.claimer->stats().returned == 1; }));
  EXPECT_FALSE(granted_a);
  auto row = a.store->Get(1);
  ASSERT_TRUE(row.ok() && row->has_value());
  EXPECT_EQ((*row)->state, StoredState::kReady);
  EXPECT_EQ((*row)->counters.reserves, 0u);
  Consumers got;
  Consume(b, {"r"}, 1, got);
  ASSERT_TRUE(cluster_.Drive([&] { return got.got.size() == 1; }));
  EXPECT_EQ(got.got[0].id, 1u);
  EXPECT_EQ(got.got[0].counters.reserves, 1u);
}

// A claim that fails (a lost connection) is made again after retry_ms, and
// the waiter is served.
TEST_F(ClaimerTest, AFailedClaimIsMadeAgain) {
  TestNode& a = cluster_.Start("a");
  testing::FlakyQueue flaky(*a.store, cluster_.inbox().executor());
  flaky.fail_claims = 1;
  a.claimer = std::make_unique<Claimer>(
      *a.store, flaky, cluster_.clock(), ClaimerOptions{.retry_ms = 50},
      [&a](int64_t us) { a.claimer_wake_us = std::min(a.claimer_wake_us, us); });
  ASSERT_TRUE(Put(a, Job(1, "t")).ok());
  Consumers got;
  WaitOne(a, {"t"}, got);
  ASSERT_TRUE(cluster_.Drive([&] { return !got.got.empty(); }));
  EXPECT_EQ(got.got[0].id, 1u);
  EXPECT_EQ(a.claimer->stats().failures, 1u);
}

// A consumer that waits again as soon as it is served is served from jobs
// claimed ahead, not by a claim each; once it stops, what was claimed ahead
// goes back to ready and another node's consumer gets it.
TEST_F(ClaimerTest, BusyConsumersGetJobsClaimedAheadAndUnusedOnesGoBack) {
  TestNode& a = Start("a");
  TestNode& b = Start("b");
  for (uint64_t id = 1; id <= 60; ++id) ASSERT_TRUE(Put(a, Job(id, "t")).ok());
  std::vector<JobRecord> got;
  std::function<void()> next = [&] {
    if (got.size() >= 40) return;
    a.claimer->Wait({"t"}, [&](JobRecord j) {
      got.push_back(std::move(j));
      next();
    });
  };
  next();
  ASSERT_TRUE(cluster_.Drive([&] { return got.size() == 40; })) << got.size();
  EXPECT_LT(a.claimer->stats().claims, 20u) << "a claim per job";
  // What `a` holds claimed ahead now (none when its last claim happened to
  // fit, as on a slow run) must all go back, and `b` gets the rest.
  const uint64_t spares = a.claimer->stats().spares;
  Consumers rest;
  Consume(b, {"t"}, 1, rest);
  ASSERT_TRUE(cluster_.Drive([&] { return rest.got.size() == 20; })) << rest.got.size();
  // A put-back is counted when its write is answered, which may come after
  // `b` has been granted the job it freed.
  EXPECT_TRUE(cluster_.Drive([&] { return a.claimer->stats().returned >= spares; }))
      << a.claimer->stats().returned << " of " << spares << " put back";
  EXPECT_TRUE(cluster_.Drive([&] { return a.claimer->stats().spares == 0; }));
  std::set<uint64_t> ids;
  for (const JobRecord& j : got) ids.insert(j.id);
  for (const JobRecord& j : rest.got) ids.insert(j.id);
  EXPECT_EQ(ids.size(), 60u) << "a job granted twice";
}

}  // namespace
}  // namespace delayd::cluster
