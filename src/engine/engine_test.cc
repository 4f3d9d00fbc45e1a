#include "engine/engine.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "engine/testing/recorder.h"
#include "store/sqlite/sqlite_store.h"
#include "store/testing/flaky_store.h"
#include "store/testing/memory_store.h"
#include "store/testing/posted_work.h"
#include "store/testing/test_dir.h"

namespace delayd::engine {
namespace {

using store::testing::FlakyStore;

using testing::Recorder;

// A manual clock whose wall reading can lag its steady reading by a few
// microseconds, as two real clock reads made one after the other do.
class TestClock final : public Clock {
 public:
  int64_t WallMicros() const override { return base.WallMicros() - wall_lag_us; }
  int64_t SteadyMicros() const override { return base.SteadyMicros(); }
  void Advance(int64_t us) { base.Advance(us); }
  void AdvanceMillis(int64_t ms) { base.AdvanceMillis(ms); }
  void StepWall(int64_t us) { base.StepWall(us); }
  ManualClock base;
  int64_t wall_lag_us = 0;
};

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = store::testing::FreshTestDir("engine");
    Start();
  }
  void TearDown() override {
    Stop();
    std::filesystem::remove_all(dir_);
  }
  void Start(EngineOptions options = {}) {
    auto s = store::SqliteStore::Open({.path = (dir_ / "delayd.db").string()}, work_.executor());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    flaky_ = std::make_unique<FlakyStore>(*store_, work_.executor());
    engine_ =
        std::make_unique<Engine>(*flaky_, clock_, options, [this](int64_t at) { wake_at_ = at; });
    ASSERT_TRUE(engine_->Recover().ok());
  }
  // A clean stop: the store commits what is queued, memory is thrown away.
  // EngineDurabilityTest crashes and cuts the power for real.
  void Stop() {
    if (!store_) return;
    store_->Close();
    RunPosted();
    engine_.reset();
    flaky_.reset();
    store_.reset();
  }
  void RunPosted() { work_.RunPosted(); }
  template <typename Pred>
  void RunUntil(Pred pred) {
    work_.RunUntil(pred);
  }
  uint64_t Put(Client* c, std::string body, int64_t delay_ms = 0, uint32_t pri = 100,
               int64_t ttr_ms = 10'000) {
    std::optional<Result<uint64_t>> out;
    engine_->Put(c, pri, delay_ms, ttr_ms, std::move(body), [&](Result<uint64_t> r) { out = r; });
    RunUntil([&] { return out.has_value(); });
    EXPECT_TRUE(out->ok());
    return out->ok() ? out->value() : 0;
  }
  Status Await(std::function<void(Engine::Done)> op) {
    std::optional<Status> out;
    op([&](const Status& s) { out = s; });
    RunUntil([&] { return out.has_value(); });
    return *out;
  }
  void Advance(int64_t ms) {
    clock_.AdvanceMillis(ms);
    engine_->Tick();
  }
  using Outcome = std::optional<Result<std::vector<Submitted>>>;
  // Submits one job with `key` to topic "t"; `out` gets the answer.
  void SubmitKeyed(const std::string& key, Outcome& out) {
    NewJob n;
    n.key = key;
    std::vector<NewJob> batch;
    batch.push_back(std::move(n));
    engine_->Submit("t", std::move(batch), [&out](auto r) { out = std::move(r); });
  }
  Result<JobView> Peek(uint64_t id) {
    return work_.Answer<JobView>([&](auto done) { engine_->Peek(id, done); });
  }
  Result<JobView> PeekDelayed(Client* c) {
    return work_.Answer<JobView>([&](auto done) { engine_->PeekDelayed(c, done); });
  }
  Result<JobStats> StatsJob(uint64_t id) {
    return work_.Answer<JobStats>([&](auto done) { engine_->StatsJob(id, done); });
  }
  Result<JobInfo> GetJob(uint64_t id) {
    return work_.Answer<JobInfo>([&](auto done) { engine_->GetJob(id, done); });
  }
  Result<JobInfo> GetByKey(const std::string& topic, const std::string& key) {
    return work_.Answer<JobInfo>([&](auto done) { engine_->GetByKey(topic, key, done); });
  }

  std::filesystem::path dir_;
  TestClock clock_;
  std::unique_ptr<store::SqliteStore> store_;
  std::unique_ptr<FlakyStore> flaky_;
  std::unique_ptr<Engine> engine_;
  int64_t wake_at_ = -1;
  store::testing::PostedWork work_;
};

TEST_F(EngineTest, PutIsInvisibleUntilDurableThenGoesToWaitingReserver) {
  Recorder r;
  Client* consumer = engine_->Connect(&r);
  Client* producer = engine_->Connect(&r);
  engine_->Reserve(consumer, -1);
  EXPECT_TRUE(r.events.empty());
  std::optional<Result<uint64_t>> put;
  engine_->Put(producer, 1, 0, 5000, "hello", [&](Result<uint64_t> x) { put = x; });
  EXPECT_TRUE(r.events.empty()) << "job visible before it was durable";
  EXPECT_EQ(engine_->Stats().ready, 0u);
  RunUntil([&] { return put.has_value(); });
  EXPECT_EQ(r.Take(), "reserved " + std::to_string(put->value()) + " hello");
}

// Found by the beanstalk fuzz target: a client that both used and watched
// one tube read it after dropping it on disconnect (ASan: use after free).
TEST_F(EngineTest, DisconnectDropsATubeBothUsedAndWatched) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  engine_->Use(c, "orders");
  engine_->Watch(c, "orders");
  ASSERT_TRUE(engine_->Ignore(c, "default").has_value());
  engine_->Disconnect(c);
  std::vector<std::string> names = engine_->TubeNames();
  EXPECT_EQ(std::count(names.begin(), names.end(), "orders"), 0) << "empty tube kept";
  EXPECT_EQ(std::count(names.begin(), names.end(), "default"), 1);
}

TEST_F(EngineTest, ReservesByPriorityThenId) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  uint64_t a = Put(c, "a", 0, 5);
  uint64_t b = Put(c, "b", 0, 1);
  uint64_t d = Put(c, "d", 0, 5);
  for (uint64_t want : {b, a, d}) {
    engine_->Reserve(c, 0);
    EXPECT_EQ(r.Take(), "reserved " + std::to_string(want) + " " +
                            (want == a   ? "a"
                             : want == b ? "b"
                                         : "d"));
  }
}

TEST_F(EngineTest, DelayedJobBecomesReadyAtDueTimeNotBefore) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  uint64_t id = Put(c, "later", 1500);
  engine_->Reserve(c, -1);
  Advance(1499);
  EXPECT_TRUE(r.events.empty());
  Advance(1);
  EXPECT_EQ(r.Take(), "reserved " + std::to_string(id) + " later");
}

TEST_F(EngineTest, ZeroDelayIsReadyAndADelayEndsAtItsMicrosecondNotTheNextMillisecond) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  clock_.Advance(400);  // the clock now sits 0.4 ms into a millisecond
  uint64_t now_job = Put(c, "now");
  EXPECT_EQ(StatsJob(now_job)->state, JobState::kReady);
  engine_->Reserve(c, 0);
  r.Take();
  uint64_t later = Put(c, "later", 1000);
  engine_->Reserve(c, -1);
  clock_.Advance(999'900);
  engine_->Tick();
  EXPECT_TRUE(r.events.empty()) << "fired 100 us before its delay had passed";
  clock_.Advance(100);  // exactly 1 s after the put, 0.4 ms into a millisecond
  engine_->Tick();
  EXPECT_EQ(r.Take(), "reserved " + std::to_string(later) + " later")
      << "held back to the next millisecond";
  // The store keeps the first whole millisecond at or after the end of the
  // delay, so that a job read back from it is never early.
  EXPECT_EQ(GetJob(later)->record.due_ms, clock_.WallMicros() / 1000 + 1);
}

TEST_F(EngineTest, ClockReadSkewDoesNotDelayAJobDueOnAMillisecondByATick) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  engine_->Watch(c, "t");
  clock_.Advance(500);  // half-way into a millisecond
  // The wall clock is read 3 us after the steady one, as two real reads are;
  // a job due exactly on a millisecond must still fire on that tick.
  clock_.wall_lag_us = 3;
  const int64_t due_ms = clock_.WallMicros() / 1000 + 1000;
  NewJob n;
  n.run_at_ms = due_ms;
  n.body = "x";
  std::vector<NewJob> batch;
  batch.push_back(std::move(n));
  Outcome out;
  engine_->Submit("t", std::move(batch), [&out](auto x) { out = std::move(x); });
  work_.RunUntil([&] { return out.has_value(); });
  ASSERT_TRUE(out->ok());
  engine_->Reserve(c, -1);
  clock_.Advance(due_ms * 1000 - clock_.base.WallMicros());  // the due millisecond begins
  engine_->Tick();
  EXPECT_EQ(r.Take(), "reserved " + std::to_string((*out)->front().id) + " x")
      << "3 us of skew between the two clock reads cost a whole tick";
}

TEST_F(EngineTest, WakeTimeIsTheNextDueJob) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  Put(c, "x", 250);
  // The event loop is asked to wake no later than the due time.
  EXPECT_LE(wake_at_, clock_.SteadyMicros() + 250'000);
  EXPECT_GT(wake_at_, clock_.SteadyMicros());
}

TEST_F(EngineTest, TtrExpiryReturnsJobToReadyAndCountsTimeout) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  uint64_t id = Put(c, "x", 0, 100, 2000);
  engine_->Reserve(c, 0);
  EXPECT_EQ(r.Take(), "reserved " + std::to_string(id) + " x");
  Advance(1999);
  EXPECT_EQ(engine_->Stats().reserved, 1u);
  Advance(1);
  EXPECT_EQ(engine_->Stats().ready, 1u);
  EXPECT_EQ(engine_->Stats().job_timeouts, 1u);
  EXPECT_EQ(StatsJob(id)->counters.timeouts, 1u);
}

TEST_F(EngineTest, BlockedReserveGetsDeadlineSoonOneSecondBeforeTtr) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  Put(c, "x", 0, 100, 5000);
  engine_->Reserve(c, 0);
  r.Take();
  engine_->Reserve(c, -1);
  Advance(3999);
  EXPECT_TRUE(r.events.empty());
  Advance(1);
  EXPECT_EQ(r.Take(), "deadline-soon");
  // Inside the margin, a reserve answers at once.
  engine_->Reserve(c, -1);
  EXPECT_EQ(r.Take(), "deadline-soon");
}

TEST_F(EngineTest, DeadlineSoonFollowsTheSoonestOfManyReservations) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  Put(c, "a", 0, 1, 10'000);
  uint64_t short_ttr = Put(c, "b", 0, 2, 3000);
  Put(c, "c", 0, 3, 20'000);
  for (int i = 0; i < 3; ++i) {
    engine_->Reserve(c, 0);
    r.Take();
  }
  Advance(1500);
  EXPECT_TRUE(Await([&](Engine::Done d) {
                engine_->Touch(c, short_ttr, d);
              }).ok());  // now due 3 s from here: 4.5 s from start
  engine_->Reserve(c, -1);
  Advance(1999);  // 3.499 s from start: the touched job's margin starts at 3.5 s
  EXPECT_TRUE(r.events.empty());
  Advance(1);
  EXPECT_EQ(r.Take(), "deadline-soon");
}

TEST_F(EngineTest, ReserveWithTimeoutTimesOut) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  engine_->Reserve(c, 0);
  EXPECT_EQ(r.Take(), "timed-out");
  engine_->Reserve(c, 3000);
  Advance(2999);
  EXPECT_TRUE(r.events.empty());
  Advance(1);
  EXPECT_EQ(r.Take(), "timed-out");
  EXPECT_EQ(engine_->Stats().waiting, 0u);
}

TEST_F(EngineTest, PausedTubeHoldsJobsUntilPauseEnds) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  uint64_t id = Put(c, "x");
  ASSERT_TRUE(Await([&](Engine::Done d) { engine_->PauseTube("default", 2000, d); }).ok());
  engine_->Reserve(c, -1);
  Advance(1999);
  EXPECT_TRUE(r.events.empty());
  EXPECT_EQ(engine_->StatsTube("default")->pause_s, 2);
  Advance(1);
  EXPECT_EQ(r.Take(), "reserved " + std::to_string(id) + " x");
  EXPECT_EQ(engine_->StatsTube("default")->pause_s, 0);
}

TEST_F(EngineTest, KickTakesBuriedFirstThenDelayedInDueOrder) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  uint64_t buried = Put(c, "b");
  engine_->Reserve(c, 0);
  r.Take();
  ASSERT_TRUE(Await([&](Engine::Done d) { engine_->Bury(c, buried, 7, d); }).ok());
  uint64_t late = Put(c, "late", 50'000);
  uint64_t soon = Put(c, "soon", 20'000);
  std::optional<Result<uint64_t>> kicked;
  engine_->Kick(c, 10, [&](Result<uint64_t> n) { kicked = n; });
  RunUntil([&] { return kicked.has_value(); });
  EXPECT_EQ(kicked->value(), 1u);  // only the buried one
  kicked.reset();
  engine_->Kick(c, 1, [&](Result<uint64_t> n) { kicked = n; });
  RunUntil([&] { return kicked.has_value(); });
  EXPECT_EQ(kicked->value(), 1u);
  EXPECT_EQ(StatsJob(soon)->state, JobState::kReady);
  EXPECT_EQ(StatsJob(late)->state, JobState::kDelayed);
}

TEST_F(EngineTest, FarJobsStayInTheStoreUntilTheirMinuteIsLoaded) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  uint64_t id = Put(c, "far", 10 * 60'000);
  EXPECT_EQ(engine_->jobs_in_memory(), 0u) << "a job due in 10 min should live only in the store";
  EXPECT_EQ(engine_->Stats().delayed, 1u);
  EXPECT_EQ(*Peek(id)->body, "far");
  EXPECT_EQ(StatsJob(id)->state, JobState::kDelayed);
  EXPECT_EQ(*PeekDelayed(c)->body, "far");
  engine_->Reserve(c, -1);
  for (int s = 0; s < 10 * 60 - 1; ++s) Advance(1000);
  EXPECT_EQ(engine_->jobs_in_memory(), 1u) << "loaded ahead of its due time";
  EXPECT_TRUE(r.events.empty());
  Advance(1000);
  EXPECT_EQ(r.Take(), "reserved " + std::to_string(id) + " far");
}

TEST_F(EngineTest, FarJobsCanBeDeletedAndKicked) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  uint64_t gone = Put(c, "gone", 3'600'000);
  uint64_t kicked = Put(c, "kicked", 7'200'000);
  ASSERT_TRUE(Await([&](Engine::Done d) { engine_->Delete(c, gone, d); }).ok());
  EXPECT_EQ(Peek(gone).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(Await([&](Engine::Done d) { engine_->KickJob(kicked, d); }).ok());
  EXPECT_EQ(StatsJob(kicked)->state, JobState::kReady);
  EXPECT_EQ(engine_->Stats().delayed, 0u);
  Stop();
  Start();
  EXPECT_EQ(Peek(gone).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(StatsJob(kicked)->state, JobState::kReady);
}

// On PostgreSQL a read aside is answered later, from another thread: a job
// that leaves memory meanwhile must not come back from the rows read before
// it left. Here the loader reads a minute while a delete of one of its jobs
// is under way, and the delete is durable before the loader's rows arrive.
TEST_F(EngineTest, AJobDeletedWhileItsMinuteIsBeingLoadedStaysDeleted) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  const uint64_t gone = Put(c, "gone", 10 * 60'000);
  const uint64_t stays = Put(c, "stays", 10 * 60'000);
  const int64_t minute = store::DueMinute(store_->Get(gone).value()->due_ms);
  for (int s = 0; s < 10 * 60 && flaky_->last_load_minute() < minute - 1; ++s) Advance(1000);
  ASSERT_EQ(flaky_->last_load_minute(), minute - 1);
  EXPECT_EQ(engine_->jobs_in_memory(), 0u);
  flaky_->defer_reads = true;
  std::optional<Status> deleted;
  engine_->Delete(c, gone, [&](const Status& s) { deleted = s; });  // reads the job aside
  for (int s = 0; s < 120 && flaky_->last_load_minute() < minute; ++s) Advance(1000);
  ASSERT_EQ(flaky_->last_load_minute(), minute) << "the loader never read the jobs' minute";
  ASSERT_EQ(flaky_->reads_deferred(), 2u);
  Advance(1000);
  EXPECT_EQ(flaky_->reads_deferred(), 2u) << "a second load while one is in flight";
  flaky_->DeliverOneRead();  // the delete's: it cancels the job...
  RunUntil([&] { return deleted.has_value(); });
  ASSERT_TRUE(deleted->ok()) << deleted->ToString();
  EXPECT_EQ(engine_->jobs_in_memory(), 0u) << "...and the job left memory";
  flaky_->DeliverReads();  // the loader's, read while the job was there
  flaky_->defer_reads = false;
  EXPECT_EQ(Peek(gone).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*Peek(stays)->body, "stays");
  EXPECT_EQ(engine_->jobs_in_memory(), 1u);
  EXPECT_EQ(engine_->Stats().delayed, 1u);
  engine_->Reserve(c, -1);
  for (int s = 0; s < 3 * 60 && r.events.empty(); ++s) Advance(1000);
  EXPECT_EQ(r.Take(), "reserved " + std::to_string(stays) + " stays");
}

// The same for every read aside: a job read while it is being deleted is
// read again when its row arrives after the delete, and is not found.
TEST_F(EngineTest, AReadOfAJobThatLeftMemoryMeanwhileIsMadeAgain) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  const uint64_t id = Put(c, "far", 10 * 60'000);
  EXPECT_EQ(engine_->jobs_in_memory(), 0u);
  flaky_->defer_reads = true;
  std::optional<Status> deleted;
  engine_->Delete(c, id, [&](const Status& s) { deleted = s; });
  std::optional<Result<JobInfo>> got;
  std::optional<Result<JobStats>> stats;
  engine_->GetJob(id, [&](Result<JobInfo> j) { got.emplace(std::move(j)); });
  engine_->StatsJob(id, [&](Result<JobStats> s) { stats.emplace(std::move(s)); });
  ASSERT_EQ(flaky_->reads_deferred(), 3u);  // each read the job as delayed
  flaky_->DeliverOneRead();
  RunUntil([&] { return deleted.has_value(); });
  ASSERT_TRUE(deleted->ok());
  flaky_->defer_reads = false;
  flaky_->DeliverReads();
  RunUntil([&] { return got.has_value() && stats.has_value(); });
  EXPECT_EQ(got->status().code(), StatusCode::kNotFound);
  EXPECT_EQ(stats->status().code(), StatusCode::kNotFound);
}

// The store unreachable when a minute is due to load: the loader tries
// again a second later, and the job arrives once the store answers.
TEST_F(EngineTest, AFailedLoadIsRetriedAndItsJobsStillArrive) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  const uint64_t id = Put(c, "late", 10 * 60'000);
  engine_->Reserve(c, -1);
  flaky_->reads_failing = true;
  for (int s = 0; s < 11 * 60; ++s) Advance(1000);
  EXPECT_TRUE(r.events.empty()) << "delivered although its minute could not be read";
  EXPECT_EQ(engine_->jobs_in_memory(), 0u);
  flaky_->reads_failing = false;
  Advance(1000);
  EXPECT_EQ(r.Take(), "reserved " + std::to_string(id) + " late");
}

// The due forecast of whole hours is counted in memory, as jobs are put,
// fire, are deleted, kicked, moved, and go to the store and come back from
// it: it must agree with the store's own count of its delayed rows, before
// and after a restart.
TEST_F(EngineTest, TheHourForecastCountedInMemoryAgreesWithTheStore) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  constexpr int64_t kMin = 60'000;
  std::vector<uint64_t> ids;
  for (const char* tube : {"a", "b"}) {
    engine_->Use(c, tube);
    for (int64_t delay : {0L, 20'000L, 50'000L, 3 * kMin, 59 * kMin, 61 * kMin, 5 * 60 * kMin,
                          30 * 60 * kMin, 47 * 60 * kMin, 3 * 24 * 60 * kMin}) {
      ids.push_back(Put(c, tube, delay));
    }
  }
  auto memory = [&](std::optional<std::string> topic) {
    auto f = work_.Answer<Forecast>(
        [&](auto done) { engine_->DueForecast(60, 48, std::move(topic), done); });
    EXPECT_TRUE(f.ok());
    return f.ok() ? f->counts : std::vector<uint64_t>{};
  };
  auto stored = [&](std::optional<std::string> topic) {
    RunPosted();  // every write answered
    const int64_t now = clock_.WallMillis();
    auto n = store_->DueCounts(now, store::DueHour(now) * 60, 60, 48, topic);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    return n.ok() ? *n : std::vector<uint64_t>{};
  };
  auto agree = [&](const char* when) {
    for (std::optional<std::string> topic :
         {std::optional<std::string>(), std::optional<std::string>("a"),
          std::optional<std::string>("b")}) {
      std::vector<uint64_t> want = stored(topic);
      EXPECT_EQ(memory(topic), want) << when << ", topic " << topic.value_or("(all)");
    }
  };
  auto total = [](const std::vector<uint64_t>& v) {
    return std::accumulate(v.begin(), v.end(), uint64_t{0});
  };
  ASSERT_TRUE(engine_->ForecastInMemory(60));
  agree("after the puts");
  EXPECT_EQ(total(memory(std::nullopt)), 16u) << "8 delayed jobs a tube within 48 hours";
  EXPECT_EQ(total(memory("nowhere")), 0u);
  // A near and a far job deleted, a far one kicked, one moved from near to
  // far and one from far to near.
  ASSERT_TRUE(Await([&](Engine::Done d) { engine_->Delete(c, ids[2], d); }).ok());
  ASSERT_TRUE(Await([&](Engine::Done d) { engine_->Delete(c, ids[6], d); }).ok());
  ASSERT_TRUE(Await([&](Engine::Done d) { engine_->KickJob(ids[17], d); }).ok());
  JobPatch later;
  later.due_ms = clock_.WallMillis() + 10 * 60 * kMin;
  ASSERT_TRUE(Await([&](Engine::Done d) { engine_->Modify(ids[11], later, d); }).ok());
  JobPatch sooner;
  sooner.due_ms = clock_.WallMillis() + 40'000;
  ASSERT_TRUE(Await([&](Engine::Done d) { engine_->Modify(ids[16], sooner, d); }).ok());
  agree("after the changes");
  // Time passes: near jobs fire, the loader brings minutes into memory.
  for (int s = 0; s < 5 * 60; ++s) Advance(1000);
  agree("five minutes later");
  Stop();
  Start();
  agree("after a restart");
  for (int s = 0; s < 60 * 60; s += 10) Advance(10'000);
  agree("an hour after the restart");
}

TEST_F(EngineTest, RecoveryRestoresStatesAndKeepsIdsRising) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  uint64_t reserved = Put(c, "r");
  uint64_t buried = Put(c, "b");
  uint64_t delayed = Put(c, "d", 30'000);
  engine_->Reserve(c, 0);
  EXPECT_EQ(r.Take(), "reserved " + std::to_string(reserved) + " r");
  engine_->Reserve(c, 0);
  r.Take();
  ASSERT_TRUE(Await([&](Engine::Done d) { engine_->Bury(c, buried, 3, d); }).ok());
  uint64_t deleted = Put(c, "x");
  ASSERT_TRUE(Await([&](Engine::Done d) { engine_->Delete(c, deleted, d); }).ok());
  clock_.AdvanceMillis(10'000);
  Stop();
  Start();
  Client* c2 = engine_->Connect(&r);
  EXPECT_EQ(StatsJob(reserved)->state, JobState::kReady);
  EXPECT_EQ(StatsJob(buried)->state, JobState::kBuried);
  EXPECT_EQ(StatsJob(buried)->priority, 3u);
  auto d = StatsJob(delayed);
  EXPECT_EQ(d->state, JobState::kDelayed);
  EXPECT_EQ(d->time_left_s, 20) << "the delay continues toward its absolute due time";
  EXPECT_EQ(Peek(deleted).status().code(), StatusCode::kNotFound);
  EXPECT_GT(Put(c2, "new"), deleted);
}

TEST_F(EngineTest, WallClockStepNeitherFiresEarlyNorStalls) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  uint64_t id = Put(c, "x", 5000);
  engine_->Reserve(c, -1);
  clock_.StepWall(3'600'000'000);  // the wall clock jumps an hour ahead
  engine_->Tick();
  EXPECT_TRUE(r.events.empty());
  clock_.StepWall(-7'200'000'000);  // and two hours back
  Advance(4999);
  EXPECT_TRUE(r.events.empty());
  Advance(1);
  EXPECT_EQ(r.Take(), "reserved " + std::to_string(id) + " x");
}

TEST_F(EngineTest, DisconnectReturnsReservedJobsToOthers) {
  Recorder r1, r2;
  Client* a = engine_->Connect(&r1);
  Client* b = engine_->Connect(&r2);
  uint64_t id = Put(a, "x");
  engine_->Reserve(a, 0);
  r1.Take();
  engine_->Reserve(b, -1);
  EXPECT_TRUE(r2.events.empty());
  engine_->Disconnect(a);
  EXPECT_EQ(r2.Take(), "reserved " + std::to_string(id) + " x");
}

TEST_F(EngineTest, OnlyTheReserverMaySettleAReservedJob) {
  Recorder r1, r2;
  Client* a = engine_->Connect(&r1);
  Client* b = engine_->Connect(&r2);
  uint64_t id = Put(a, "x");
  engine_->Reserve(a, 0);
  r1.Take();
  EXPECT_EQ(Await([&](Engine::Done d) { engine_->Delete(b, id, d); }).code(),
            StatusCode::kConflict);
  EXPECT_EQ(Await([&](Engine::Done d) { engine_->Release(b, id, 1, 0, d); }).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(Await([&](Engine::Done d) { engine_->Touch(b, id, d); }).code(), StatusCode::kNotFound);
  EXPECT_TRUE(Await([&](Engine::Done d) { engine_->Touch(a, id, d); }).ok());
  EXPECT_TRUE(Await([&](Engine::Done d) { engine_->Delete(a, id, d); }).ok());
}

TEST_F(EngineTest, TubesVanishWhenUnreferencedExceptDefault) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  engine_->Use(c, "a");
  engine_->Watch(c, "b");
  EXPECT_EQ(engine_->TubeNames(), (std::vector<std::string>{"default", "a", "b"}));
  engine_->Use(c, "default");
  EXPECT_EQ(engine_->TubeNames(), (std::vector<std::string>{"default", "b"}));
  EXPECT_EQ(engine_->Ignore(c, "default"), 1u);
  EXPECT_EQ(engine_->Ignore(c, "b"), std::nullopt) << "the last watched tube cannot be ignored";
  EXPECT_EQ(engine_->TubeNames(), (std::vector<std::string>{"default", "b"}));
}

TEST_F(EngineTest, AFailedStoreWriteIsReportedAndAFailedPutNeverAppears) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  uint64_t kept = Put(c, "kept");
  flaky_->failing = true;
  std::optional<Result<uint64_t>> put;
  engine_->Put(c, 1, 0, 1000, "lost", [&](Result<uint64_t> x) { put = x; });
  RunUntil([&] { return put.has_value(); });
  EXPECT_EQ(put->status().code(), StatusCode::kIoError);
  EXPECT_EQ(engine_->Stats().ready, 1u) << "the failed put must not become visible";
  EXPECT_EQ(engine_->Stats().total_jobs, 1u);
  EXPECT_EQ(Await([&](Engine::Done d) { engine_->PauseTube("default", 5000, d); }).code(),
            StatusCode::kIoError);
  EXPECT_EQ(engine_->StatsTube("default")->pause_s, 0) << "a failed pause must not pause";
  flaky_->failing = false;
  EXPECT_GT(Put(c, "after"), kept) << "writes work again once the store does";
  engine_->Reserve(c, 0);
  EXPECT_EQ(r.Take(), "reserved " + std::to_string(kept) + " kept");
}

// What a client can read of a job, but for the two counters memory keeps
// ahead of the store (reserves and timeouts are stored with the next write).
std::string Fingerprint(Engine& e, uint64_t id) {
  std::optional<Result<JobInfo>> got;  // SQLite reads aside at once
  e.GetJob(id, [&](Result<JobInfo> r) { got.emplace(std::move(r)); });
  if (!got) return "not answered at once";
  const Result<JobInfo>& info = *got;
  if (!info.ok()) return info.status().ToString();
  const store::JobRecord& r = info->record;
  std::ostringstream out;
  out << StateName(info->state) << " pri=" << r.priority << " due=" << r.due_ms
      << " delay=" << r.delay_ms << " ttr=" << r.ttr_ms << " run_at=" << r.run_at_ms
      << " body=" << r.body << " key=" << r.key << " spec=" << r.spec << " log=" << r.attempt_log
      << " error=" << r.last_error << " releases=" << r.counters.releases
      << " buries=" << r.counters.buries << " kicks=" << r.counters.kicks;
  return out.str();
}

std::string WithState(std::string fingerprint, const std::string& state) {
  return state + fingerprint.substr(fingerprint.find(' '));
}

// Review item 3: a change whose write fails leaves the job as the store has
// it, in memory as after a restart, and the client is told. One case per
// kind of job change; each starts from an empty store.
TEST_F(EngineTest, AFailedWriteOfEveryKindOfChangeLeavesTheJobAsTheStoreHasIt) {
  Recorder r;
  Client* c = nullptr;
  auto put = [&](int64_t delay_ms) { return Put(c, "body-" + std::to_string(delay_ms), delay_ms); };
  auto reserved = [&] {
    const uint64_t id = put(0);
    engine_->Reserve(c, 0);
    EXPECT_EQ(r.Take(), "reserved " + std::to_string(id) + " body-0");
    return id;
  };
  auto buried = [&] {
    const uint64_t id = reserved();
    EXPECT_TRUE(Await([&](Engine::Done d) { engine_->Bury(c, id, 50, d); }).ok());
    return id;
  };
  auto submit = [&](NewJob n) {
    std::vector<NewJob> batch;
    batch.push_back(std::move(n));
    std::optional<Result<std::vector<Submitted>>> out;
    engine_->Submit("t", std::move(batch), [&](auto x) { out = std::move(x); });
    RunUntil([&] { return out.has_value(); });
    EXPECT_TRUE(out->ok());
    return out->ok() ? out->value()[0].id : 0;
  };
  auto keyed = [&] {
    NewJob n;
    n.key = "order-8812";
    n.delay_ms = 60'000;
    return submit(std::move(n));
  };
  auto http_held = [&] {
    NewJob n;
    n.body = "pulled";
    const uint64_t id = submit(std::move(n));
    Client* puller = engine_->Connect(&r);
    engine_->Watch(puller, "t");
    engine_->Ignore(puller, "default");
    engine_->Reserve(puller, 0);
    EXPECT_EQ(r.Take(), "reserved " + std::to_string(id) + " pulled");
    EXPECT_TRUE(engine_->AdoptReservation(puller, id).ok());
    return id;
  };
  std::optional<PushLease> lease;
  auto pushing = [&] {
    NewJob n;
    n.body = "pushed";
    n.spec.target.emplace().url = "http://127.0.0.1:9/hook";
    const uint64_t id = submit(std::move(n));
    lease = engine_->TakePush("t");
    EXPECT_TRUE(lease.has_value());
    return id;
  };
  auto push_done = [&](AttemptOutcome outcome) {
    return [&, outcome](uint64_t id) {
      Attempt a;
      a.number = lease->attempt;
      a.outcome = outcome;
      a.http_status = 500;
      return Await([&](Engine::Done d) { engine_->PushDone(id, a, 2000, d); });
    };
  };
  auto kick = [&](uint64_t) {
    std::optional<Result<uint64_t>> out;
    engine_->Kick(c, 10, [&](Result<uint64_t> x) { out = x; });
    RunUntil([&] { return out.has_value(); });
    return out->status();
  };

  struct Case {
    std::string name;
    std::function<uint64_t()> setup;
    std::function<Status(uint64_t)> change;
    // The job's state afterwards: as before the change, except that a
    // reservation ended by the change is gone (the store has the job ready).
    std::string state_after;
  };
  const std::vector<Case> cases = {
      {"delete of a held job (finish)", reserved,
       [&](uint64_t id) { return Await([&](Engine::Done d) { engine_->Delete(c, id, d); }); },
       "ready"},
      {"delete of a ready job (cancel)", [&] { return put(0); },
       [&](uint64_t id) { return Await([&](Engine::Done d) { engine_->Delete(c, id, d); }); },
       "ready"},
      {"delete of a delayed job", [&] { return put(5000); },
       [&](uint64_t id) { return Await([&](Engine::Done d) { engine_->Delete(c, id, d); }); },
       "delayed"},
      {"release with a delay", reserved,
       [&](uint64_t id) {
         return Await([&](Engine::Done d) { engine_->Release(c, id, 7, 3000, d); });
       },
       "ready"},
      {"release now", reserved,
       [&](uint64_t id) {
         return Await([&](Engine::Done d) { engine_->Release(c, id, 7, 0, d); });
       },
       "ready"},
      {"bury", reserved,
       [&](uint64_t id) { return Await([&](Engine::Done d) { engine_->Bury(c, id, 9, d); }); },
       "ready"},
      {"kick of buried jobs", buried, kick, "buried"},
      {"kick of delayed jobs", [&] { return put(5000); }, kick, "delayed"},
      {"kick-job of a delayed job", [&] { return put(5000); },
       [&](uint64_t id) { return Await([&](Engine::Done d) { engine_->KickJob(id, d); }); },
       "delayed"},
      {"edit (priority, body, due time)", keyed,
       [&](uint64_t id) {
         JobPatch p;
         p.priority = 5;
         p.due_ms = clock_.WallMillis() + 9000;
         p.body = "changed";
         return Await([&](Engine::Done d) { engine_->Modify(id, p, d); });
       },
       "delayed"},
      {"cancel of a keyed job", keyed,
       [&](uint64_t id) { return Await([&](Engine::Done d) { engine_->Remove(id, d); }); },
       "delayed"},
      {"run now", keyed,
       [&](uint64_t id) { return Await([&](Engine::Done d) { engine_->RunNow(id, d); }); },
       "delayed"},
      {"retry of a dead letter", buried,
       [&](uint64_t id) { return Await([&](Engine::Done d) { engine_->Retry(id, d); }); },
       "buried"},
      {"HTTP finish", http_held,
       [&](uint64_t id) {
         return Await(
             [&](Engine::Done d) { engine_->SettleHttp(id, 0, Engine::Settle::kFinish, 0, 0, d); });
       },
       "ready"},
      {"HTTP release", http_held,
       [&](uint64_t id) {
         return Await([&](Engine::Done d) {
           engine_->SettleHttp(id, 0, Engine::Settle::kRelease, 3, 4000, d);
         });
       },
       "ready"},
      {"push delivered", pushing, push_done(AttemptOutcome::kOk), "ready"},
      {"push failed, retried later", pushing, push_done(AttemptOutcome::kRetry), "ready"},
      {"push failed, dead letter", pushing, push_done(AttemptOutcome::kDead), "ready"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    Stop();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    Start();
    c = engine_->Connect(&r);
    const uint64_t id = k.setup();
    ASSERT_NE(id, 0u);
    const std::string before = Fingerprint(*engine_, id);
    flaky_->failing = true;
    const Status s = k.change(id);
    flaky_->failing = false;
    EXPECT_EQ(s.code(), StatusCode::kIoError) << "the client is told";
    const std::string after = Fingerprint(*engine_, id);
    EXPECT_EQ(after, WithState(before, k.state_after)) << "memory is as the store has it";
    // Nothing else moved: the job is where its state says, once.
    const EngineStats st = engine_->Stats();
    EXPECT_EQ(st.ready + st.delayed + st.buried + st.reserved, 1u);
    engine_->Disconnect(c);
    Stop();
    Start();
    EXPECT_EQ(Fingerprint(*engine_, id), after) << "a restart shows what memory showed";
  }
}

// Changes queued behind a failed one carry the whole job, so the store ends
// as the last of them left it, and memory follows the store.
TEST_F(EngineTest, AChangeQueuedBehindAFailedOneDecidesTheJob) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  const uint64_t id = Put(c, "x");
  engine_->Reserve(c, 0);
  ASSERT_EQ(r.Take(), "reserved " + std::to_string(id) + " x");
  flaky_->failing = true;
  std::optional<Status> released;
  engine_->Release(c, id, 7, 0, [&](const Status& s) { released = s; });
  flaky_->failing = false;
  engine_->Reserve(c, 0);  // the release is in memory already
  ASSERT_EQ(r.Take(), "reserved " + std::to_string(id) + " x");
  EXPECT_TRUE(Await([&](Engine::Done d) { engine_->Delete(c, id, d); }).ok());
  ASSERT_TRUE(released.has_value());
  EXPECT_EQ(released->code(), StatusCode::kIoError);
  EXPECT_EQ(GetJob(id).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(engine_->Stats().ready, 0u);
  Stop();
  Start();
  EXPECT_EQ(GetJob(id).status().code(), StatusCode::kNotFound);
}

TEST_F(EngineTest, ListenersHearOfReadyReservedAndEndedJobsOnceTheStoreHasThem) {
  std::vector<std::string> heard;
  const size_t sub = engine_->Subscribe([&](const JobEvent& e) {
    const char* kind = e.kind == JobEventKind::kReady      ? "ready"
                       : e.kind == JobEventKind::kReserved ? "reserved"
                                                           : "ended";
    heard.push_back(std::string(kind) + " " + std::to_string(e.job_id) + " " +
                    std::string(e.topic));
  });
  Recorder r;
  Client* c = engine_->Connect(&r);
  const uint64_t a = Put(c, "a");
  const uint64_t b = Put(c, "b", 0, 200);
  EXPECT_EQ(heard, (std::vector<std::string>{"ready " + std::to_string(a) + " default",
                                             "ready " + std::to_string(b) + " default"}));
  heard.clear();
  engine_->Reserve(c, 0);
  ASSERT_EQ(r.Take(), "reserved " + std::to_string(a) + " a");
  EXPECT_EQ(heard, (std::vector<std::string>{"reserved " + std::to_string(a) + " default"}));
  heard.clear();
  // An end is heard once the store has it; a failed one never, and the job
  // the failure brought back is ready again.
  flaky_->failing = true;
  EXPECT_FALSE(Await([&](Engine::Done d) { engine_->Delete(c, b, d); }).ok());
  flaky_->failing = false;
  EXPECT_EQ(heard, (std::vector<std::string>{"ready " + std::to_string(b) + " default"}));
  heard.clear();
  std::optional<Status> deleted;
  engine_->Delete(c, a, [&](const Status& s) { deleted = s; });
  EXPECT_EQ(heard, std::vector<std::string>{}) << "not before the store has it";
  RunUntil([&] { return deleted.has_value(); });
  EXPECT_EQ(heard, (std::vector<std::string>{"ended " + std::to_string(a) + " default"}));
  engine_->Unsubscribe(sub);
  Put(c, "c");
  EXPECT_EQ(heard.size(), 1u) << "nothing after Unsubscribe";
}

TEST_F(EngineTest, DrainingRefusesPuts) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  engine_->SetDraining(true);
  std::optional<Result<uint64_t>> out;
  engine_->Put(c, 1, 0, 1000, "x", [&](Result<uint64_t> x) { out = x; });
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->status().code(), StatusCode::kUnavailable);
}

TEST_F(EngineTest, AttemptLogKeepsTheLatestAttemptsAndTheLastError) {
  Stop();
  Start({.attempt_log_size = 3});
  NewJob n;
  n.spec.target.emplace().url = "http://127.0.0.1:9/hook";
  std::vector<NewJob> batch;
  batch.push_back(std::move(n));
  std::optional<Result<std::vector<Submitted>>> submitted;
  engine_->Submit("push", std::move(batch), [&](auto r) { submitted = std::move(r); });
  RunUntil([&] { return submitted.has_value(); });
  ASSERT_TRUE(submitted->ok());
  const uint64_t id = submitted->value()[0].id;
  for (int i = 1; i <= 5; ++i) {
    std::optional<PushLease> lease = engine_->TakePush("push");
    ASSERT_TRUE(lease.has_value()) << "attempt " << i;
    ASSERT_EQ(lease->attempt, static_cast<uint32_t>(i));
    const bool last = i == 5;
    Attempt a{.number = lease->attempt,
              .started_ms = 1000 * i,
              .duration_ms = 7,
              .outcome = last ? AttemptOutcome::kOk : AttemptOutcome::kRetry,
              .http_status = 503,
              .error = "HTTP 503: \"busy\" #" + std::to_string(i)};
    EXPECT_TRUE(Await([&](Engine::Done d) { engine_->PushDone(id, a, 0, std::move(d)); }).ok());
  }
  Result<JobInfo> info = GetJob(id);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state, JobState::kDone);
  EXPECT_EQ(info->record.last_error, "HTTP 503: \"busy\" #5");
  nlohmann::json log = nlohmann::json::parse(info->record.attempt_log);
  ASSERT_EQ(log.size(), 3u) << log.dump();
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(log[k]["attempt"], 3 + k);
    EXPECT_EQ(log[k]["started_ms"], 1000 * (3 + k));
    EXPECT_EQ(log[k]["http_status"], 503);
  }
  // It survives a restart as stored.
  Stop();
  Start();
  info = GetJob(id);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(nlohmann::json::parse(info->record.attempt_log), log);
}

TEST_F(EngineTest, AKeyIsFreeAsSoonAsItsJobIsCancelledNotOnlyWhenDurable) {
  auto submit = [&](Outcome& out) { SubmitKeyed("order-1", out); };
  Outcome first;
  submit(first);
  RunUntil([&] { return first.has_value(); });
  ASSERT_TRUE(first->ok());
  const uint64_t old_id = first->value()[0].id;
  // Cancel, and before the delete is durable, submit the same key again.
  std::optional<Status> removed;
  engine_->Remove(old_id, [&](const Status& s) { removed = s; });
  Outcome again;
  submit(again);
  RunUntil([&] { return removed.has_value() && again.has_value(); });
  ASSERT_TRUE(removed->ok());
  ASSERT_TRUE(again->ok()) << again->status().ToString();
  EXPECT_FALSE(again->value()[0].duplicate);
  EXPECT_NE(again->value()[0].id, old_id);
  Result<JobInfo> by_key = GetByKey("t", "order-1");
  ASSERT_TRUE(by_key.ok());
  EXPECT_EQ(by_key->record.id, again->value()[0].id);
}

// Keys are looked up aside, one keyed submission at a time: a second
// submission of a key sees the first's job whether the first is still
// being written or was committed after the second's read was made.
TEST_F(EngineTest, KeyedSubmissionsSeeEachOtherWhileTheirLookupsAreInFlight) {
  auto submit = [&](Outcome& out) { SubmitKeyed("order-7", out); };
  flaky_->defer_reads = true;
  Outcome first, second, third;
  submit(first);
  submit(second);
  EXPECT_EQ(flaky_->reads_deferred(), 1u) << "the second lookup waits for the first";
  flaky_->DeliverReads();  // the first creates its job; the second's read is made now
  ASSERT_EQ(flaky_->reads_deferred(), 1u);
  RunUntil([&] { return first.has_value(); });  // committed before the second's answer
  ASSERT_TRUE(first->ok()) << first->status().ToString();
  const uint64_t id = first->value()[0].id;
  flaky_->DeliverReads();
  RunUntil([&] { return second.has_value(); });
  ASSERT_TRUE(second->ok()) << second->status().ToString();
  EXPECT_TRUE(second->value()[0].duplicate);
  EXPECT_EQ(second->value()[0].id, id);
  flaky_->defer_reads = false;
  submit(third);  // and from the store, once nothing is in flight
  RunUntil([&] { return third.has_value(); });
  ASSERT_TRUE(third->ok());
  EXPECT_TRUE(third->value()[0].duplicate);
  EXPECT_EQ(third->value()[0].id, id);
}

// A second submission of a key whose job is still being committed is
// answered once that commit is: with the kept job, which can be read, or,
// the commit having failed, with a job of its own.
TEST_F(EngineTest, ADuplicateOfAKeyBeingCommittedIsAnsweredWithAJobThatIsKept) {
  Outcome first, second;
  SubmitKeyed("order-9", first);
  SubmitKeyed("order-9", second);  // the first's insert is in flight
  EXPECT_FALSE(second.has_value());
  RunUntil([&] { return first.has_value() && second.has_value(); });
  ASSERT_TRUE(first->ok());
  ASSERT_TRUE(second->ok()) << second->status().ToString();
  EXPECT_TRUE(second->value()[0].duplicate);
  EXPECT_EQ(second->value()[0].id, first->value()[0].id);
  EXPECT_TRUE(GetJob(second->value()[0].id).ok());

  flaky_->failing = true;  // the next insert fails, as on a full disk
  Outcome third, fourth;
  SubmitKeyed("order-10", third);
  SubmitKeyed("order-10", fourth);
  flaky_->failing = false;
  RunUntil([&] { return third.has_value() && fourth.has_value(); });
  EXPECT_FALSE(third->ok());
  ASSERT_TRUE(fourth->ok()) << fourth->status().ToString();
  EXPECT_FALSE(fourth->value()[0].duplicate) << "the key's first job was never kept";
  EXPECT_TRUE(GetJob(fourth->value()[0].id).ok());
}

// A key kept pending for a lookup in flight is let go once that lookup is
// answered, even while more keyed submissions keep the queue busy: after
// its job is cancelled, the key is free again.
TEST_F(EngineTest, AKeyKeptPendingForALookupIsFreedOnceThatLookupIsAnswered) {
  flaky_->defer_reads = true;
  Outcome a, b, c, d;
  SubmitKeyed("k", a);
  flaky_->DeliverReads();  // a's lookup: its job is created
  SubmitKeyed("k2", b);    // b's lookup is in flight when a's job commits
  RunUntil([&] { return a.has_value(); });
  ASSERT_TRUE(a->ok());
  const uint64_t a_id = a->value()[0].id;
  SubmitKeyed("k3", c);
  flaky_->DeliverReads();  // b's answer; c's lookup goes out
  std::optional<Status> removed;
  engine_->Remove(a_id, [&](const Status& s) { removed = s; });
  RunUntil([&] { return removed.has_value() && b.has_value(); });
  ASSERT_TRUE(removed->ok());
  SubmitKeyed("k", d);  // queued behind c
  flaky_->defer_reads = false;
  flaky_->DeliverReads();
  RunUntil([&] { return c.has_value() && d.has_value(); });
  ASSERT_TRUE(d->ok()) << d->status().ToString();
  EXPECT_FALSE(d->value()[0].duplicate) << "a cancelled job's key was still pending";
  EXPECT_NE(d->value()[0].id, a_id);
}

// A client that hangs up while its reserve-job or delete of a job beyond
// the horizon is being read is answered kUnavailable, and the job stays as
// it was, delayed, and fires at its time.
TEST_F(EngineTest, AClientThatHangsUpWhileItsJobIsReadTakesNothing) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  const uint64_t id = Put(c, "far", 10 * 60'000);
  flaky_->defer_reads = true;
  std::optional<Result<JobView>> reserved;
  std::optional<Status> deleted;
  engine_->ReserveJob(c, id, [&](Result<JobView> v) { reserved.emplace(std::move(v)); });
  engine_->Delete(c, id, [&](const Status& s) { deleted = s; });
  engine_->Disconnect(c);
  flaky_->defer_reads = false;
  flaky_->DeliverReads();
  ASSERT_TRUE(reserved.has_value() && deleted.has_value());
  EXPECT_EQ(reserved->status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(deleted->code(), StatusCode::kUnavailable);
  EXPECT_EQ(StatsJob(id)->state, JobState::kDelayed);
  Client* other = engine_->Connect(&r);
  engine_->Reserve(other, -1);
  for (int s = 0; s < 11 * 60 && r.events.empty(); ++s) Advance(1000);
  EXPECT_EQ(r.Take(), "reserved " + std::to_string(id) + " far");
}

// The engine over a store that keeps what a disk would: a crash or power cut
// here loses exactly the writes a real one would, so each change's
// durability (store::Durability) is checked, not assumed.
class EngineDurabilityTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(); }
  void Start() {
    engine_ = std::make_unique<Engine>(store_, clock_, EngineOptions{}, [](int64_t) {});
    engine_->SetMetrics(&metrics_);
    ASSERT_TRUE(engine_->Recover().ok());
    c_ = engine_->Connect(&r_);
  }
  // The process dies (kill -9, or the power with it): memory is gone, and
  // the store keeps what survives.
  void Restart(bool power_cut) {
    power_cut ? store_.PowerCut() : store_.Crash();
    engine_.reset();
    r_.events.clear();
    Start();
  }
  uint64_t Put(const std::string& body) {
    std::optional<Result<uint64_t>> out;
    engine_->Put(c_, 10, 0, 60'000, body, [&](Result<uint64_t> x) { out = x; });
    work_.RunUntil([&] { return out.has_value(); });
    return out->ok() ? out->value() : 0;
  }
  uint64_t Reserve() {
    engine_->Reserve(c_, 0);
    const std::string e = r_.Take();
    return e.rfind("reserved ", 0) == 0 ? std::stoull(e.substr(9)) : 0;
  }
  Status Await(std::function<void(Engine::Done)> op) {
    std::optional<Status> out;
    op([&](const Status& s) { out = s; });
    work_.RunUntil([&] { return out.has_value(); });
    return *out;
  }
  Result<JobInfo> GetJob(uint64_t id) {
    return work_.Answer<JobInfo>([&](auto done) { engine_->GetJob(id, done); });
  }
  std::string StateOf(uint64_t id) {
    Result<JobInfo> info = GetJob(id);
    return info.ok() ? std::string(StateName(info->state)) : "gone";
  }

  store::testing::PostedWork work_;
  store::testing::MemoryStore store_{work_.executor()};
  TestClock clock_;
  Recorder r_;
  Metrics metrics_;
  std::unique_ptr<Engine> engine_;
  Client* c_ = nullptr;
};

// Recovery places a stored record as the loader and a resync do
// (Engine::Place): a delayed job that came due while the process was down
// is ready at once, and counts as fired, as late as it is.
TEST_F(EngineDurabilityTest, AJobDueWhileTheProcessWasDownFiresAtRecoveryAndIsCounted) {
  std::optional<Result<uint64_t>> put;
  engine_->Put(c_, 10, 5'000, 60'000, "due", [&](Result<uint64_t> x) { put = x; });
  work_.RunUntil([&] { return put.has_value(); });
  ASSERT_TRUE(put->ok());
  store_.Crash();
  engine_.reset();
  clock_.AdvanceMillis(7'000);
  Start();
  EXPECT_EQ(metrics_.Topic("default").fired, 1u);
  const HistogramSnapshot late = metrics_.fire_lateness.Read();
  EXPECT_EQ(late.count, 1u);
  EXPECT_NEAR(late.sum, 2.0, 0.01);  // due 5 s after the put, recovered 7 s after it
  EXPECT_EQ(Reserve(), put->value());
}

TEST_F(EngineDurabilityTest, AKillLosesNothingAcknowledged) {
  const uint64_t a = Put("a");
  const uint64_t b = Put("b");
  ASSERT_EQ(Reserve(), a);
  ASSERT_TRUE(Await([&](Engine::Done d) { engine_->Delete(c_, a, d); }).ok());
  ASSERT_EQ(Reserve(), b);
  ASSERT_TRUE(Await([&](Engine::Done d) { engine_->Bury(c_, b, 5, d); }).ok());
  // A put whose write was never committed was never acknowledged.
  engine_->Put(c_, 1, 0, 1000, "unacknowledged", [](Result<uint64_t>) {
    ADD_FAILURE() << "answered although the process died first";
  });
  Restart(/*power_cut=*/false);
  EXPECT_EQ(StateOf(a), "gone");
  EXPECT_EQ(StateOf(b), "buried");
  EXPECT_EQ(engine_->Stats().ready, 0u) << "the unacknowledged put is not there";
}

TEST_F(EngineDurabilityTest, APowerCutUndoesOnlyWrittenChangesToHeldJobs) {
  const uint64_t a = Put("a");
  const uint64_t b = Put("b");
  const uint64_t c = Put("c");
  // Finishing, releasing and burying a held job are answered once written.
  ASSERT_EQ(Reserve(), a);
  ASSERT_TRUE(Await([&](Engine::Done d) { engine_->Delete(c_, a, d); }).ok());
  ASSERT_EQ(Reserve(), b);
  ASSERT_TRUE(Await([&](Engine::Done d) { engine_->Release(c_, b, 99, 5000, d); }).ok());
  ASSERT_EQ(Reserve(), c);
  ASSERT_TRUE(Await([&](Engine::Done d) { engine_->Bury(c_, c, 7, d); }).ok());
  Restart(/*power_cut=*/true);
  // Each comes back as its reservation would have: ready, to be delivered
  // again. No put is lost.
  EXPECT_EQ(StateOf(a), "ready");
  EXPECT_EQ(StateOf(b), "ready");
  EXPECT_EQ(StateOf(c), "ready");
  EXPECT_EQ(GetJob(b)->record.priority, 10u);
}

TEST_F(EngineDurabilityTest, ChangesThatCreateOrKeepWorkAreSyncedBeforeTheirReply) {
  const uint64_t a = Put("a");
  const uint64_t b = Put("b");
  const uint64_t c = Put("c");
  const uint64_t parked = Put("p");
  ASSERT_EQ(Reserve(), a);
  ASSERT_TRUE(Await([&](Engine::Done d) { engine_->Bury(c_, a, 5, d); }).ok());
  // A kick, an operator's bury, a cancel of a job nobody holds, a pause:
  // each is synced, and a sync covers the written changes before it (the
  // consumer's bury).
  ASSERT_EQ(Await([&](Engine::Done d) {
              engine_->Kick(c_, 1, [d](Result<uint64_t> n) { d(n.status()); });
            }).code(),
            StatusCode::kOk);
  ASSERT_TRUE(Await([&](Engine::Done d) { engine_->Delete(c_, b, d); }).ok());
  ASSERT_TRUE(Await([&](Engine::Done d) { engine_->PauseTube("default", 60'000, d); }).ok());
  // Last, so that no later sync covers it.
  ASSERT_TRUE(Await([&](Engine::Done d) { engine_->BuryJob(parked, std::nullopt, d); }).ok());
  Restart(/*power_cut=*/true);
  EXPECT_EQ(StateOf(parked), "buried");
  EXPECT_EQ(StateOf(a), "ready");
  EXPECT_EQ(GetJob(a)->record.counters.kicks, 1u);
  EXPECT_EQ(GetJob(a)->record.counters.buries, 1u);
  EXPECT_EQ(StateOf(b), "gone");
  EXPECT_EQ(StateOf(c), "ready");
  EXPECT_GT(engine_->StatsTube("default")->pause_s, 0);
}

// Windows (doc/engine.md): beyond a window of 4, a tube's ready and buried
// jobs wait in the store and come back in beanstalkd's order.
class WindowTest : public EngineTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    dir_ = store::testing::FreshTestDir("engine");
    Start({.ready_window = 4});
    flaky_->defer_reads = GetParam();
  }
  void Restart() {
    Stop();
    Start({.ready_window = 4});
    flaky_->defer_reads = GetParam();
  }
  // One turn of the loop: timers due now (a window's settling), completions
  // posted, and (answering as a read thread would, in its own time) maybe
  // the oldest read held back.
  void Pump() {
    engine_->Tick();
    RunPosted();
    if (flaky_->reads_deferred() > 0 && rng_() % 2 == 0) flaky_->DeliverOneRead();
  }
  // Turns the loop until `pred` holds (10 s at most): the store's writer
  // answers from a thread of its own.
  template <class Pred>
  void PumpUntil(Pred pred) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!pred() && std::chrono::steady_clock::now() < deadline) {
      Pump();
      if (!pred()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  template <class T, class Op>
  Result<T> Pumped(Op op) {
    std::optional<Result<T>> out;
    op([&](Result<T> r) { out.emplace(std::move(r)); });
    PumpUntil([&] { return out.has_value(); });
    if (!out) return Status::Internal("not answered");
    return std::move(*out);
  }
  Status Done(std::function<void(Engine::Done)> op) {
    return Pumped<bool>([&](auto done) {
             op([done](const Status& s) { done(s.ok() ? Result<bool>(true) : s); });
           })
        .status();
  }
  // reserve-with-timeout 0: the job's id, or 0 for TIMED_OUT.
  uint64_t ReserveNow(Recorder& r, Client* c) {
    engine_->Reserve(c, 0);
    PumpUntil([&] { return !r.events.empty(); });
    const std::string e = r.Take();
    if (e == "timed-out") return 0;
    EXPECT_EQ(e.rfind("reserved ", 0), 0u)
        << "no answer; ready " << engine_->StatsTube("default")->ready << ", in memory "
        << engine_->jobs_in_memory() << ", reads held " << flaky_->reads_deferred();
    if (e.empty()) return ~uint64_t{0};
    return std::stoull(e.substr(9));
  }
  // Until every read and write is answered and the windows have settled.
  void Settle() {
    PumpUntil([&] {
      flaky_->DeliverReads();
      return flaky_->pending() == 0 && flaky_->reads_deferred() == 0;
    });
    for (int i = 0; i < 5; ++i) Pump();
    PumpUntil([&] {
      flaky_->DeliverReads();
      return flaky_->pending() == 0 && flaky_->reads_deferred() == 0;
    });
  }
  // `n` jobs "j" of priority 1, put and settled (beyond the window of 4,
  // cold): their ids.
  std::vector<uint64_t> PutSettled(Client* c, int n) {
    std::vector<uint64_t> ids;
    for (int i = 0; i < n; ++i) ids.push_back(Put(c, "j", 0, 1));
    Settle();
    return ids;
  }
  // A job of priority 100 ("late") put before five of priority 1, so that
  // it sorts beyond the window of 4 and goes cold: its id.
  uint64_t PutBehindAFullWindow(Client* c, int64_t ttr_ms) {
    const uint64_t late = Put(c, "late", 0, 100, ttr_ms);
    for (int i = 0; i < 5; ++i) Put(c, "early", 0, 1);
    for (int i = 0; i < 5; ++i) Pump();
    return late;
  }
  // Only the window is in memory, and `id` reads back ready from the store
  // with these counts.
  void ExpectColdAndReady(uint64_t id, uint32_t reserves, uint32_t timeouts) {
    EXPECT_EQ(engine_->jobs_in_memory(), 4u);
    auto stats = Pumped<JobStats>([&](auto done) { engine_->StatsJob(id, done); });
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    EXPECT_EQ(stats->state, JobState::kReady);
    EXPECT_EQ(stats->counters.reserves, reserves);
    EXPECT_EQ(stats->counters.timeouts, timeouts);
  }
  std::mt19937 rng_{20261128};
};

// A random script of puts, reserves, releases, buries, kicks and peeks,
// delays that run out, and restarts, checked step by step against a model
// of beanstalkd's order: ready jobs by priority then id (a release keeps the
// id), buried ones in bury order, kicked from the front, and with none
// buried delayed ones kicked in due order. With reads held back (as
// PostgreSQL's would be), every refill races the script's next steps.
TEST_P(WindowTest, EveryStepKeepsBeanstalkdsOrderAcrossTheEdge) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  // On a whole millisecond, so that a delay of whole milliseconds ends on
  // one, as the store keeps it (a restart must not move it).
  clock_.Advance((1000 - clock_.WallMicros() % 1000) % 1000);
  std::set<std::pair<uint32_t, uint64_t>> ready;  // the model
  std::deque<std::pair<uint32_t, uint64_t>> buried;
  std::set<std::tuple<int64_t, uint64_t, uint32_t>> delayed;  // (due us, id, priority)
  auto delay = [&] { return int64_t{100} * (1 + rng_() % 3); };
  for (int step = 0; step < 1500; ++step) {
    const unsigned op = rng_() % 100;
    const uint32_t pri = rng_() % 3;
    if (op < 30) {
      ready.insert({pri, Put(c, "j", 0, pri)});
    } else if (op < 35) {
      const int64_t ms = delay();
      const int64_t due = clock_.WallMicros() + ms * 1000;
      delayed.insert({due, Put(c, "d", ms, pri), pri});
    } else if (op < 70) {
      const uint64_t id = ReserveNow(r, c);
      ASSERT_NE(id, ~uint64_t{0}) << "step " << step;
      const uint64_t want = ready.empty() ? 0 : ready.begin()->second;
      ASSERT_EQ(id, want) << "step " << step;
      if (id == 0) continue;
      const uint32_t held_pri = ready.begin()->first;
      ready.erase(ready.begin());
      const unsigned then = rng_() % 3;
      if (then == 0) {
        ASSERT_TRUE(Done([&](auto done) { engine_->Delete(c, id, done); }).ok());
      } else if (then == 1) {
        const int64_t ms = rng_() % 4 == 0 ? delay() : 0;
        {
          Status s = Done([&](auto done) { engine_->Release(c, id, pri, ms, done); });
          ASSERT_TRUE(s.ok()) << s.ToString() << " step " << step;
        }
        if (ms == 0) {
          ready.insert({pri, id});
        } else {
          delayed.insert({clock_.WallMicros() + ms * 1000, id, pri});
        }
      } else {
        ASSERT_TRUE(Done([&](auto done) { engine_->Bury(c, id, held_pri, done); }).ok());
        buried.push_back({held_pri, id});
      }
    } else if (op < 80) {
      const uint64_t bound = 1 + rng_() % 7;
      auto kicked = Pumped<uint64_t>([&](auto done) { engine_->Kick(c, bound, done); });
      ASSERT_TRUE(kicked.ok()) << kicked.status().ToString();
      const bool of_buried = !buried.empty();
      const uint64_t want = std::min<uint64_t>(bound, of_buried ? buried.size() : delayed.size());
      ASSERT_EQ(*kicked, want) << "step " << step;
      for (uint64_t i = 0; i < want; ++i) {
        if (of_buried) {
          ready.insert(buried.front());
          buried.pop_front();
        } else {
          ready.insert({std::get<2>(*delayed.begin()), std::get<1>(*delayed.begin())});
          delayed.erase(delayed.begin());
        }
      }
    } else if (op < 88) {
      auto peek = Pumped<JobView>([&](auto done) { engine_->PeekReady(c, done); });
      ASSERT_EQ(peek.ok() ? peek->id : 0, ready.empty() ? 0 : ready.begin()->second)
          << "step " << step;
      peek = Pumped<JobView>([&](auto done) { engine_->PeekBuried(c, done); });
      ASSERT_EQ(peek.ok() ? peek->id : 0, buried.empty() ? 0 : buried.front().second)
          << "step " << step;
    } else if (op < 90) {
      Restart();
      c = engine_->Connect(&r);
    } else if (op < 95) {
      // Delays run out: those jobs are ready at once, in memory only.
      Advance(100);
      while (!delayed.empty() && std::get<0>(*delayed.begin()) <= clock_.WallMicros()) {
        ready.insert({std::get<2>(*delayed.begin()), std::get<1>(*delayed.begin())});
        delayed.erase(delayed.begin());
      }
    } else {
      for (int i = 0; i < 3; ++i) Pump();
    }
    auto stats = engine_->StatsTube("default");
    ASSERT_TRUE(stats.ok());
    ASSERT_EQ(stats->ready, ready.size()) << "step " << step;
    ASSERT_EQ(stats->delayed, delayed.size()) << "step " << step;
    ASSERT_EQ(stats->buried, buried.size()) << "step " << step;
    ASSERT_EQ(stats->urgent, ready.size()) << "step " << step;  // priorities 0-2
  }
  // Once the last delays have run out, memory holds windows, not the
  // backlog: ready and buried jobs beyond 4 each are in the store. Then
  // every ready job comes back, in order.
  Advance(1000);
  for (const auto& [due, id, p] : delayed) ready.insert({p, id});
  Settle();
  EXPECT_GT(ready.size() + buried.size(), 20u);
  EXPECT_LE(engine_->jobs_in_memory(), 8u);
  for (const auto& [p, id] : ready) ASSERT_EQ(ReserveNow(r, c), id);
  EXPECT_EQ(ReserveNow(r, c), 0u);
}

// A job whose reserve and timeout are counted in memory only (a ttr ran
// out) is written before it leaves memory for the store.
TEST_P(WindowTest, CountsKeptOnlyInMemoryAreWrittenBeforeAJobGoesCold) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  const uint64_t late = PutBehindAFullWindow(c, 1000);
  EXPECT_EQ(engine_->jobs_in_memory(), 4u);
  auto held = Pumped<JobView>([&](auto done) { engine_->ReserveJob(c, late, done); });
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  Advance(1500);  // its ttr runs out: ready again, beyond the window
  Settle();
  ExpectColdAndReady(late, 1, 1);
}

// A failed write takes the store's record again but keeps memory's reserve
// count, which the row lacks: the job is written before it goes cold.
TEST_P(WindowTest, CountsKeptAcrossAFailedWriteAreWrittenBeforeAJobGoesCold) {
  Recorder r, h;
  Client* c = engine_->Connect(&r);
  const uint64_t late = PutBehindAFullWindow(c, 10'000);
  Client* holder = engine_->Connect(&h);
  auto held = Pumped<JobView>([&](auto done) { engine_->ReserveJob(holder, late, done); });
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  // Ready again beyond the window, its reserve counted in memory only; the
  // write that would store it fails, and the store's record is taken again.
  flaky_->failing = true;
  engine_->Disconnect(holder);
  PumpUntil([&] { return flaky_->failed_submissions > 0; });
  flaky_->failing = false;
  // The resync's read, the write and the settling that follows it, each
  // on a later tick of the loop.
  for (int i = 0; i < 10 && engine_->jobs_in_memory() > 4; ++i) {
    Advance(10);
    Settle();
  }
  ExpectColdAndReady(late, 1, 0);
}

// A reserve that finds the window empty while jobs wait in the store is
// served by the refill, never TIMED_OUT.
TEST_P(WindowTest, AReserveWaitsForTheRefillNotForItsTimeout) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 12; ++i) ids.push_back(Put(c, "j" + std::to_string(i), 0, 5));
  for (int i = 0; i < 5; ++i) Pump();
  for (uint64_t id : ids) {
    const uint64_t got = ReserveNow(r, c);
    ASSERT_EQ(got, id);
    ASSERT_TRUE(Done([&](auto done) { engine_->Delete(c, got, done); }).ok());
  }
  EXPECT_EQ(ReserveNow(r, c), 0u);  // and then nothing is left
}

// A refill whose read fails answers a waiting peek with the error, keeps a
// reserve waiting (its job is ready, in the store), and is tried again a
// second later, not in a loop; once the store reads again, the reserve is
// served the next job in order.
TEST_P(WindowTest, AFailedRefillIsAnsweredAndTriedAgainLater) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  const std::vector<uint64_t> ids = PutSettled(c, 10);
  flaky_->reads_failing = true;
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_EQ(ReserveNow(r, c), ids[i]);
    ASSERT_TRUE(Done([&](auto done) { engine_->Delete(c, ids[i], done); }).ok());
  }
  auto peek = Pumped<JobView>([&](auto done) { engine_->PeekReady(c, done); });
  EXPECT_EQ(peek.status().code(), StatusCode::kIoError) << peek.status().ToString();
  engine_->Reserve(c, 0);
  const size_t scans = flaky_->set_scans;
  for (int i = 0; i < 50; ++i) Pump();
  EXPECT_TRUE(r.events.empty()) << r.events.front();
  EXPECT_LE(flaky_->set_scans, scans + 1) << "a failed refill is tried again in a loop";
  flaky_->reads_failing = false;
  Advance(1100);
  PumpUntil([&] { return !r.events.empty(); });
  EXPECT_EQ(r.Take(), "reserved " + std::to_string(ids[4]) + " j");
}

// A refill read ahead on the store's thread (SQLite's) is taken at once by a
// peek that cannot wait for it, so that no later command of the client comes
// in between; the read's own answer, when it runs, changes nothing.
TEST_P(WindowTest, APeekTakesARefillReadAheadAtOnce) {
  if (GetParam()) GTEST_SKIP() << "reads held back go aside, not ahead";
  Recorder r;
  Client* c = engine_->Connect(&r);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 10; ++i) ids.push_back(Put(c, "j" + std::to_string(i), 0, 1));
  Settle();
  // The window's four, reserved without a turn of the loop in between.
  for (size_t i = 0; i < 4; ++i) {
    engine_->Reserve(c, 0);
    ASSERT_EQ(r.Take(), "reserved " + std::to_string(ids[i]) + " j" + std::to_string(i));
  }
  const size_t scans = flaky_->set_scans;
  engine_->Tick();  // the window settles: its refill is read ahead
  ASSERT_EQ(flaky_->set_scans, scans + 1);
  std::optional<Result<JobView>> peek;
  engine_->PeekReady(c, [&](Result<JobView> v) { peek.emplace(std::move(v)); });
  ASSERT_TRUE(peek.has_value()) << "the peek waited for the read's answer";
  ASSERT_TRUE(peek->ok()) << peek->status().ToString();
  EXPECT_EQ((*peek)->id, ids[4]);
  Settle();
  for (size_t i = 4; i < ids.size(); ++i) EXPECT_EQ(ReserveNow(r, c), ids[i]);
  EXPECT_EQ(ReserveNow(r, c), 0u);
}

// A kick that reads buried jobs beyond the window pins its client until the
// read is answered (Engine::Reading), so that a session runs none of the
// client's later commands before the kick has taken its jobs: answered
// aside, a pipelined delete of a job the kick was about to kick overtook it
// (pg:CompatTest). Read at once, the kick has taken them when it returns.
TEST_P(WindowTest, AKickReadingBeyondTheWindowHoldsTheClientsNextCommands) {
  Recorder r;
  Client* c = engine_->Connect(&r);
  const std::vector<uint64_t> ids = PutSettled(c, 10);
  for (uint64_t id : ids) {
    ASSERT_EQ(ReserveNow(r, c), id);
    ASSERT_TRUE(Done([&](auto done) { engine_->Bury(c, id, 1, done); }).ok());
  }
  Settle();
  ASSERT_EQ(engine_->jobs_in_memory(), 4u) << "six buried jobs beyond the window";
  std::optional<Result<uint64_t>> kicked;
  engine_->Kick(c, 8, [&](Result<uint64_t> n) { kicked.emplace(std::move(n)); });
  if (GetParam()) {
    EXPECT_TRUE(engine_->Reading(c)) << "the kick waits for its read";
    EXPECT_EQ(r.reads_answered, 0);
    flaky_->DeliverReads();
    PumpUntil([&] { return !engine_->Reading(c); });
    EXPECT_EQ(r.reads_answered, 1);
  }
  EXPECT_FALSE(engine_->Reading(c));
  auto peek = Pumped<JobView>([&](auto done) { engine_->PeekReady(c, done); });
  ASSERT_TRUE(peek.ok()) << peek.status().ToString();
  EXPECT_EQ(peek->id, ids[0]) << "the kick took effect before the next command";
  PumpUntil([&] { return kicked.has_value(); });
  ASSERT_TRUE(kicked.has_value() && kicked->ok());
  EXPECT_EQ(kicked->value(), 8u);
}

// A client that hangs up while its kick reads beyond the window is
// answered kUnavailable once the read comes back, and kicks nothing.
TEST_P(WindowTest, AKickWhoseClientHungUpDuringItsReadKicksNothing) {
  if (!GetParam()) GTEST_SKIP() << "a read answered at once leaves no time to hang up";
  Recorder r;
  Client* c = engine_->Connect(&r);
  for (uint64_t id : PutSettled(c, 10)) {
    ASSERT_EQ(ReserveNow(r, c), id);
    ASSERT_TRUE(Done([&](auto done) { engine_->Bury(c, id, 1, done); }).ok());
  }
  Settle();
  std::optional<Result<uint64_t>> kicked;
  engine_->Kick(c, 8, [&](Result<uint64_t> n) { kicked.emplace(std::move(n)); });
  ASSERT_TRUE(engine_->Reading(c));
  engine_->Disconnect(c);
  flaky_->DeliverReads();
  PumpUntil([&] { return kicked.has_value(); });
  ASSERT_TRUE(kicked.has_value());
  EXPECT_EQ(kicked->status().code(), StatusCode::kUnavailable) << kicked->status().ToString();
  EXPECT_EQ(r.reads_answered, 0) << "a client gone is not told";
  EXPECT_EQ(engine_->StatsTube("default")->buried, 10u);
}

INSTANTIATE_TEST_SUITE_P(Reads, WindowTest, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Deferred" : "AtOnce"; });

}  // namespace
}  // namespace delayd::engine
