// The Store contract, for every store: each test runs on SQLite and on
// PostgreSQL (a database of its own on the test command's server).
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "store/postgres/pg_store.h"
#include "store/sqlite/sqlite_store.h"
#include "store/testing/inbox.h"
#include "store/testing/pg_test_db.h"
#include "store/testing/test_dir.h"

namespace delayd::store {
namespace {

class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "postgres") {
      pg_ = std::make_unique<testing::PgTestDb>();
      ASSERT_FALSE(pg_->uri().empty()) << pg_->error();
    } else {
      dir_ = testing::FreshTestDir("store");
    }
    Reopen();
  }
  void TearDown() override {
    store_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  // Closes the store (if open) and opens it again on the same data.
  void Reopen(int64_t sync_delay_ms = kDefaultSyncDelayMs) {
    store_.reset();
    if (pg_) {
      auto r = PgStore::Open({.conninfo = pg_->uri(), .sync_delay_ms = sync_delay_ms},
                             inbox_.executor());
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      store_ = std::move(r).value();
    } else {
      auto r =
          SqliteStore::Open({.path = (dir_ / "delayd.db").string(), .sync_delay_ms = sync_delay_ms},
                            inbox_.executor());
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      store_ = std::move(r).value();
    }
  }
  // Submits and waits until every mutation is durable; returns their statuses.
  std::vector<Status> Apply(std::vector<Mutation> ms) {
    std::atomic<int> done{0};
    std::vector<Status> out(ms.size());
    for (size_t i = 0; i < ms.size(); ++i) {
      store_->Submit(std::move(ms[i]), [&, i](const Status& s) {
        out[i] = s;
        ++done;
      });
    }
    inbox_.RunUntil(done, static_cast<int>(out.size()));
    return out;
  }
  // Reopens with `sync_delay_ms`, stores job 1 (ready), and returns the
  // syncs made so far: the later ones are the test's.
  uint64_t OneJobWithSyncDelay(int64_t sync_delay_ms) {
    Reopen(sync_delay_ms);
    Apply({Mutation::Insert(Job(1, StoredState::kReady, 0))});
    return store_->stats().syncs;
  }
  static JobRecord Job(uint64_t id, StoredState state, int64_t due_ms, std::string tube = "t") {
    JobRecord j;
    j.id = id;
    j.tube = std::move(tube);
    j.priority = 10;
    j.state = state;
    j.due_ms = due_ms;
    j.ttr_ms = 1000;
    j.created_ms = 5;
    j.body = "body-" + std::to_string(id);
    return j;
  }

  std::filesystem::path dir_;
  std::unique_ptr<testing::PgTestDb> pg_;
  testing::Inbox inbox_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreTest, InsertedJobReadsBackWhole) {
  JobRecord j = Job(7, StoredState::kBuried, 0);
  j.counters.buries = 3;
  for (auto& s : Apply({Mutation::Insert(j)})) ASSERT_TRUE(s.ok()) << s.ToString();
  auto got = store_->Get(7);
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->body, "body-7");
  EXPECT_EQ((*got)->state, StoredState::kBuried);
  EXPECT_EQ((*got)->counters.buries, 3u);
  EXPECT_FALSE(store_->Get(8)->has_value());
}

TEST_P(StoreTest, DueCountsBucketFromTheGivenMinuteAndCountFromNow) {
  const int64_t hour = 500;                                          // minutes 30000-30059
  const int64_t now = (hour * 60 + 20) * kMillisPerMinute + 30'000;  // 20.5 minutes in
  auto at = [&](int64_t minutes) { return now + minutes * kMillisPerMinute; };
  Apply({Mutation::Insert(Job(1, StoredState::kDelayed, now - 1)),  // passed: not counted
         Mutation::Insert(Job(2, StoredState::kDelayed, at(-10))),  // passed, this hour
         Mutation::Insert(Job(3, StoredState::kDelayed, now)),
         Mutation::Insert(Job(4, StoredState::kDelayed, at(30), "b")),
         Mutation::Insert(Job(5, StoredState::kDelayed, at(45))),     // the next hour
         Mutation::Insert(Job(6, StoredState::kReady, at(45))),       // not delayed
         Mutation::Insert(Job(7, StoredState::kDelayed, at(100))),    // hour + 2
         Mutation::Insert(Job(8, StoredState::kDelayed, at(200)))});  // beyond 3 hours
  auto hours = store_->DueCounts(now, hour * 60, 60, 3, std::nullopt);
  ASSERT_TRUE(hours.ok()) << hours.status().ToString();
  EXPECT_EQ(*hours, (std::vector<uint64_t>{2, 1, 1}));
  EXPECT_EQ(store_->DueCounts(now, hour * 60, 60, 3, "b").value(),
            (std::vector<uint64_t>{1, 0, 0}));
  // Minutes from now's minute.
  auto minutes = store_->DueCounts(now, DueMinute(now), 15, 3, std::nullopt);
  ASSERT_TRUE(minutes.ok());
  EXPECT_EQ(*minutes, (std::vector<uint64_t>{1, 0, 1}));  // now; 30 minutes on
}

TEST_P(StoreTest, RecoverySplitsNearJobsFromFarCounts) {
  const int64_t minute = 1000;
  Apply({Mutation::Insert(Job(1, StoredState::kReady, 0)),
         Mutation::Insert(Job(2, StoredState::kDelayed, minute * kMillisPerMinute + 5)),
         Mutation::Insert(Job(3, StoredState::kDelayed, (minute + 1) * kMillisPerMinute, "a")),
         Mutation::Insert(Job(4, StoredState::kDelayed, (minute + 9) * kMillisPerMinute, "a")),
         Mutation::Insert(Job(5, StoredState::kBuried, (minute + 9) * kMillisPerMinute)),
         Mutation::Insert(Job(6, StoredState::kDelayed, (minute + 3) * kMillisPerMinute, "b")),
         Mutation::Insert(Job(7, StoredState::kDone, 0)),
         Mutation::Insert(Job(8, StoredState::kDelayed, (minute + 125) * kMillisPerMinute, "a"))});
  Reopen();
  auto r = store_->Recover(minute);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<uint64_t> ids;
  for (auto& j : r->jobs) ids.push_back(j.id);
  if (store_->ScansSets()) {
    // Ready and buried jobs come as counts, read by ScanSet.
    EXPECT_EQ(ids, (std::vector<uint64_t>{2}));
    ASSERT_EQ(r->sets.size(), 2u);
    for (const SetCount& c : r->sets) {
      EXPECT_EQ(c.tube, "t");
      EXPECT_EQ(c.jobs, 1u);
      EXPECT_EQ(c.urgent, c.set == JobSet::kBuried ? 0u : 1u);  // priority 10
    }
  } else {
    EXPECT_EQ(ids, (std::vector<uint64_t>{1, 2, 5}));
  }
  // Counted per tube and due hour: minutes 1001 and 1009 are in hour 16,
  // 1125 in hour 18.
  ASSERT_EQ(r->far.size(), 3u);
  EXPECT_EQ(r->far[0].tube, "a");
  EXPECT_EQ(r->far[0].hour, 16);
  EXPECT_EQ(r->far[0].delayed, 2u);
  EXPECT_EQ(r->far[1].tube, "a");
  EXPECT_EQ(r->far[1].hour, 18);
  EXPECT_EQ(r->far[1].delayed, 1u);
  EXPECT_EQ(r->far[2].tube, "b");
  EXPECT_EQ(r->far[2].hour, 16);
  EXPECT_EQ(r->far[2].delayed, 1u);
  EXPECT_EQ(r->next_id, 9u);

  auto loaded = store_->LoadMinute(minute + 1, 0, 100);
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_EQ((*loaded)[0].id, 3u);
  auto far = store_->FarDelayed("a", minute, 10);
  ASSERT_EQ(far->size(), 3u);
  EXPECT_EQ((*far)[0].id, 3u);
}

// A read aside: the same rows as the read made directly, answered through
// the executor (PostgreSQL: read on a thread of its own) or at once.
TEST_P(StoreTest, ReadAsyncAnswersWhatTheReadReturns) {
  const int64_t minute = 500;
  std::vector<Mutation> ms;
  for (uint64_t id = 1; id <= 5; ++id) {
    ms.push_back(
        Mutation::Insert(Job(id, StoredState::kDelayed, (minute + id % 2) * kMillisPerMinute)));
  }
  Apply(std::move(ms));
  std::atomic<int> done{0};
  Result<std::vector<JobRecord>> rows = Status::Internal("not answered");
  Result<std::optional<JobRecord>> one = Status::Internal("not answered");
  ReadAsync(
      *store_, [&] { return store_->LoadMinute(minute, 1, 10); },
      [&](Result<std::vector<JobRecord>> r) {
        rows = std::move(r);
        ++done;
      });
  ReadAsync(
      *store_, [&] { return store_->Get(5); },
      [&](Result<std::optional<JobRecord>> r) {
        EXPECT_EQ(done.load(), 1) << "reads aside are answered in call order";
        one = std::move(r);
        ++done;
      });
  inbox_.RunUntil(done, 2);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  std::vector<uint64_t> ids;
  for (const JobRecord& j : *rows) ids.push_back(j.id);
  EXPECT_EQ(ids, (std::vector<uint64_t>{2, 4}));  // minute 500, after id 1, in id order
  EXPECT_EQ((*rows)[0].body, "body-2");
  ASSERT_TRUE(one.ok() && one.value());
  EXPECT_EQ((*one)->body, "body-5");
}

// The engine's windows read each tube's ready jobs of one kind in
// beanstalkd's order (priority, then id) and its buried jobs in bury order,
// after a key, a page at a time; recovery counts them.
TEST_P(StoreTest, ScanSetReadsASetInItsOrderAfterAKey) {
  if (!store_->ScansSets()) GTEST_SKIP() << "this store keeps ready and buried jobs in memory";
  std::vector<Mutation> ms;
  auto job = [&](uint64_t id, StoredState state, uint32_t pri, std::string tube = "t") {
    JobRecord j = Job(id, state, 0, std::move(tube));
    j.priority = pri;
    return j;
  };
  ms.push_back(Mutation::Insert(job(1, StoredState::kReady, 5)));
  ms.push_back(Mutation::Insert(job(2, StoredState::kReady, 1)));
  ms.push_back(Mutation::Insert(job(3, StoredState::kReady, 5)));
  ms.push_back(Mutation::Insert(job(4, StoredState::kReady, 2000)));
  JobRecord push = job(5, StoredState::kReady, 0);
  push.push = true;
  ms.push_back(Mutation::Insert(push));
  ms.push_back(Mutation::Insert(job(6, StoredState::kReady, 0, "other")));
  ms.push_back(Mutation::Insert(job(7, StoredState::kDelayed, 0)));
  JobRecord buried = job(8, StoredState::kBuried, 0);
  buried.bury_seq = 20;
  ms.push_back(Mutation::Insert(buried));
  buried = job(9, StoredState::kBuried, 0);
  buried.bury_seq = 10;
  ms.push_back(Mutation::Insert(buried));
  Apply(std::move(ms));
  // Buried later than 9 by an update, which writes its new place.
  JobRecord again = job(9, StoredState::kBuried, 0);
  again.bury_seq = 30;
  Apply({Mutation::Update(again)});
  auto ids = [&](JobSet set, SetKey after, size_t limit) {
    auto rows = store_->ScanSet("t", set, after, limit);
    EXPECT_TRUE(rows.ok()) << rows.status().ToString();
    std::vector<uint64_t> out;
    for (const JobRecord& r : rows.value()) out.push_back(r.id);
    return out;
  };
  EXPECT_EQ(ids(JobSet::kReady, {}, 10), (std::vector<uint64_t>{2, 1, 3, 4}));
  EXPECT_EQ(ids(JobSet::kReady, {5, 1}, 10), (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(ids(JobSet::kReady, {}, 2), (std::vector<uint64_t>{2, 1}));
  EXPECT_EQ(ids(JobSet::kReady, {1, 2}, 2), (std::vector<uint64_t>{1, 3}))
      << "past the last of its priority, the next priorities' first";
  EXPECT_EQ(ids(JobSet::kReady, {5, 0}, 1), (std::vector<uint64_t>{1}));
  EXPECT_EQ(ids(JobSet::kPushReady, {}, 10), (std::vector<uint64_t>{5}));
  EXPECT_EQ(ids(JobSet::kBuried, {}, 10), (std::vector<uint64_t>{8, 9}));
  EXPECT_EQ(ids(JobSet::kBuried, {20, 8}, 10), (std::vector<uint64_t>{9}));
  EXPECT_EQ(store_->Get(9)->value().bury_seq, 30u);

  // Read ahead, where the store has a thread for it: the same rows, and
  // `ready` through the completion executor once they are read.
  std::atomic<int> answered{0};
  auto ahead = store_->ScanSetAhead("t", JobSet::kReady, {5, 1}, 10, [&] { ++answered; });
  if (ahead != nullptr) {
    auto rows = ahead->Take();
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    std::vector<uint64_t> got;
    for (const JobRecord& r : *rows) got.push_back(r.id);
    EXPECT_EQ(got, (std::vector<uint64_t>{3, 4}));
    inbox_.RunUntil(answered, 1);
    EXPECT_EQ(answered.load(), 1);
  }

  Reopen();
  auto r = store_->Recover(0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->max_bury_seq, 30u);
  std::map<std::pair<std::string, JobSet>, std::pair<uint64_t, uint64_t>> counts;
  for (const SetCount& c : r->sets) counts[{c.tube, c.set}] = {c.jobs, c.urgent};
  using Counts = std::map<std::pair<std::string, JobSet>, std::pair<uint64_t, uint64_t>>;
  EXPECT_EQ(counts, (Counts{{{"t", JobSet::kReady}, {4, 3}},
                            {{"t", JobSet::kPushReady}, {1, 1}},
                            {{"t", JobSet::kBuried}, {2, 0}},
                            {{"other", JobSet::kReady}, {1, 1}}}));
}

TEST_P(StoreTest, IdsNeverRepeatAfterNewestJobIsDeleted) {
  Apply({Mutation::Insert(Job(41, StoredState::kReady, 0))});
  Apply({Mutation::Delete(41)});
  Reopen();
  auto r = store_->Recover(0);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->jobs.empty());
  EXPECT_EQ(r->next_id, 42u);
}

TEST_P(StoreTest, UpdateChangesStateButKeepsBody) {
  Apply({Mutation::Insert(Job(1, StoredState::kReady, 0))});
  JobRecord u = Job(1, StoredState::kDelayed, 99 * kMillisPerMinute);
  u.body.clear();
  u.priority = 3;
  Apply({Mutation::Update(u)});
  auto got = store_->Get(1);
  EXPECT_EQ((*got)->body, "body-1");
  EXPECT_EQ((*got)->priority, 3u);
  EXPECT_EQ(store_->LoadMinute(99, 0, 10)->size(), 1u);
}

TEST_P(StoreTest, FailedBatchAppliesNothingAndReportsEveryMutation) {
  // A duplicate id makes the batch fail; its other insert must not persist.
  Apply({Mutation::Insert(Job(1, StoredState::kReady, 0))});
  std::vector<Status> st = Apply({Mutation::Insert(Job(2, StoredState::kReady, 0)),
                                  Mutation::Insert(Job(1, StoredState::kReady, 0))});
  // Both were queued before the writer woke, or the duplicate failed alone:
  // either way a failure is reported and job 2 exists only if its own batch passed.
  bool any_failed = !st[0].ok() || !st[1].ok();
  EXPECT_TRUE(any_failed);
  EXPECT_FALSE(st[1].ok());
  EXPECT_EQ(store_->Get(2)->has_value(), st[0].ok());
}

TEST_P(StoreTest, AConflictFailsOnlyItsOwnSubmission) {
  JobRecord keyed = Job(1, StoredState::kDelayed, 60'000);
  keyed.key = "order-1";
  ASSERT_TRUE(Apply({Mutation::Insert(keyed)})[0].ok());
  // Queued together, so most likely committed in one batch: the taken key
  // fails its own submission, and the others commit.
  std::vector<Mutation> ms;
  for (uint64_t id = 10; id < 210; ++id) {
    JobRecord j = Job(id, StoredState::kDelayed, 60'000);
    if (id == 100) j.key = "order-1";
    ms.push_back(Mutation::Insert(j));
  }
  std::vector<Status> st = Apply(std::move(ms));
  for (size_t i = 0; i < st.size(); ++i) {
    if (i + 10 == 100) {
      EXPECT_EQ(st[i].code(), StatusCode::kConflict) << st[i].ToString();
    } else {
      EXPECT_TRUE(st[i].ok()) << i << ": " << st[i].ToString();
    }
  }
  EXPECT_FALSE(store_->Get(100)->has_value());
  EXPECT_TRUE(store_->Get(209)->has_value());
  EXPECT_EQ(store_->GetByKey("t", "order-1")->value().id, 1u);
}

TimerRecord Timer(uint64_t id, std::string name, int64_t next_fire_ms) {
  TimerRecord t;
  t.id = id;
  t.name = std::move(name);
  t.definition = R"({"schedule":"* * * * *"})";
  t.next_fire_ms = next_fire_ms;
  t.created_ms = 7;
  return t;
}

TEST_P(StoreTest, TimersReadBackByIdNameListAndDueTime) {
  for (auto& s :
       Apply({Mutation::TimerPut(Timer(1, "a", 5000)), Mutation::TimerPut(Timer(2, "b", 3000)),
              Mutation::TimerPut(Timer(3, "off", 0))})) {
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  auto a = store_->GetTimer(1);
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_EQ((*a)->name, "a");
  EXPECT_EQ((*a)->definition, R"({"schedule":"* * * * *"})");
  EXPECT_EQ((*a)->next_fire_ms, 5000);
  EXPECT_EQ((*a)->created_ms, 7);
  EXPECT_EQ(store_->GetTimerByName("b")->value().id, 2u);
  EXPECT_FALSE(store_->GetTimerByName("zzz")->has_value());
  auto page = store_->ListTimers(1, 10);
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].id, 2u);
  // Due ones soonest first; a timer without a next fire is never due.
  auto due = store_->TimersDue(0, 0, 10'000, 10);
  ASSERT_EQ(due->size(), 2u);
  EXPECT_EQ((*due)[0].name, "b");
  EXPECT_EQ((*due)[1].name, "a");
  EXPECT_EQ(store_->TimersDue(0, 0, 4000, 10)->size(), 1u);
  // Paging on (next fire, id): after b, only a.
  auto rest = store_->TimersDue(3000, 2, 10'000, 10);
  ASSERT_EQ(rest->size(), 1u);
  EXPECT_EQ((*rest)[0].name, "a");
}

TEST_P(StoreTest, ATakenTimerNameIsAConflictAndChangesNothing) {
  ASSERT_TRUE(Apply({Mutation::TimerPut(Timer(1, "daily", 5000))})[0].ok());
  Status s = Apply({Mutation::TimerPut(Timer(2, "daily", 6000))})[0];
  EXPECT_EQ(s.code(), StatusCode::kConflict) << s.ToString();
  EXPECT_FALSE(store_->GetTimer(2)->has_value());
  // Renaming to a free name, and replacing by id, work.
  ASSERT_TRUE(Apply({Mutation::TimerPut(Timer(1, "nightly", 7000))})[0].ok());
  EXPECT_EQ(store_->GetTimer(1)->value().name, "nightly");
  EXPECT_EQ(store_->GetTimer(1)->value().next_fire_ms, 7000);
}

TEST_P(StoreTest, TimerIdsNeverRepeatAfterTheNewestIsDeleted) {
  Apply({Mutation::TimerPut(Timer(1, "a", 0)), Mutation::TimerPut(Timer(2, "b", 0))});
  Apply({Mutation::TimerDelete(2)});
  Reopen();
  auto r = store_->Recover(0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->next_timer_id, 3u);
  EXPECT_FALSE(store_->GetTimer(2)->has_value());
}

TEST_P(StoreTest, AFireTimeIsRecordedOnceAndItsJobWithIt) {
  ASSERT_TRUE(Apply({Mutation::TimerPut(Timer(1, "t", 1000))})[0].ok());
  auto fire = [&](uint64_t job_id, int64_t fire_ms, int64_t next_ms) {
    JobRecord j = Job(job_id, StoredState::kDelayed, fire_ms);
    j.key = "timer:1:" + std::to_string(fire_ms) + ":" + std::to_string(job_id);
    std::atomic<int> done{0};
    Status out;
    store_->SubmitAll(
        {Mutation::Insert(j),
         Mutation::TimerAdvance(1, next_ms, fire_ms, {{1, fire_ms, job_id, "created", 42}})},
        [&](const Status& s) {
          out = s;
          ++done;
        });
    inbox_.RunUntil(done, 1);
    return out;
  };
  ASSERT_TRUE(fire(5, 1000, 2000).ok());
  // The same fire time again fails whole: no second job, the timer unmoved.
  Status again = fire(6, 1000, 9000);
  EXPECT_EQ(again.code(), StatusCode::kConflict) << again.ToString();
  EXPECT_FALSE(store_->Get(6)->has_value());
  EXPECT_TRUE(store_->Get(5)->has_value());
  EXPECT_EQ(store_->GetTimer(1)->value().next_fire_ms, 2000);
  EXPECT_EQ(store_->GetTimer(1)->value().last_fire_ms, 1000);
  auto fires = store_->TimerFires(1, 10);
  ASSERT_EQ(fires->size(), 1u);
  EXPECT_EQ((*fires)[0].job_id, 5u);
  EXPECT_EQ((*fires)[0].outcome, "created");
  EXPECT_EQ((*fires)[0].at_ms, 42);
  // A deleted timer cannot advance; its fires go with it.
  Apply({Mutation::TimerDelete(1)});
  EXPECT_EQ(fire(7, 2000, 3000).code(), StatusCode::kConflict);
  EXPECT_TRUE(store_->TimerFires(1, 10)->empty());
}

TEST_P(StoreTest, TimerFiresKeepTheLatestHundred) {
  ASSERT_TRUE(Apply({Mutation::TimerPut(Timer(1, "t", 1000))})[0].ok());
  for (int64_t f = 1; f <= 130; ++f) {
    ASSERT_TRUE(Apply({Mutation::TimerAdvance(1, (f + 1) * 1000, f * 1000,
                                              {{1, f * 1000, 0, "skipped-overlap", f}})})[0]
                    .ok());
  }
  auto fires = store_->TimerFires(1, 1000);
  ASSERT_EQ(fires->size(), static_cast<size_t>(kTimerFiresKept));
  EXPECT_EQ(fires->front().fire_ms, 130'000);
  EXPECT_EQ(fires->back().fire_ms, 31'000);
}

TEST_P(StoreTest, AWrittenChangeIsAnsweredAtOnceAndSyncedWhenItsDelayRunsOut) {
  const uint64_t synced = OneJobWithSyncDelay(1000);
  EXPECT_GE(synced, 1u) << "an insert is synced before its callback";

  const auto start = std::chrono::steady_clock::now();
  uint64_t syncs_at_callback = ~0ull;
  std::atomic<int> done{0};
  store_->Submit(Mutation::Delete(1).Written(), [&](const Status& s) {
    EXPECT_TRUE(s.ok()) << s.ToString();
    syncs_at_callback = store_->stats().syncs;
    ++done;
  });
  inbox_.RunUntil(done, 1);
  EXPECT_EQ(syncs_at_callback, synced) << "answered without waiting for a sync";
  EXPECT_FALSE(store_->Get(1)->has_value()) << "committed: readers see it";

  // Nothing else comes, so the delay alone brings the sync, and not before.
  const auto deadline = start + std::chrono::seconds(10);
  while (store_->stats().syncs == synced && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(store_->stats().syncs, synced + 1);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1000));
}

TEST_P(StoreTest, ASyncedChangeSyncsTheWrittenOnesBeforeIt) {
  const uint64_t synced = OneJobWithSyncDelay(1000);
  std::atomic<int> done{0};
  uint64_t syncs_at_insert = 0;
  JobRecord released = Job(1, StoredState::kReady, 0);
  store_->Submit(Mutation::Update(released).Written(), [&](const Status&) { ++done; });
  store_->Submit(Mutation::Insert(Job(2, StoredState::kReady, 0)), [&](const Status& s) {
    EXPECT_TRUE(s.ok());
    syncs_at_insert = store_->stats().syncs;
    ++done;
  });
  inbox_.RunUntil(done, 2);
  // Whether the two shared a batch or not, the insert's sync came after the
  // release's commit, and nothing is left to sync.
  EXPECT_GT(syncs_at_insert, synced);
  store_->Close();
  EXPECT_EQ(store_->stats().syncs, syncs_at_insert) << "nothing was left unsynced";
}

TEST_P(StoreTest, ASyncDelayOfZeroSyncsEveryChangeBeforeItsCallback) {
  const uint64_t synced = OneJobWithSyncDelay(0);
  std::atomic<int> done{0};
  uint64_t syncs_at_callback = 0;
  store_->Submit(Mutation::Delete(1).Written(), [&](const Status&) {
    syncs_at_callback = store_->stats().syncs;
    ++done;
  });
  inbox_.RunUntil(done, 1);
  EXPECT_EQ(syncs_at_callback, synced + 1);
}

TEST_P(StoreTest, CloseSyncsWhatWasOnlyWritten) {
  const uint64_t synced = OneJobWithSyncDelay(1000);
  std::atomic<int> done{0};
  store_->Submit(Mutation::Delete(1).Written(), [&](const Status&) { ++done; });
  inbox_.RunUntil(done, 1);
  EXPECT_EQ(store_->stats().syncs, synced);
  store_->Close();
  EXPECT_EQ(store_->stats().syncs, synced + 1);
}

TEST_P(StoreTest, PausesSurviveReopen) {
  Apply({Mutation::PauseTube("p", 5000, 123456)});
  Reopen();
  auto r = store_->Recover(0);
  ASSERT_EQ(r->pauses.size(), 1u);
  EXPECT_EQ(r->pauses[0].tube, "p");
  EXPECT_EQ(r->pauses[0].unpause_ms, 123456);
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace delayd::store
