// The store's cluster primitives on a real PostgreSQL, with several nodes
// (PgStores with node ids) on one database: claims that never hand one job
// to two nodes, guarded writes on row versions, the fenced writes of a
// shard's owner refused once its lease moved, id blocks, and the notices
// every node hears (doc/cluster.md).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <thread>
#include <vector>

#include "store/postgres/pg_leases.h"
#include "store/postgres/pg_schema.h"
#include "store/postgres/pg_statements.h"
#include "store/postgres/pg_store.h"
#include "store/testing/inbox.h"
#include "store/testing/pg_node.h"
#include "store/testing/pg_test_db.h"

namespace delayd::store {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kShards = 8;
constexpr int64_t kNow = 1'800'000'000'000;  // a wall ms the jobs are due against

using Node = testing::PgNode;

class ClusterStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(db_.uri().empty()) << db_.error(); }

  std::unique_ptr<Node> Start(const std::string& id, int64_t lease_ms = 60'000,
                              const delayd::Clock* clock = nullptr) {
    auto node = std::make_unique<Node>();
    node->Open(db_.uri(), id, kShards, lease_ms, inbox_.executor(), clock);
    return node;
  }

  Status Apply(Node& n, Mutation m) { return n.Apply(std::move(m), inbox_); }
  // Submits every mutation at once (one batch, as far as the queue goes)
  // and returns each one's status.
  std::vector<Status> ApplyEach(Node& n, std::vector<Mutation> ms) {
    std::atomic<int> done{0};
    std::vector<Status> out(ms.size());
    for (size_t i = 0; i < ms.size(); ++i) {
      n.store->Submit(std::move(ms[i]), [&, i](const Status& s) {
        out[i] = s;
        ++done;
      });
    }
    inbox_.RunUntil(done, static_cast<int>(out.size()));
    return out;
  }
  std::vector<JobRecord> Claim(Node& n, std::vector<std::string> tubes, size_t limit,
                               int64_t now_ms = kNow) {
    std::atomic<int> done{0};
    std::vector<JobRecord> out;
    n.store->Claim(ClaimQuery{std::move(tubes), limit, now_ms},
                   [&](Result<std::vector<JobRecord>> r) {
                     EXPECT_TRUE(r.ok()) << r.status().ToString();
                     if (r.ok()) out = std::move(r).value();
                     ++done;
                   });
    inbox_.RunUntil(done, 1);
    return out;
  }
  uint64_t TakeIds(Node& n, uint64_t count) {
    std::atomic<int> done{0};
    uint64_t first = 0;
    n.store->TakeIds(count, [&](Result<uint64_t> r) {
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (r.ok()) first = *r;
      ++done;
    });
    inbox_.RunUntil(done, 1);
    return first;
  }
  JobRecord Get(Node& n, uint64_t id) {
    auto r = n.store->Get(id);
    EXPECT_TRUE(r.ok() && r->has_value()) << "job " << id;
    return r.ok() && r->has_value() ? **r : JobRecord{};
  }
  // The text the one-row, one-column query `sql` returns ("" when none).
  std::string Query(const std::string& sql) {
    PGconn* c = PQconnectdb(db_.uri().c_str());
    PGresult* r = PQexec(c, sql.c_str());
    std::string v;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) v = PQgetvalue(r, 0, 0);
    EXPECT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << sql << ": " << PQerrorMessage(c);
    PQclear(r);
    PQfinish(c);
    return v;
  }
  // Runs `sql` (statements that return nothing) on a connection of its own.
  void Exec(const std::string& sql) {
    PGconn* c = PQconnectdb(db_.uri().c_str());
    PGresult* r = PQexec(c, sql.c_str());
    EXPECT_EQ(PQresultStatus(r), PGRES_COMMAND_OK) << sql << ": " << PQerrorMessage(c);
    PQclear(r);
    PQfinish(c);
  }
  // Rounds of `n` until it holds every shard (another node's leases ran
  // out), for at most 10 s.
  void TakeEveryShard(Node& n) {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    for (;;) {
      n.Round();
      if (n.held.size() == static_cast<size_t>(kShards)) return;
      ASSERT_LT(Clock::now(), deadline) << n.id << " holds " << n.held.size() << " shards";
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Notices heard through Listen, in order, and a wait for one.
  struct Heard {
    std::mutex mu;
    std::vector<Notice> notices;
  };
  std::shared_ptr<Heard> Listen(Node& n) {
    auto heard = std::make_shared<Heard>();
    Status s = n.store->Listen([heard](std::vector<Notice> ns) {
      std::lock_guard lock(heard->mu);
      for (Notice& x : ns) heard->notices.push_back(std::move(x));
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
    return heard;
  }
  // Listen, once the listener says it listens; null if it never does.
  std::shared_ptr<Heard> Listening(Node& n) {
    auto heard = Listen(n);
    if (!WaitFor(*heard, [](const Notice& x) { return x.kind == Notice::Kind::kListening; })) {
      return nullptr;
    }
    return heard;
  }
  // Runs the inbox until `heard` has a notice `match` accepts, 10 s at most;
  // returns whether it came.
  bool WaitFor(Heard& heard, const std::function<bool(const Notice&)>& match) {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    std::atomic<int> tick{0};
    while (Clock::now() < deadline) {
      {
        std::lock_guard lock(heard.mu);
        for (const Notice& n : heard.notices) {
          if (match(n)) return true;
        }
      }
      // Let the executor run what the listener posted.
      inbox_.executor()([&] { ++tick; });
      inbox_.RunUntil(tick, tick.load() + 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return false;
  }
  static std::function<bool(const Notice&)> Ready(const std::string& tube) {
    return [tube](const Notice& n) { return n.kind == Notice::Kind::kReady && n.tube == tube; };
  }

  // The database refused a shard owner's write (the lease moved).
  static bool Fenced(const Status& s) { return s.code() == StatusCode::kFenced; }

  static JobRecord Job(uint64_t id, const std::string& tube, uint32_t pri = 0,
                       StoredState state = StoredState::kReady, int64_t due_ms = 0) {
    JobRecord j;
    j.id = id;
    j.tube = tube;
    j.priority = pri;
    j.state = state;
    j.due_ms = due_ms;
    j.ttr_ms = 30'000;
    j.body = "body " + std::to_string(id);
    return j;
  }

  // What a fenced write of shard 0 by `owner` at `epoch` does first (the
  // store's "lock_leases" and "fence" statements), in a transaction left
  // open until EndFence.
  PGconn* HoldFence(const std::string& owner, int64_t epoch) {
    PGconn* w = PQconnectdb(db_.uri().c_str());
    EXPECT_EQ(PQstatus(w), CONNECTION_OK);
    PQclear(PQexec(w, "BEGIN"));
    // The store's own statements, in its order: the lock, then the check.
    auto run = [&](const char* name, std::vector<std::string> params) {
      for (const pg::Statement& st : pg::Statements()) {
        if (std::string_view(st.name) != name) continue;
        std::vector<const char*> values;
        for (const std::string& p : params) values.push_back(p.c_str());
        return PQexecParams(w, st.sql.c_str(), static_cast<int>(values.size()), nullptr,
                            values.data(), nullptr, nullptr, 0);
      }
      ADD_FAILURE() << "no statement " << name;
      return static_cast<PGresult*>(nullptr);
    };
    PGresult* r = run("lock_leases", {"{0}"});
    EXPECT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << PQerrorMessage(w);
    PQclear(r);
    r = run("fence", {"0", owner, std::to_string(epoch)});
    EXPECT_EQ(PQntuples(r), 1) << PQerrorMessage(w);
    PQclear(r);
    return w;
  }
  static void EndFence(PGconn* w) {
    PQclear(PQexec(w, "COMMIT"));
    PQfinish(w);
  }

  testing::PgTestDb db_;
  testing::Inbox inbox_;
};

// Two nodes claiming the same tube at the same moment: every job goes to
// exactly one of them, and the rows say which.
TEST_F(ClusterStoreTest, TwoNodesClaimingAtOnceNeverShareAJob) {
  auto a = Start("a");
  auto b = Start("b");
  constexpr int kJobs = 2000;
  std::vector<Mutation> puts;
  for (int i = 1; i <= kJobs; ++i) puts.push_back(Mutation::Insert(Job(i, "t", i % 7)));
  std::atomic<int> put{0};
  a->store->SubmitAll(std::move(puts), [&](const Status& s) {
    EXPECT_TRUE(s.ok()) << s.ToString();
    ++put;
  });
  inbox_.RunUntil(put, 1);

  // 40 claims of 50 from each node, all queued before any answer is taken.
  std::map<std::string, std::vector<uint64_t>> got;
  std::atomic<int> done{0};
  for (int i = 0; i < 40; ++i) {
    for (Node* n : {a.get(), b.get()}) {
      n->store->Claim(ClaimQuery{{"t"}, 50, kNow}, [&, n](Result<std::vector<JobRecord>> r) {
        EXPECT_TRUE(r.ok()) << r.status().ToString();
        if (r.ok()) {
          for (const JobRecord& j : *r) {
            EXPECT_EQ(j.state, StoredState::kReserved);
            EXPECT_EQ(j.reserved_by, n->id);
            got[n->id].push_back(j.id);
          }
        }
        ++done;
      });
    }
  }
  inbox_.RunUntil(done, 80);
  std::set<uint64_t> all;
  for (auto& [node, ids] : got) {
    for (uint64_t id : ids) EXPECT_TRUE(all.insert(id).second) << "job " << id << " claimed twice";
  }
  EXPECT_EQ(all.size(), static_cast<size_t>(kJobs));
  EXPECT_FALSE(got["a"].empty());
  EXPECT_FALSE(got["b"].empty());
  EXPECT_EQ(Query("SELECT count(*) FROM jobs WHERE state=4 AND reserved_by='a'"),
            std::to_string(got["a"].size()));
  EXPECT_EQ(Query("SELECT count(*) FROM jobs WHERE state=4 AND reserved_by='b'"),
            std::to_string(got["b"].size()));
}

// Nodes write at once, each syncing its own commits: every write of both is
// acknowledged, none is reported lost because the other committed too.
TEST_F(ClusterStoreTest, NodesWritingAtTheSameTimeEachSyncTheirOwnCommits) {
  auto a = Start("a");
  auto b = Start("b");
  std::atomic<int> done{0};
  int failed = 0;
  for (uint64_t i = 1; i <= 300; ++i) {
    Node& n = i % 2 ? *a : *b;
    n.store->Submit(Mutation::Insert(Job(i, "w")), [&](const Status& s) {
      if (!s.ok()) {
        ++failed;
        ADD_FAILURE() << s.ToString();
      }
      ++done;
    });
    if (i % 10 == 0) inbox_.RunUntil(done, static_cast<int>(i) - 10);
  }
  inbox_.RunUntil(done, 300);
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(Query("SELECT count(*) FROM jobs"), "300");
}

// A claim takes the best (priority, id) ready jobs of the tubes asked for,
// and nothing delayed, buried or of another tube.
TEST_F(ClusterStoreTest, AClaimTakesTheBestReadyJobsOfItsTubesOnly) {
  auto a = Start("a");
  for (const JobRecord& j : {Job(1, "x", 5), Job(2, "x", 1), Job(3, "y", 0), Job(4, "z", 0),
                             Job(5, "x", 0, StoredState::kDelayed, kNow + 60'000),
                             Job(6, "x", 0, StoredState::kBuried)}) {
    ASSERT_TRUE(Apply(*a, Mutation::Insert(j)).ok());
  }
  const uint64_t before = Get(*a, 2).version;

  auto first = Claim(*a, {"x", "y"}, 2, kNow);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].id, 3u);
  EXPECT_EQ(first[1].id, 2u);
  for (const JobRecord& j : first) {
    EXPECT_EQ(j.state, StoredState::kReserved);
    EXPECT_EQ(j.reserved_by, "a");
    EXPECT_EQ(j.deadline_ms, kNow + 30'000);
    EXPECT_EQ(j.counters.reserves, 1u);
  }
  EXPECT_GT(first[1].version, before);
  // The row is what the claim returned.
  JobRecord stored = Get(*a, 2);
  EXPECT_EQ(stored.state, StoredState::kReserved);
  EXPECT_EQ(stored.version, first[1].version);
  EXPECT_EQ(stored.body, "body 2");

  auto rest = Claim(*a, {"x", "y"}, 10, kNow);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].id, 1u);
  EXPECT_TRUE(Claim(*a, {"x", "y"}, 10, kNow).empty());
  EXPECT_EQ(Get(*a, 4).state, StoredState::kReady);

  // Of some shards only: the jobs of the others stay ready.
  std::map<int, std::set<uint64_t>> by_shard;
  for (uint64_t id = 10; id < 40; ++id) {
    ASSERT_TRUE(Apply(*a, Mutation::Insert(Job(id, "s"))).ok());
    by_shard[a->store->ShardOf(Job(id, "s"))].insert(id);
  }
  ASSERT_GE(by_shard.size(), 2u);
  const int one = by_shard.begin()->first;
  std::atomic<int> done{0};
  std::vector<JobRecord> mine;
  a->store->Claim(ClaimQuery{{"s"}, 100, kNow, {one}}, [&](Result<std::vector<JobRecord>> r) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    mine = std::move(r).value();
    ++done;
  });
  inbox_.RunUntil(done, 1);
  std::set<uint64_t> ids;
  for (const JobRecord& j : mine) ids.insert(j.id);
  EXPECT_EQ(ids, by_shard[one]);
  EXPECT_EQ(Get(*a, 5).state, StoredState::kDelayed);
  EXPECT_EQ(Get(*a, 6).state, StoredState::kBuried);
}

// The owner's writer locks lease rows (its fences) while its lease rounds
// renew them: both lock in shard order, so neither ever waits for the other
// in a cycle (PostgreSQL would break one with "deadlock detected" after a
// second, failing a round or a batch).
TEST_F(ClusterStoreTest, RenewalsAndFencedWritesOfOneOwnerNeverDeadlock) {
  auto a = Start("a");
  const std::vector<Lease> held = a->Round();
  ASSERT_EQ(held.size(), static_cast<size_t>(kShards));
  std::atomic<bool> writing{true};
  std::atomic<int> round_failures{0};
  std::thread renewer([&] {
    auto leases = pg::PgLeaseTable::Open(db_.uri(), {.node_id = "a", .lease_ms = 60'000});
    ASSERT_TRUE(leases.ok()) << leases.status().ToString();
    while (writing) {
      if (!(*leases)->Round().ok()) ++round_failures;
    }
  });
  int batch_failures = 0;
  for (int round = 0; round < 150; ++round) {
    // Fenced writes of every shard in one batch, highest shard first: the
    // order that deadlocked against a renewal locking the lowest first.
    std::vector<Mutation> ms;
    for (int shard = kShards - 1; shard >= 0; --shard) {
      ms.push_back(Mutation::Requeue(a->Fence(shard), kNow));
    }
    for (const Status& st : ApplyEach(*a, std::move(ms))) batch_failures += st.ok() ? 0 : 1;
  }
  writing = false;
  renewer.join();
  EXPECT_EQ(batch_failures, 0);
  EXPECT_EQ(round_failures.load(), 0);
}

// A pause committed through any node holds back every claim made after it,
// until it ends or is resumed.
TEST_F(ClusterStoreTest, AClaimLeavesOutTubesPausedAtItsTime) {
  auto a = Start("a");
  auto b = Start("b");
  ASSERT_TRUE(Apply(*a, Mutation::Insert(Job(1, "p", 0))).ok());
  ASSERT_TRUE(Apply(*a, Mutation::Insert(Job(2, "q", 5))).ok());
  ASSERT_TRUE(Apply(*a, Mutation::PauseTube("p", 5000, kNow + 5000)).ok());
  auto got = Claim(*b, {"p", "q"}, 10, kNow);
  ASSERT_EQ(got.size(), 1u) << "the paused tube's better job was claimed";
  EXPECT_EQ(got[0].id, 2u);
  EXPECT_TRUE(Claim(*b, {"p"}, 10, kNow + 4999).empty());
  EXPECT_EQ(Claim(*b, {"p"}, 10, kNow + 5000).size(), 1u) << "the pause has ended";
  ASSERT_TRUE(Apply(*a, Mutation::Insert(Job(3, "p", 0))).ok());
  ASSERT_TRUE(Apply(*a, Mutation::PauseTube("p", 5000, kNow + 5000)).ok());
  ASSERT_TRUE(Apply(*a, Mutation::PauseTube("p", 0, 0)).ok());  // resumed
  EXPECT_EQ(Claim(*b, {"p"}, 10, kNow).size(), 1u);
}

// What cluster mode reads instead of memory: the best ready job of a tube,
// the jobs per tube and state, and tubes' pauses and settings.
TEST_F(ClusterStoreTest, TheQueueIsReadFromTheDatabase) {
  auto a = Start("a");
  for (const JobRecord& j :
       {Job(1, "x", 2000), Job(2, "x", 7), Job(3, "x", 7), Job(4, "y", 0),
        Job(5, "x", 0, StoredState::kDelayed, kNow + 60'000), Job(6, "x", 0, StoredState::kBuried),
        Job(7, "x", 0, StoredState::kDone)}) {
    ASSERT_TRUE(Apply(*a, Mutation::Insert(j)).ok());
  }
  ASSERT_EQ(Claim(*a, {"y"}, 1, kNow).size(), 1u);  // 4 reserved
  auto best = a->store->BestReady("x");
  ASSERT_TRUE(best.ok() && best->has_value());
  EXPECT_EQ((*best)->id, 2u) << "by priority, then id";
  auto none = a->store->BestReady("y");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  auto counts = a->store->CountJobs(std::nullopt);
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  ASSERT_EQ(counts->size(), 2u);
  const TubeCount& x = (*counts)[0];
  EXPECT_EQ(x.tube, "x");
  EXPECT_EQ(x.ready, 3u);
  EXPECT_EQ(x.urgent, 2u);
  EXPECT_EQ(x.delayed, 1u);
  EXPECT_EQ(x.buried, 1u);
  EXPECT_EQ(x.reserved, 0u);
  EXPECT_EQ((*counts)[1].tube, "y");
  EXPECT_EQ((*counts)[1].reserved, 1u);
  auto only_y = a->store->CountJobs("y");
  ASSERT_TRUE(only_y.ok());
  ASSERT_EQ(only_y->size(), 1u);
  auto no_tube = a->store->CountJobs("none");
  ASSERT_TRUE(no_tube.ok());
  EXPECT_TRUE(no_tube->empty());

  ASSERT_TRUE(Apply(*a, Mutation::PauseTube("x", 5000, kNow + 5000)).ok());
  ASSERT_TRUE(Apply(*a, Mutation::TopicSettings("y", R"({"retry":{}})")).ok());
  auto tubes = a->store->Tubes(std::nullopt);
  ASSERT_TRUE(tubes.ok());
  EXPECT_EQ(tubes->size(), 2u);
  auto x_row = a->store->Tubes("x");
  ASSERT_TRUE(x_row.ok());
  ASSERT_EQ(x_row->size(), 1u);
  EXPECT_EQ((*x_row)[0].pause_ms, 5000);
  EXPECT_EQ((*x_row)[0].unpause_ms, kNow + 5000);
  auto y_row = a->store->Tubes("y");
  ASSERT_TRUE(y_row.ok());
  ASSERT_EQ(y_row->size(), 1u);
  EXPECT_EQ((*y_row)[0].settings, R"({"retry":{}})");
}

// What count_jobs answered before job_counts (migration 6): a count of
// every row, the reference the kept counts must equal.
std::vector<TubeCount> CountedFromTheTable(const std::string& uri) {
  PGconn* c = PQconnectdb(uri.c_str());
  PGresult* r = PQexec(
      c,
      "SELECT tube, count(*) FILTER (WHERE state=0), count(*) FILTER (WHERE state=0 AND "
      "pri<1024), count(*) FILTER (WHERE state=1), count(*) FILTER (WHERE state=4), count(*) "
      "FILTER (WHERE state=2), coalesce(min(due_ms) FILTER (WHERE state=0), 0) FROM jobs WHERE "
      "state<>3 GROUP BY tube ORDER BY tube");
  EXPECT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << PQerrorMessage(c);
  std::vector<TubeCount> out;
  for (int i = 0; i < PQntuples(r); ++i) {
    auto n = [&](int col) { return std::stoull(PQgetvalue(r, i, col)); };
    out.push_back(TubeCount{PQgetvalue(r, i, 0), n(1), n(2), n(3), n(4), n(5),
                            std::stoll(PQgetvalue(r, i, 6))});
  }
  PQclear(r);
  PQfinish(c);
  return out;
}

std::string Describe(const std::vector<TubeCount>& counts) {
  std::string out;
  for (const TubeCount& t : counts) {
    out +=
        fmt::format("{}: ready {} urgent {} delayed {} reserved {} buried {} oldest {}; ", t.tube,
                    t.ready, t.urgent, t.delayed, t.reserved, t.buried, t.oldest_ready_due_ms);
  }
  return out;
}

// The counts stats read are kept by the statements that change jobs, and
// equal a count of the table after every kind of change: inserts of each
// state, claims, promotions (some reserved for waiters), requeues,
// guarded updates and deletes (refused ones too), a replace that moves a
// job to another tube, SQL typed by hand, and a transaction rolled back.
TEST_F(ClusterStoreTest, KeptCountsEqualACountOfTheTableAfterEveryKindOfChange) {
  auto a = Start("a");
  auto b = Start("b");
  a->Round();
  ASSERT_EQ(a->held.size(), static_cast<size_t>(kShards));
  std::vector<change::Fence> fences;
  for (int shard = 0; shard < kShards; ++shard) fences.push_back(a->Fence(shard));
  auto same = [&](const char* step) {
    auto kept = b->store->CountJobs(std::nullopt);
    ASSERT_TRUE(kept.ok()) << kept.status().ToString();
    EXPECT_EQ(Describe(*kept), Describe(CountedFromTheTable(db_.uri()))) << "after " << step;
  };

  std::vector<Mutation> puts;
  std::vector<change::DueJob> due;
  for (uint64_t id = 1; id <= 60; ++id) {
    const std::string tube = id % 3 == 0 ? "x" : id % 3 == 1 ? "y" : "z";
    const StoredState state = id % 4 == 0   ? StoredState::kDelayed
                              : id % 7 == 0 ? StoredState::kBuried
                              : id == 5     ? StoredState::kDone
                                            : StoredState::kReady;
    JobRecord j = Job(id, tube, id % 2 ? 10 : 5000, state,
                      state == StoredState::kDelayed ? kNow - 100 + static_cast<int64_t>(id)
                                                     : kNow - static_cast<int64_t>(id));
    if (state == StoredState::kDelayed) due.push_back({a->store->ShardOf(j), id});
    puts.push_back(Mutation::Insert(j));
  }
  for (const Status& s : ApplyEach(*b, std::move(puts))) ASSERT_TRUE(s.ok()) << s.ToString();
  same("inserts");

  ASSERT_EQ(Claim(*a, {"x", "y"}, 7).size(), 7u);
  same("a claim");
  ASSERT_TRUE(Apply(*a, Mutation::Promote(fences, due, kNow, {{"x", 2}}, nullptr)).ok());
  same("a promotion reserving for waiters");
  ASSERT_TRUE(Apply(*a, Mutation::Requeue(fences, kNow + 60'000)).ok());
  same("a requeue of every reservation");

  const std::vector<JobRecord> held = Claim(*b, {"y"}, 3);
  ASSERT_EQ(held.size(), 3u);
  JobRecord buried = held[0];
  buried.state = StoredState::kBuried;
  JobRecord stale = held[1];
  stale.state = StoredState::kReady;
  JobRecord moved = held[2];
  moved.tube = "w";
  moved.state = StoredState::kDelayed;
  moved.due_ms = kNow + 60'000;
  auto statuses = ApplyEach(*b, {Mutation::Update(buried).IfVersion(held[0].version),
                                 Mutation::Update(stale).IfVersion(held[1].version + 9),
                                 Mutation::Replace(moved).IfVersion(held[2].version),
                                 Mutation::Delete(held[1].id).IfVersion(held[1].version + 9),
                                 Mutation::Delete(1), Mutation::Delete(2), Mutation::Delete(999)});
  EXPECT_TRUE(statuses[0].ok());
  EXPECT_EQ(statuses[1].code(), StatusCode::kConflict);
  EXPECT_TRUE(statuses[2].ok());
  EXPECT_EQ(statuses[3].code(), StatusCode::kConflict);
  same("guarded updates, a replace into another tube, and deletes");

  Exec(
      "UPDATE jobs SET state=2 WHERE id IN (SELECT id FROM jobs WHERE tube='z' AND state=0 "
      "ORDER BY id LIMIT 2)");
  Exec("DELETE FROM jobs WHERE tube='x' AND state=1");
  Exec("UPDATE jobs SET pri=1 WHERE tube='y' AND state=0");
  same("statements typed by hand");
  Exec("BEGIN; DELETE FROM jobs; ROLLBACK");
  same("a transaction rolled back");
  Query("SELECT delayd_fold_counts()");
  same("a fold");
  Exec("TRUNCATE jobs");
  same("a truncation");
}

// Every store folds the deltas its changes append into the counts about
// every second, so that a count reads about a second's worth of them; no
// count changes, and tubes whose counts are all zero leave no row.
TEST_F(ClusterStoreTest, DeltasAreFoldedIntoTheCountsAndKeepTheirSums) {
  auto a = Start("a");
  for (uint64_t id = 1; id <= 20; ++id) {
    ASSERT_TRUE(Apply(*a, Mutation::Insert(Job(id, id % 2 ? "kept" : "gone"))).ok());
  }
  for (uint64_t id = 2; id <= 20; id += 2) ASSERT_TRUE(Apply(*a, Mutation::Delete(id)).ok());
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Query("SELECT count(*) FROM job_deltas WHERE state <> -1") != "0") {
    ASSERT_LT(Clock::now(), deadline) << "no fold";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto counts = a->store->CountJobs(std::nullopt);
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  EXPECT_EQ(Describe(*counts), Describe(CountedFromTheTable(db_.uri())));
  ASSERT_EQ(counts->size(), 1u);
  EXPECT_EQ((*counts)[0].ready, 10u);
  EXPECT_EQ(Query("SELECT string_agg(tube || ' ' || state || ' ' || n, ', ') FROM job_counts"),
            "kept 0 10");
}

// A change guarded by a version the row no longer has fails alone, changes
// nothing, and leaves the changes around it in the same batch committed.
TEST_F(ClusterStoreTest, AGuardedChangeOnAStaleVersionFailsAloneAndChangesNothing) {
  auto a = Start("a");
  auto b = Start("b");
  ASSERT_TRUE(Apply(*a, Mutation::Insert(Job(1, "t", 4))).ok());
  ASSERT_TRUE(Apply(*a, Mutation::Insert(Job(2, "t", 4))).ok());
  const uint64_t seen = Get(*b, 1).version;  // what b read
  auto claimed = Claim(*a, {"t"}, 1);        // then a claims it
  ASSERT_EQ(claimed.size(), 1u);
  ASSERT_EQ(claimed[0].id, 1u);
  const uint64_t now = claimed[0].version;
  ASSERT_NE(now, seen);

  JobRecord stale = claimed[0];
  stale.state = StoredState::kBuried;
  stale.priority = 99;
  JobRecord other = Get(*b, 2);
  other.priority = 7;
  JobRecord fresh = claimed[0];
  fresh.priority = 3;
  auto statuses = ApplyEach(
      *b, {Mutation::Update(stale).IfVersion(seen), Mutation::Update(other),
           Mutation::Update(fresh).IfVersion(now), Mutation::Delete(2).IfVersion(seen + 1000)});
  EXPECT_EQ(statuses[0].code(), StatusCode::kConflict) << statuses[0].ToString();
  EXPECT_TRUE(statuses[1].ok()) << statuses[1].ToString();
  EXPECT_TRUE(statuses[2].ok()) << statuses[2].ToString();
  EXPECT_EQ(statuses[3].code(), StatusCode::kConflict) << statuses[3].ToString();

  JobRecord one = Get(*a, 1);
  EXPECT_EQ(one.state, StoredState::kReserved);  // not buried
  EXPECT_EQ(one.priority, 3u);                   // the fresh change only
  EXPECT_EQ(one.version, now + 1);
  EXPECT_EQ(Get(*a, 2).priority, 7u);  // not deleted

  // A delete on the version it read, once; then the job is gone for both.
  EXPECT_TRUE(Apply(*b, Mutation::Delete(1).IfVersion(now + 1)).ok());
  EXPECT_EQ(Apply(*a, Mutation::Delete(1).IfVersion(now + 1)).code(), StatusCode::kConflict);
  EXPECT_EQ(Apply(*a, Mutation::Update(fresh).IfVersion(now + 1)).code(), StatusCode::kConflict);
}

// The owner of a shard makes its due jobs ready; jobs not yet due stay
// delayed; every node hears that the tube has ready jobs, and hears of
// delayed jobs written to fall due soon.
TEST_F(ClusterStoreTest, TheOwnerPromotesDueJobsAndEveryNodeHearsOfThem) {
  auto a = Start("a");
  auto b = Start("b");
  auto heard = Listening(*b);
  ASSERT_NE(heard, nullptr);
  a->Round();
  ASSERT_EQ(a->held.size(), static_cast<size_t>(kShards));

  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  std::map<int, std::vector<uint64_t>> by_shard;
  for (uint64_t id = 1; id <= 40; ++id) {
    // Odd ids due already, even ids due in an hour.
    JobRecord j = Job(id, "p", 0, StoredState::kDelayed, id % 2 ? now - 5 : now + 3'600'000);
    ASSERT_TRUE(Apply(*b, Mutation::Insert(j)).ok());
    by_shard[a->store->ShardOf(j)].push_back(id);
  }
  ASSERT_GT(by_shard.size(), 1u);
  // Written by b, due within the notice window: a (any owner) hears of it.
  JobRecord soon = Job(41, "p", 0, StoredState::kDelayed, now + 1000);
  ASSERT_TRUE(Apply(*b, Mutation::Insert(soon)).ok());
  ASSERT_TRUE(WaitFor(*heard, [&](const Notice& n) {
    return n.kind == Notice::Kind::kDue && n.id == 41 && n.due_ms == now + 1000 &&
           n.shard == a->store->ShardOf(soon);
  }));
  for (auto& [shard, ids] : by_shard) {
    Status s = Apply(*a, Mutation::Promote(a->Fence(shard), ids, now));
    EXPECT_TRUE(s.ok()) << "shard " << shard << ": " << s.ToString();
  }
  for (uint64_t id = 1; id <= 40; ++id) {
    EXPECT_EQ(Get(*b, id).state, id % 2 ? StoredState::kReady : StoredState::kDelayed)
        << "job " << id;
  }
  ASSERT_TRUE(WaitFor(*heard, Ready("p")));
  // Notices come in commit order: by the promote's, every due notice of the
  // puts before it was heard, and none of a job due in an hour.
  std::lock_guard lock(heard->mu);
  std::set<uint64_t> due;
  for (const Notice& n : heard->notices) {
    if (n.kind == Notice::Kind::kDue) due.insert(n.id);
  }
  std::set<uint64_t> odd;
  for (uint64_t id = 1; id <= 41; id += 2) odd.insert(id);
  EXPECT_EQ(due, odd);
}

// Which delayed jobs a batch announces is decided on the store's clock: a
// job due within due_notice_ms of its time is, one due later is not, and
// the system's time does not enter into it.
TEST_F(ClusterStoreTest, TheDueNoticeWindowIsMeasuredOnTheStoresClock) {
  // Months ahead of the system's time: the window of a store on the system
  // clock would hold neither job.
  ManualClock clock(kNow * 1000);
  auto a = Start("a", 60'000, &clock);
  auto heard = Listening(*a);
  ASSERT_NE(heard, nullptr);
  ASSERT_TRUE(
      Apply(*a, Mutation::Insert(Job(1, "w", 0, StoredState::kDelayed, kNow + 1'000))).ok());
  ASSERT_TRUE(
      Apply(*a, Mutation::Insert(Job(2, "w", 0, StoredState::kDelayed, kNow + 120'000))).ok());
  ASSERT_TRUE(Apply(*a, Mutation::Insert(Job(3, "w"))).ok());
  ASSERT_TRUE(WaitFor(*heard, [](const Notice& n) { return n.kind == Notice::Kind::kDue; }));
  // Notices come in commit order: by job 3's, every due notice was heard.
  ASSERT_TRUE(WaitFor(*heard, Ready("w")));
  std::lock_guard lock(heard->mu);
  std::set<uint64_t> due;
  for (const Notice& n : heard->notices) {
    if (n.kind == Notice::Kind::kDue) due.insert(n.id);
  }
  EXPECT_EQ(due, std::set<uint64_t>{1});
}

// A promotion that serves the owner's own waiters: per tube asked for, its
// best due pull jobs (priority, then id) are reserved by the owner in the
// same statement and returned as stored; a paused tube's are not; the rest
// become ready. Refused by the fence, it reserves and returns nothing.
TEST_F(ClusterStoreTest, APromotionReservesTheBestDueJobsForTheOwnersWaiters) {
  auto a = Start("a");
  a->Round();
  ASSERT_EQ(a->held.size(), static_cast<size_t>(kShards));
  const uint32_t pri[] = {5, 1, 3, 1, 9};
  std::vector<change::DueJob> due;
  for (uint64_t id = 1; id <= 10; ++id) {
    JobRecord j =
        Job(id, id <= 5 ? "a" : "b", id <= 5 ? pri[id - 1] : 0, StoredState::kDelayed, kNow - 1);
    ASSERT_TRUE(Apply(*a, Mutation::Insert(j)).ok());
    due.push_back({a->store->ShardOf(j), id});
  }
  ASSERT_TRUE(Apply(*a, Mutation::PauseTube("b", kNow - 10, kNow + 60'000)).ok());
  std::vector<change::Fence> fences;
  for (int shard = 0; shard < kShards; ++shard) fences.push_back(a->Fence(shard));
  const std::vector<std::pair<std::string, int64_t>> waiters = {{"a", 2}, {"b", 1}, {"c", 3}};

  // A stale epoch: nothing reserved, nothing returned, every row as it was.
  std::vector<change::Fence> stale = fences;
  stale[static_cast<size_t>(due[1].shard)].epoch -= 1;
  auto none = std::make_shared<std::vector<JobRecord>>();
  Status refused = Apply(*a, Mutation::Promote(stale, due, kNow, waiters, none));
  EXPECT_TRUE(Fenced(refused)) << refused.ToString();
  EXPECT_TRUE(none->empty());
  for (uint64_t id = 1; id <= 10; ++id) EXPECT_EQ(Get(*a, id).state, StoredState::kDelayed);

  auto mine = std::make_shared<std::vector<JobRecord>>();
  ASSERT_TRUE(Apply(*a, Mutation::Promote(fences, due, kNow, waiters, mine)).ok());
  std::set<uint64_t> reserved;
  for (const JobRecord& j : *mine) {
    reserved.insert(j.id);
    const JobRecord stored = Get(*a, j.id);
    EXPECT_EQ(j.state, StoredState::kReserved);
    EXPECT_EQ(j.reserved_by, "a");
    EXPECT_EQ(j.deadline_ms, kNow + 30'000);
    EXPECT_EQ(j.counters.reserves, 1u);
    EXPECT_EQ(j.body, "body " + std::to_string(j.id));
    EXPECT_EQ(j.version, stored.version);  // as stored: its next change is guarded by it
    EXPECT_EQ(stored.state, StoredState::kReserved);
  }
  EXPECT_EQ(reserved, (std::set<uint64_t>{2, 4}));
  for (uint64_t id = 1; id <= 10; ++id) {
    if (reserved.count(id) == 0) {
      EXPECT_EQ(Get(*a, id).state, StoredState::kReady) << id;
    }
  }
  // The rest are claimable as any ready job, best first.
  const std::vector<JobRecord> rest = Claim(*a, {"a"}, 10);
  ASSERT_EQ(rest.size(), 3u);
  EXPECT_EQ(rest[0].id, 3u);

  // Waiters with no due job of their tubes: the promotion commits, reserving nothing.
  JobRecord lone = Job(20, "d", 0, StoredState::kDelayed, kNow - 1);
  ASSERT_TRUE(Apply(*a, Mutation::Insert(lone)).ok());
  auto nothing = std::make_shared<std::vector<JobRecord>>();
  ASSERT_TRUE(
      Apply(*a, Mutation::Promote(fences, {{a->store->ShardOf(lone), 20}}, kNow, waiters, nothing))
          .ok());
  EXPECT_TRUE(nothing->empty());
  EXPECT_EQ(Get(*a, 20).state, StoredState::kReady);
}

// A due job another transaction changes while the owner's promotion reads
// it is left as that change leaves it (here: buried), not made ready over
// it: the promotion checks each row again as it writes it.
TEST_F(ClusterStoreTest, APromotionLeavesAJobChangedUnderItAsTheChangeLeftIt) {
  auto a = Start("a");
  a->Round();
  ASSERT_EQ(a->held.size(), static_cast<size_t>(kShards));
  const JobRecord j = Job(1, "t", 0, StoredState::kDelayed, kNow - 1);
  ASSERT_TRUE(Apply(*a, Mutation::Insert(j)).ok());
  PGconn* other = PQconnectdb(db_.uri().c_str());
  PQclear(PQexec(other, "BEGIN"));
  PGresult* r = PQexec(other, "UPDATE jobs SET state=2, ver=ver+1 WHERE id=1");
  ASSERT_EQ(PQresultStatus(r), PGRES_COMMAND_OK) << PQerrorMessage(other);
  PQclear(r);

  std::atomic<int> done{0};
  Status promoted;
  a->store->Submit(Mutation::Promote(a->Fence(a->store->ShardOf(j)), {1}, kNow),
                   [&](const Status& s) {
                     promoted = s;
                     ++done;
                   });
  // Until the promotion waits for the other transaction's row.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Query("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query "
               "LIKE '%UPDATE jobs j SET state=CASE%'") != "1") {
    ASSERT_LT(Clock::now(), deadline) << "the promotion never waited for the row";
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  PQclear(PQexec(other, "COMMIT"));
  PQfinish(other);
  inbox_.RunUntil(done, 1);
  EXPECT_TRUE(promoted.ok()) << promoted.ToString();
  EXPECT_EQ(Get(*a, 1).state, StoredState::kBuried);
}

// A node whose leases ran out while it stalled, and were taken by another,
// cannot promote or requeue on those shards any more: the database refuses,
// and the rows are as they were. The new owner can.
TEST_F(ClusterStoreTest, AStaleOwnerIsFencedOnceItsLeaseMoved) {
  auto a = Start("a", /*lease_ms=*/300);
  auto b = Start("b", /*lease_ms=*/300);
  a->Round();
  ASSERT_EQ(a->held.size(), static_cast<size_t>(kShards));
  JobRecord due = Job(1, "f", 0, StoredState::kDelayed, kNow - 1);
  ASSERT_TRUE(Apply(*a, Mutation::Insert(due)).ok());
  ASSERT_TRUE(Apply(*a, Mutation::Insert(Job(2, "f", 0))).ok());
  ASSERT_EQ(Claim(*a, {"f"}, 1, kNow - 60'000).size(), 1u);  // deadline long past
  const int shard1 = a->store->ShardOf(due);
  const int shard2 = a->store->ShardOf(Get(*a, 2));
  const auto stale1 = a->Fence(shard1);
  const auto stale2 = a->Fence(shard2);

  // a stalls; its leases run out and b takes them.
  TakeEveryShard(*b);
  EXPECT_GT(b->Fence(shard1).epoch, stale1.epoch);

  const uint64_t v1 = Get(*a, 1).version;
  const uint64_t v2 = Get(*a, 2).version;
  Status promote = Apply(*a, Mutation::Promote(stale1, {1}, kNow));
  Status requeue = Apply(*a, Mutation::Requeue(stale2, kNow));
  EXPECT_TRUE(Fenced(promote)) << promote.ToString();
  EXPECT_TRUE(Fenced(requeue)) << requeue.ToString();
  EXPECT_EQ(Get(*a, 1).state, StoredState::kDelayed);
  EXPECT_EQ(Get(*a, 1).version, v1);
  EXPECT_EQ(Get(*a, 2).state, StoredState::kReserved);
  EXPECT_EQ(Get(*a, 2).version, v2);

  // The same writes under the new owner's epochs take effect.
  EXPECT_TRUE(Apply(*b, Mutation::Promote(b->Fence(shard1), {1}, kNow)).ok());
  EXPECT_TRUE(Apply(*b, Mutation::Requeue(b->Fence(shard2), kNow)).ok());
  EXPECT_EQ(Get(*b, 1).state, StoredState::kReady);
  JobRecord back = Get(*b, 2);
  EXPECT_EQ(back.state, StoredState::kReady);
  EXPECT_EQ(back.reserved_by, "");
  EXPECT_EQ(back.counters.timeouts, 1u);

  // b leaves and a takes the shards back, at new epochs: what a decided
  // under its old lease is still refused, since b may have changed the shard
  // in between.
  ASSERT_TRUE(b->leases->Leave().ok());
  a->Round();
  ASSERT_EQ(a->held.size(), static_cast<size_t>(kShards));
  EXPECT_GT(a->Fence(shard1).epoch, b->Fence(shard1).epoch);
  ASSERT_TRUE(Apply(*a, Mutation::Insert(Job(3, "f", 0, StoredState::kDelayed, kNow - 1))).ok());
  const int shard3 = a->store->ShardOf(Get(*a, 3));
  Status late = Apply(*a, Mutation::Promote({shard3, stale1.epoch}, {3}, kNow));
  EXPECT_TRUE(Fenced(late)) << late.ToString();
  EXPECT_EQ(Get(*a, 3).state, StoredState::kDelayed);
  EXPECT_TRUE(Apply(*a, Mutation::Promote(a->Fence(shard3), {3}, kNow)).ok());
  EXPECT_EQ(Get(*a, 3).state, StoredState::kReady);
}

// One write over several shards (a promotion or a sweep of every owned
// shard) is all or nothing: refused whole, changing nothing, when the lease
// of one of its shards moved; committed whole under current leases.
TEST_F(ClusterStoreTest, AWriteOfSeveralShardsIsRefusedWholeWhenOneLeaseMoved) {
  auto a = Start("a");
  a->Round();
  ASSERT_EQ(a->held.size(), static_cast<size_t>(kShards));
  // Two due jobs and an expired reservation, on three shards.
  std::vector<change::DueJob> due;
  std::set<int> shards;
  for (uint64_t id = 1; due.size() < 2; ++id) {
    JobRecord j = Job(id, "s", 0, StoredState::kDelayed, kNow - 1);
    if (!shards.insert(a->store->ShardOf(j)).second) continue;
    ASSERT_TRUE(Apply(*a, Mutation::Insert(j)).ok());
    due.push_back({a->store->ShardOf(j), id});
  }
  uint64_t held_id = 100;
  while (shards.count(a->store->ShardOf(Job(held_id, "s"))) != 0) ++held_id;
  ASSERT_TRUE(Apply(*a, Mutation::Insert(Job(held_id, "s"))).ok());
  ASSERT_EQ(Claim(*a, {"s"}, 1, kNow - 60'000).size(), 1u);  // deadline long past
  const int held_shard = a->store->ShardOf(Get(*a, held_id));
  std::vector<change::Fence> fences;
  for (int shard = 0; shard < kShards; ++shard) fences.push_back(a->Fence(shard));

  // Another node takes the shard of the first due job.
  Query("UPDATE shard_leases SET owner='b', epoch=epoch+1 WHERE shard=" +
        std::to_string(due[0].shard) + " RETURNING 1");
  Status promote = Apply(*a, Mutation::Promote(fences, due, kNow));
  Status requeue = Apply(*a, Mutation::Requeue(fences, kNow));
  EXPECT_TRUE(Fenced(promote)) << promote.ToString();
  EXPECT_TRUE(Fenced(requeue)) << requeue.ToString();
  EXPECT_EQ(Get(*a, due[1].id).state, StoredState::kDelayed);
  EXPECT_EQ(Get(*a, held_id).state, StoredState::kReserved);

  // Without the shard that moved, both take effect, on every shard named.
  std::erase_if(fences, [&](const change::Fence& f) { return f.shard == due[0].shard; });
  ASSERT_NE(held_shard, due[0].shard);
  EXPECT_TRUE(Apply(*a, Mutation::Promote(fences, {due[1]}, kNow)).ok());
  EXPECT_TRUE(Apply(*a, Mutation::Requeue(fences, kNow)).ok());
  EXPECT_EQ(Get(*a, due[0].id).state, StoredState::kDelayed);
  EXPECT_EQ(Get(*a, due[1].id).state, StoredState::kReady);
  EXPECT_EQ(Get(*a, held_id).state, StoredState::kReady);
  EXPECT_EQ(Get(*a, held_id).counters.timeouts, 1u);
}

// A timer's fire (its job) commits with the timer's advance, fenced by the
// lease of the timer's shard: once the lease moved, neither is written, and
// the new owner's are.
TEST_F(ClusterStoreTest, ATimerFireCommitsWithItsAdvanceOnlyUnderTheLease) {
  auto a = Start("a", /*lease_ms=*/300);
  auto b = Start("b", /*lease_ms=*/300);
  a->Round();
  TimerRecord t;
  t.id = 5;
  t.name = "every-minute";
  t.definition = "{}";
  t.next_fire_ms = kNow;
  t.created_ms = kNow - 1000;
  ASSERT_TRUE(Apply(*a, Mutation::TimerPut(t)).ok());
  const int shard = pg::TimerShard(t.id, kShards);

  auto fire = [&](Node& n, change::Fence f, uint64_t job, int64_t fire_ms) {
    std::vector<Mutation> ms;
    ms.push_back(Mutation::Insert(Job(job, "timer")));
    ms.push_back(Mutation::TimerAdvance(t.id, fire_ms + 60'000, fire_ms,
                                        {{t.id, fire_ms, job, "created", fire_ms}})
                     .FencedBy(f));
    std::atomic<int> done{0};
    Status out;
    n.store->SubmitAll(std::move(ms), [&](const Status& s) {
      out = s;
      ++done;
    });
    inbox_.RunUntil(done, 1);
    return out;
  };
  ASSERT_TRUE(fire(*a, a->Fence(shard), 100, kNow).ok());
  EXPECT_EQ(Query("SELECT next_fire_ms FROM timers WHERE id=5"), std::to_string(kNow + 60'000));

  TakeEveryShard(*b);
  Status late = fire(*a, a->Fence(shard), 101, kNow + 60'000);
  EXPECT_TRUE(Fenced(late)) << late.ToString();
  EXPECT_EQ(Query("SELECT count(*) FROM jobs WHERE id=101"), "0");
  EXPECT_EQ(Query("SELECT count(*) FROM timer_fires WHERE timer_id=5"), "1");
  EXPECT_EQ(Query("SELECT next_fire_ms FROM timers WHERE id=5"), std::to_string(kNow + 60'000));

  ASSERT_TRUE(fire(*b, b->Fence(shard), 102, kNow + 60'000).ok());
  EXPECT_EQ(Query("SELECT count(*) FROM timer_fires WHERE timer_id=5"), "2");
  EXPECT_EQ(Query("SELECT next_fire_ms FROM timers WHERE id=5"), std::to_string(kNow + 120'000));
  // The same fire time again, even under the lease: refused by its record,
  // which is no fencing refusal (the node still owns the shard).
  Status again = fire(*b, b->Fence(shard), 103, kNow + 60'000);
  EXPECT_FALSE(again.ok());
  EXPECT_FALSE(Fenced(again)) << again.ToString();
  EXPECT_EQ(Query("SELECT count(*) FROM jobs WHERE id=103"), "0");
  // Nor is a fire of a timer deleted meanwhile.
  ASSERT_TRUE(Apply(*b, Mutation::TimerDelete(t.id)).ok());
  Status gone = fire(*b, b->Fence(shard), 104, kNow + 120'000);
  EXPECT_FALSE(gone.ok());
  EXPECT_FALSE(Fenced(gone)) << gone.ToString();
  EXPECT_EQ(Query("SELECT count(*) FROM jobs WHERE id=104"), "0");
}

// A fenced write holds its lease row until it commits: a node that would
// take the shard meanwhile skips it, takes it once the write committed, and
// from then on a write of the old epoch is refused.
TEST_F(ClusterStoreTest, AFencedWriteInFlightHoldsOffTheNextOwnerUntilItCommits) {
  auto a = Start("a", /*lease_ms=*/300);
  auto b = Start("b", /*lease_ms=*/300);
  a->Round();
  const int64_t epoch = a->Fence(0).epoch;
  ASSERT_GT(epoch, 0);

  PGconn* w = HoldFence("a", epoch);

  // Once a's leases run out, b takes every shard but the one in use.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  do {
    ASSERT_LT(Clock::now(), deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    b->Round();
  } while (b->held.size() < static_cast<size_t>(kShards - 1));
  EXPECT_EQ(b->held.count(0), 0u);

  EndFence(w);
  b->Round();
  ASSERT_EQ(b->held.count(0), 1u);
  EXPECT_EQ(b->held[0], epoch + 1);
  // A due job of shard 0, which a can no longer promote.
  JobRecord j = Job(1, "h", 0, StoredState::kDelayed, kNow);
  while (a->store->ShardOf(j) != 0) ++j.id;
  ASSERT_TRUE(Apply(*a, Mutation::Insert(j)).ok());
  Status late = Apply(*a, Mutation::Promote({0, epoch}, {j.id}, kNow));
  EXPECT_TRUE(Fenced(late)) << late.ToString();
  EXPECT_EQ(Get(*a, j.id).state, StoredState::kDelayed);
  EXPECT_TRUE(Apply(*b, Mutation::Promote(b->Fence(0), {j.id}, kNow)).ok());
  EXPECT_EQ(Get(*a, j.id).state, StoredState::kReady);
}

// The other order: a take in flight holds the shard's lock exclusive, so
// the old owner's write waits for it, and once the take commits the write
// reads the new epoch and is refused, changing nothing. (A write that read
// the lease before it locked would pass on the old epoch.)
TEST_F(ClusterStoreTest, AWriteThatWaitedForATakeIsRefusedOnceTheTakeCommits) {
  auto a = Start("a");
  a->Round();
  const store::change::Fence fence = a->Fence(0);
  ASSERT_GT(fence.epoch, 0);
  JobRecord j = Job(1, "h", 0, StoredState::kDelayed, kNow);
  while (a->store->ShardOf(j) != 0) ++j.id;
  ASSERT_TRUE(Apply(*a, Mutation::Insert(j)).ok());

  PGconn* take = PQconnectdb(db_.uri().c_str());
  ASSERT_EQ(PQstatus(take), CONNECTION_OK);
  PGresult* r = PQexec(take, fmt::format("BEGIN; SELECT pg_advisory_xact_lock({}, 0); UPDATE "
                                         "shard_leases SET owner = 'b', epoch = epoch + 1 WHERE "
                                         "shard = 0",
                                         pg::kShardLockClass)
                                 .c_str());
  ASSERT_EQ(PQresultStatus(r), PGRES_COMMAND_OK) << PQerrorMessage(take);
  PQclear(r);

  Status write;
  std::thread writer([&] { write = Apply(*a, Mutation::Promote(fence, {j.id}, kNow)); });
  // The write waits for the shard's lock.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Query(fmt::format("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT "
                           "granted AND classid = {} AND objid = 0",
                           pg::kShardLockClass)) == "0") {
    ASSERT_LT(Clock::now(), deadline) << "the write did not wait for the take";
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  PQclear(PQexec(take, "COMMIT"));
  PQfinish(take);
  writer.join();
  EXPECT_TRUE(Fenced(write)) << write.ToString();
  EXPECT_EQ(Get(*a, j.id).state, StoredState::kDelayed);
}

// The owner's renewal never waits for its own fenced writes in flight: a
// round that did (the fence once locked FOR SHARE, which the renewal's FOR
// NO KEY UPDATE waits for) let the writer's next batch queue behind it, and
// under 2,000 due jobs a second promotions came up to seconds late.
TEST_F(ClusterStoreTest, ARenewalDoesNotWaitForAFencedWriteInFlight) {
  auto a = Start("a");
  a->Round();
  const int64_t epoch = a->Fence(0).epoch;
  ASSERT_GT(epoch, 0);
  PGconn* w = HoldFence("a", epoch);

  std::atomic<bool> renewed{false};
  std::thread round([&] {
    a->Round();
    renewed = true;
  });
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (!renewed && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const bool before_commit = renewed;
  EndFence(w);  // lets a waiting round end, so the thread joins
  round.join();
  EXPECT_TRUE(before_commit) << "the renewal waited for the fenced write's commit";
  EXPECT_EQ(a->Fence(0).epoch, epoch);
}

// Id blocks never overlap, whichever node takes them and however many at
// once, and start above every id stored.
TEST_F(ClusterStoreTest, IdBlocksAreDisjointAndAboveEveryStoredId) {
  auto a = Start("a");
  auto b = Start("b");
  ASSERT_TRUE(Apply(*a, Mutation::Insert(Job(500, "t"))).ok());
  EXPECT_GT(TakeIds(*a, 10), 500u);

  std::vector<std::pair<uint64_t, uint64_t>> blocks;  // first, count
  std::atomic<int> done{0};
  for (int i = 0; i < 20; ++i) {
    for (Node* n : {a.get(), b.get()}) {
      const uint64_t count = 1 + i * 7;
      n->store->TakeIds(count, [&, count](Result<uint64_t> r) {
        EXPECT_TRUE(r.ok()) << r.status().ToString();
        if (r.ok()) blocks.emplace_back(*r, count);
        ++done;
      });
    }
  }
  inbox_.RunUntil(done, 40);
  ASSERT_EQ(blocks.size(), 40u);
  std::sort(blocks.begin(), blocks.end());
  EXPECT_GT(blocks.front().first, 500u);
  for (size_t i = 1; i < blocks.size(); ++i) {
    EXPECT_GE(blocks[i].first, blocks[i - 1].first + blocks[i - 1].second)
        << "block at " << blocks[i].first << " overlaps the one before";
  }
  // A job stored above the blocks (by an older node, say) moves them on.
  ASSERT_TRUE(Apply(*a, Mutation::Insert(Job(1'000'000, "t"))).ok());
  EXPECT_GT(TakeIds(*b, 1), 1'000'000u);
}

// A pause, a resume or new settings of a tube are announced to every node,
// which must read the tube again.
TEST_F(ClusterStoreTest, TubeChangesAreAnnouncedToEveryNode) {
  auto a = Start("a");
  auto b = Start("b");
  auto heard = Listening(*b);
  ASSERT_NE(heard, nullptr);
  auto tube = [](const std::string& name) {
    return [name](const Notice& n) { return n.kind == Notice::Kind::kTube && n.tube == name; };
  };
  ASSERT_TRUE(Apply(*a, Mutation::PauseTube("paused", 5000, kNow + 5000)).ok());
  EXPECT_TRUE(WaitFor(*heard, tube("paused")));
  ASSERT_TRUE(Apply(*a, Mutation::TopicSettings("set", R"({"retry":{}})")).ok());
  EXPECT_TRUE(WaitFor(*heard, tube("set")));
  // A put is no change of its tube.
  ASSERT_TRUE(Apply(*a, Mutation::Insert(Job(1, "put"))).ok());
  ASSERT_TRUE(WaitFor(*heard, Ready("put")));
  std::lock_guard lock(heard->mu);
  for (const Notice& n : heard->notices) {
    EXPECT_FALSE(n.kind == Notice::Kind::kTube && n.tube == "put");
  }
}

// Push jobs are their shard owner's: a consumer's claim and peek-ready never
// see one, an owner's claim takes only push jobs of the shards it names, and
// a push job made ready (put, promoted) is announced with its shard, for its
// owner, rather than as a ready tube.
TEST_F(ClusterStoreTest, PushJobsGoOnlyToTheirShardsOwnerAndAreAnnouncedWithTheShard) {
  auto a = Start("a");
  auto b = Start("b");
  auto heard = Listening(*b);
  ASSERT_NE(heard, nullptr);
  a->Round();
  std::map<int, std::set<uint64_t>> push_of_shard;
  for (uint64_t id = 1; id <= 40; ++id) {
    JobRecord j = Job(id, "m", static_cast<uint32_t>(id));
    j.push = id % 2 == 0;
    ASSERT_TRUE(Apply(*a, Mutation::Insert(j)).ok());
    if (j.push) push_of_shard[a->store->ShardOf(j)].insert(id);
  }
  ASSERT_GT(push_of_shard.size(), 1u);
  for (const auto& [shard, ids] : push_of_shard) {
    EXPECT_TRUE(WaitFor(*heard,
                        [shard = shard](const Notice& n) {
                          return n.kind == Notice::Kind::kPush && n.shard == shard && n.tube == "m";
                        }))
        << "shard " << shard;
  }

  auto best = b->store->BestReady("m");
  ASSERT_TRUE(best.ok() && best->has_value());
  EXPECT_EQ((*best)->id, 1u);
  for (const JobRecord& j : Claim(*b, {"m"}, 100)) {
    EXPECT_FALSE(j.push) << "consumer claimed push job " << j.id;
  }
  auto tubes = a->store->PushTubes({push_of_shard.begin()->first});
  ASSERT_TRUE(tubes.ok());
  EXPECT_EQ(*tubes, std::vector<std::string>{"m"});

  const int mine = push_of_shard.begin()->first;
  std::atomic<int> done{0};
  std::set<uint64_t> got;
  a->store->Claim(ClaimQuery{{"m"}, 100, kNow, {mine}, /*push=*/true},
                  [&](Result<std::vector<JobRecord>> r) {
                    EXPECT_TRUE(r.ok()) << r.status().ToString();
                    if (r.ok()) {
                      for (const JobRecord& j : *r) {
                        EXPECT_TRUE(j.push);
                        EXPECT_EQ(j.reserved_by, "a");
                        got.insert(j.id);
                      }
                    }
                    ++done;
                  });
  inbox_.RunUntil(done, 1);
  EXPECT_EQ(got, push_of_shard[mine]);
  tubes = a->store->PushTubes({mine});
  ASSERT_TRUE(tubes.ok());
  EXPECT_TRUE(tubes->empty()) << "every push job of shard " << mine << " was claimed";

  // A delayed push job promoted by its owner is announced with its shard.
  JobRecord later = Job(41, "n", 0, StoredState::kDelayed, kNow - 1);
  later.push = true;
  ASSERT_TRUE(Apply(*a, Mutation::Insert(later)).ok());
  const int shard = a->store->ShardOf(later);
  ASSERT_TRUE(Apply(*a, Mutation::Promote(a->Fence(shard), {41}, kNow)).ok());
  EXPECT_TRUE(WaitFor(*heard, [shard](const Notice& n) {
    return n.kind == Notice::Kind::kPush && n.shard == shard && n.tube == "n";
  }));
  std::lock_guard lock(heard->mu);
  for (const Notice& n : heard->notices) {
    EXPECT_FALSE(n.kind == Notice::Kind::kReady && n.tube == "n") << "a push job as a ready tube";
  }
}

// Timer ids taken by several nodes never repeat and stay above every stored
// one; an owner reads only its shards' timers; a timer's change is announced.
TEST_F(ClusterStoreTest, TimerIdsAreTheDatabasesAndOwnersReadTheirShardsTimers) {
  auto a = Start("a");
  auto b = Start("b");
  auto heard = Listening(*b);
  ASSERT_NE(heard, nullptr);
  TimerRecord stored;
  stored.id = 7;
  stored.name = "seven";
  stored.definition = "{}";
  stored.next_fire_ms = kNow;
  ASSERT_TRUE(Apply(*a, Mutation::TimerPut(stored)).ok());
  EXPECT_TRUE(
      WaitFor(*heard, [](const Notice& n) { return n.kind == Notice::Kind::kTimer && n.id == 7; }));

  std::set<uint64_t> ids;
  std::atomic<int> done{0};
  for (int i = 0; i < 20; ++i) {
    for (Node* n : {a.get(), b.get()}) {
      n->store->TakeTimerId([&](Result<uint64_t> r) {
        EXPECT_TRUE(r.ok()) << r.status().ToString();
        if (r.ok()) {
          EXPECT_GT(*r, 7u);
          EXPECT_TRUE(ids.insert(*r).second) << "timer id " << *r << " handed out twice";
        }
        ++done;
      });
    }
  }
  inbox_.RunUntil(done, 40);
  EXPECT_EQ(ids.size(), 40u);

  std::map<int, std::set<uint64_t>> of_shard;
  for (uint64_t id : ids) {
    TimerRecord t;
    t.id = id;
    t.name = "t" + std::to_string(id);
    t.definition = "{}";
    t.next_fire_ms = kNow + static_cast<int64_t>(id);
    ASSERT_TRUE(Apply(*a, Mutation::TimerPut(t)).ok());
    of_shard[a->store->TimerShardOf(id)].insert(id);
  }
  ASSERT_GT(of_shard.size(), 1u);
  const int shard = of_shard.begin()->first;
  auto rows = b->store->TimersDueOf({shard}, 0, 0, kNow + 1'000'000, 1000);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  std::set<uint64_t> read;
  for (const TimerRecord& t : *rows) read.insert(t.id);
  if (a->store->TimerShardOf(7) == shard) of_shard[shard].insert(7);
  EXPECT_EQ(read, of_shard[shard]);

  ASSERT_TRUE(Apply(*b, Mutation::TimerDelete(*ids.begin())).ok());
  EXPECT_TRUE(WaitFor(*heard, [id = *ids.begin()](const Notice& n) {
    return n.kind == Notice::Kind::kTimer && n.id == id;
  }));
}

// The notices' connection comes back by itself when the server drops it,
// and says so (kListening), so the node reads again what it may have missed.
TEST_F(ClusterStoreTest, TheListenerReconnectsAndSaysSo) {
  auto a = Start("a");
  auto b = Start("b");
  auto heard = Listen(*b);
  auto listening = [](const Notice& n) { return n.kind == Notice::Kind::kListening; };
  ASSERT_TRUE(WaitFor(*heard, listening));
  {
    std::lock_guard lock(heard->mu);
    heard->notices.clear();
  }
  EXPECT_EQ(Query("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                  "application_name='delayd-listener' AND datname=current_database()"),
            "1");
  ASSERT_TRUE(WaitFor(*heard, listening));
  ASSERT_TRUE(Apply(*a, Mutation::Insert(Job(1, "again"))).ok());
  EXPECT_TRUE(WaitFor(*heard, Ready("again")));
}

}  // namespace
}  // namespace delayd::store
