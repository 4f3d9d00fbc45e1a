// The timer service over a store that crashes as a disk would (MemoryStore)
// and a real engine, with a manual clock: one job per fire time across
// crashes, misfire and overlap policies, end times,
// preview, and memory held only for timers that fire soon.
#include "timer/timer_service.h"

#include <gtest/gtest.h>

#include <deque>
#include <filesystem>
#include <mutex>

#include "common/time_format.h"
#include "store/testing/flaky_store.h"
#include "store/testing/memory_store.h"
#include "store/testing/posted_work.h"

namespace delayd::timer {
namespace {

// 2026-11-22T00:00:00Z, a whole minute.
constexpr int64_t kStartMs = 1'795'305'600'000;

class TimerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(); }
  void TearDown() override { Crash(); }
  void Start(TimerOptions options = {}) {
    flaky_ = std::make_unique<store::testing::FlakyStore>(*store_, work_.executor());
    engine_ =
        std::make_unique<engine::Engine>(*flaky_, clock_, engine::EngineOptions{}, [](int64_t) {});
    ASSERT_TRUE(engine_->Recover().ok());
    timers_ = std::make_unique<TimerService>(*flaky_, *engine_, clock_, options,
                                             [this](int64_t at) { wake_ms_ = at; });
    ASSERT_TRUE(timers_->Start().ok());
  }
  // kill -9: memory is thrown away, and so are writes not yet committed and
  // answers not yet delivered; the store keeps what it committed.
  void Crash() {
    if (!engine_) return;
    store_->Crash();
    work_.Discard();
    timers_.reset();
    engine_.reset();
    flaky_.reset();
  }
  void RunPosted() { work_.RunPosted(); }
  template <typename Pred>
  void RunUntil(Pred pred) {
    work_.RunUntil(pred);
  }
  // Waits for every store write in flight.
  void Settle() {
    for (int i = 0; i < 3; ++i) {
      bool flushed = false;
      store_->Submit(store::Mutation::PurgeDone(0), [&](const Status&) { flushed = true; });
      RunUntil([&] { return flushed; });
    }
  }
  // Moves time forward `ms` in steps of `step_ms`, ticking engine and timers
  // and letting their writes complete.
  void Run(int64_t ms, int64_t step_ms = 50) {
    for (int64_t done = 0; done < ms; done += step_ms) {
      clock_.AdvanceMillis(step_ms);
      engine_->Tick();
      timers_->Tick();
      Settle();
    }
  }
  TimerSpec Spec(const std::string& schedule, const std::string& topic = "t") {
    TimerSpec s;
    s.topic = topic;
    s.schedule = schedule;
    s.job.body = "tick";
    return s;
  }
  TimerInfo Create(const std::string& name, TimerSpec spec) {
    std::optional<Result<TimerInfo>> out;
    timers_->Create(name, std::move(spec), [&](Result<TimerInfo> r) { out = std::move(r); });
    RunUntil([&] { return out.has_value(); });
    EXPECT_TRUE(out->ok()) << out->status().ToString();
    return out->ok() ? **out : TimerInfo{};
  }
  Result<engine::JobInfo> GetByKey(const std::string& topic, const std::string& key) {
    return work_.Answer<engine::JobInfo>([&](auto done) { engine_->GetByKey(topic, key, done); });
  }
  Result<TimerInfo> Get(uint64_t id) {
    return work_.Answer<TimerInfo>([&](auto done) { timers_->Get(id, done); });
  }
  Result<std::vector<store::TimerFire>> Fires(uint64_t id, size_t limit) {
    return work_.Answer<std::vector<store::TimerFire>>(
        [&](auto done) { timers_->Fires(id, limit, done); });
  }
  Result<std::vector<TimerInfo>> List(uint64_t after_id, size_t limit) {
    return work_.Answer<std::vector<TimerInfo>>(
        [&](auto done) { timers_->List(after_id, limit, done); });
  }
  // The fire times of the jobs the timer created, from their keys, oldest first.
  std::vector<int64_t> JobFireTimes(uint64_t timer_id) {
    engine::ListFilter f;
    f.key_prefix = "timer:" + std::to_string(timer_id) + ":";
    f.limit = 1000;
    auto page = work_.Answer<engine::ListPage>([&](auto done) { engine_->List(f, done); });
    EXPECT_TRUE(page.ok());
    std::vector<int64_t> out;
    for (const auto& j : page->jobs) {
      out.push_back(std::stoll(j.record.key.substr(f.key_prefix.size())));
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  static std::vector<int64_t> Every(int64_t from_ms, int64_t to_ms, int64_t step_ms) {
    std::vector<int64_t> out;
    for (int64_t t = from_ms; t <= to_ms; t += step_ms) out.push_back(t);
    return out;
  }

  store::testing::PostedWork work_;
  ManualClock clock_{kStartMs * 1000};
  // Outlives every crash, as the disk does.
  std::unique_ptr<store::testing::MemoryStore> store_ =
      std::make_unique<store::testing::MemoryStore>(work_.executor());
  std::unique_ptr<store::testing::FlakyStore> flaky_;  // what the engine and timers write to
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<TimerService> timers_;
  int64_t wake_ms_ = -1;
};

TEST_F(TimerServiceTest, EachFireCreatesOneJobDueAtItsFireTime) {
  TimerInfo t = Create("every-second", Spec("* * * * * *"));
  EXPECT_EQ(t.record.next_fire_ms, kStartMs + 1000);
  Run(5000);
  EXPECT_EQ(JobFireTimes(t.record.id), Every(kStartMs + 1000, kStartMs + 5000, 1000));
  // Each job is due exactly at its fire time, with the template's body.
  auto job =
      GetByKey("t", "timer:" + std::to_string(t.record.id) + ":" + std::to_string(kStartMs + 3000));
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->record.due_ms, kStartMs + 3000);
  EXPECT_EQ(job->record.body, "tick");
  // The next fire is created ahead of time, 250 ms before it is due.
  EXPECT_EQ(JobFireTimes(t.record.id).back(), kStartMs + 5000);
  Run(800);
  EXPECT_EQ(JobFireTimes(t.record.id).back(), kStartMs + 6000);
  auto fires = Fires(t.record.id, 100);
  ASSERT_TRUE(fires.ok());
  ASSERT_EQ(fires->size(), 6u);
  EXPECT_EQ(fires->front().fire_ms, kStartMs + 6000);
  EXPECT_EQ(fires->front().outcome, "created");
}

TEST_F(TimerServiceTest, NoFireIsRepeatedOrSkippedAcrossCrashes) {
  TimerInfo t = Create("every-second", Spec("* * * * * *"));
  for (int round = 0; round < 5; ++round) {
    Run(1300, 100);
    // Cross a fire time and die before its writes commit: the fire was never
    // acknowledged, so the next life must create it, once.
    clock_.AdvanceMillis(100 + (1000 - clock_.WallMillis() % 1000));
    engine_->Tick();
    timers_->Tick();
    ASSERT_GT(store_->queued(), 0u) << "round " << round << ": nothing in flight to lose";
    Crash();
    clock_.AdvanceMillis(700);  // down for a moment, well within the misfire grace
    Start();
  }
  Run(2000, 100);
  const int64_t now = clock_.WallMillis();
  std::vector<int64_t> fired = JobFireTimes(t.record.id);
  // Every second from the first fire on, each exactly once, up to the one
  // created ahead of now.
  ASSERT_FALSE(fired.empty());
  EXPECT_EQ(fired, Every(kStartMs + 1000, fired.back(), 1000));
  EXPECT_GE(fired.back(), now);
  EXPECT_LE(fired.back(), now + 1000);
}

TEST_F(TimerServiceTest, AFailedStoreWriteIsRetriedAndItsFireHappensOnce) {
  TimerInfo t = Create("every-second", Spec("* * * * * *"));
  flaky_->failing = true;  // the disk is full when the first fire is written
  Run(1500, 50);
  EXPECT_TRUE(JobFireTimes(t.record.id).empty());
  EXPECT_EQ(Get(t.record.id)->record.next_fire_ms, kStartMs + 1000) << "not advanced";
  flaky_->failing = false;
  Run(1500, 50);  // retried within a second; the next fire on time
  EXPECT_EQ(JobFireTimes(t.record.id), Every(kStartMs + 1000, kStartMs + 3000, 1000));
}

TEST_F(TimerServiceTest, MisfirePoliciesAfterAPause) {
  // A fire more than 5 s late counts as missed.
  Crash();
  Start({.misfire_grace_ms = 5000});
  for (Misfire policy : {Misfire::kSkip, Misfire::kFireOnce, Misfire::kFireAll}) {
    TimerSpec spec = Spec("0 * * * * *");  // every minute
    spec.misfire = policy;
    spec.misfire_limit = 3;
    TimerInfo t = Create(std::string("m-") + MisfireName(policy), spec);
    Run(60'000, 1000);  // fires at +1 min
    std::optional<Result<TimerInfo>> paused;
    timers_->SetActive(t.record.id, false, [&](auto r) { paused = std::move(r); });
    RunUntil([&] { return paused.has_value(); });
    ASSERT_TRUE(paused->ok());
    const size_t before = JobFireTimes(t.record.id).size();
    Run(10 * 60'000 + 30'000, 5000);  // 10.5 minutes paused: nothing fires
    EXPECT_EQ(JobFireTimes(t.record.id).size(), before) << MisfireName(policy);
    std::optional<Result<TimerInfo>> resumed;
    timers_->SetActive(t.record.id, true, [&](auto r) { resumed = std::move(r); });
    RunUntil([&] { return resumed.has_value(); });
    ASSERT_TRUE(resumed->ok());
    Run(1000, 100);
    const size_t created = JobFireTimes(t.record.id).size() - before;
    const size_t want = policy == Misfire::kSkip ? 0 : policy == Misfire::kFireOnce ? 1 : 3;
    EXPECT_EQ(created, want) << MisfireName(policy);
    // Afterwards it keeps its schedule.
    const int64_t now = clock_.WallMillis();
    const int64_t next_minute = (now / 60'000 + 1) * 60'000;
    Run(next_minute - now + 100, 100);
    EXPECT_EQ(JobFireTimes(t.record.id).back(), next_minute) << MisfireName(policy);
  }
}

TEST_F(TimerServiceTest, OverlapSkipWaitsForThePreviousJob) {
  TimerSpec spec = Spec("* * * * * *");
  spec.overlap = Overlap::kSkip;
  TimerInfo t = Create("no-overlap", spec);
  engine::Client* worker = engine_->Connect(nullptr);
  engine_->Watch(worker, "t");
  Run(2000, 50);  // the +1 s job is ready and nobody took it; +2 s is skipped
  std::vector<int64_t> fired = JobFireTimes(t.record.id);
  EXPECT_EQ(fired, std::vector<int64_t>{kStartMs + 1000});
  auto fires = Fires(t.record.id, 10);
  ASSERT_TRUE(fires.ok());
  ASSERT_GE(fires->size(), 2u);
  EXPECT_EQ(fires->front().fire_ms, kStartMs + 2000);
  EXPECT_EQ(fires->front().outcome, "skipped-overlap");
  EXPECT_EQ(fires->front().job_id, 0u);
  // Once the job is done, fires resume.
  auto job =
      GetByKey("t", "timer:" + std::to_string(t.record.id) + ":" + std::to_string(kStartMs + 1000));
  ASSERT_TRUE(job.ok());
  std::optional<Status> removed;
  engine_->Remove(job->record.id, [&](const Status& s) { removed = s; });
  RunUntil([&] { return removed.has_value(); });
  Run(1000, 50);
  EXPECT_EQ(JobFireTimes(t.record.id).back(), kStartMs + 3000);
  engine_->Disconnect(worker);
}

TEST_F(TimerServiceTest, EndTimeIsHonouredAndPreviewMatchesWhatFires) {
  TimerSpec spec = Spec("*/2 * * * * *");
  spec.end_ms = kStartMs + 7000;
  auto preview = TimerService::Preview(spec, kStartMs, kStartMs, 10);
  ASSERT_TRUE(preview.ok());
  EXPECT_EQ(*preview, Every(kStartMs + 2000, kStartMs + 6000, 2000));
  TimerInfo t = Create("until", spec);
  Run(10'000, 100);
  EXPECT_EQ(JobFireTimes(t.record.id), *preview);
  auto row = Get(t.record.id);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(row->record.next_fire_ms, 0) << "an ended timer has no next fire";
  EXPECT_EQ(timers_->loaded(), 0u);
}

TEST_F(TimerServiceTest, FarTimersStayInTheStoreUntilTheirTimeNears) {
  TimerInfo daily = Create("daily", Spec("0 0 9 * * *"));  // 09:00, nine hours away
  TimerInfo soon = Create("soon", Spec("30 0 0 * * *"));   // 00:00:30
  EXPECT_EQ(timers_->loaded(), 1u) << "only the timer firing within the horizon";
  Crash();
  Start();
  EXPECT_EQ(timers_->loaded(), 1u);
  Run(31'000, 500);
  EXPECT_EQ(JobFireTimes(soon.record.id), std::vector<int64_t>{kStartMs + 30'000});
  EXPECT_TRUE(JobFireTimes(daily.record.id).empty());
  EXPECT_EQ(timers_->loaded(), 0u);
}

TEST_F(TimerServiceTest, AFailedLoadIsRetriedASecondLaterNotAtOnce) {
  TimerInfo soon = Create("soon", Spec("30 0 0 * * *"));  // 00:00:30, within the horizon
  flaky_->reads_failing = true;
  // The window moves on a second: a load is due, and fails.
  clock_.AdvanceMillis(1000);
  timers_->Tick();
  const int64_t now = clock_.WallMillis();
  EXPECT_GE(wake_ms_, now + 1000) << "a failed load must not ask to be woken at once";
  // Ticks before the retry time do not read (nor log) again; fires in memory go on.
  clock_.AdvanceMillis(500);
  timers_->Tick();
  flaky_->reads_failing = false;
  Run(30'000, 500);
  EXPECT_EQ(JobFireTimes(soon.record.id), std::vector<int64_t>{kStartMs + 30'000});
}

// Reads go aside: a timer replaced while the next window is being read
// must not come back from the row read before the change (it would fire
// under its old schedule); its row is read again.
TEST_F(TimerServiceTest, ATimerChangedWhileTheWindowIsBeingReadIsReadAgain) {
  TimerInfo t = Create("t1", Spec("30 1 0 * * *"));  // 00:01:30, beyond the first window
  Run(30'000, 1000);
  EXPECT_EQ(timers_->loaded(), 0u);
  flaky_->defer_reads = true;
  std::optional<Result<TimerInfo>> replaced;
  timers_->Replace(t.record.id, "t1", Spec("0 0 9 * * *"),  // 09:00
                   [&](Result<TimerInfo> r) { replaced.emplace(std::move(r)); });
  clock_.AdvanceMillis(1000);
  wake_ms_ = -1;
  timers_->Tick();  // the window now reaches 00:01:30: its read sees the old row
  ASSERT_EQ(flaky_->reads_deferred(), 2u);
  // Nothing is due meanwhile: no wake-up until the read is answered (a wake
  // at the window step, now past, would spin the loop).
  EXPECT_EQ(wake_ms_, -1);
  flaky_->DeliverOneRead();  // the replace's: it writes the new definition
  RunUntil([&] { return replaced.has_value(); });
  ASSERT_TRUE(replaced->ok()) << replaced->status().ToString();
  flaky_->defer_reads = false;
  flaky_->DeliverReads();  // the window's, read before the replace
  RunPosted();
  EXPECT_EQ(timers_->loaded(), 0u) << "held under its old schedule";
  Run(70'000, 1000);
  EXPECT_TRUE(JobFireTimes(t.record.id).empty());
  auto row = Get(t.record.id);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(row->spec.schedule, "0 0 9 * * *");
  EXPECT_EQ(row->record.next_fire_ms, kStartMs + 9 * 3'600'000);
}

TEST_F(TimerServiceTest, BadDefinitionsNameTheirField) {
  auto field = [&](const std::string& name, TimerSpec spec) {
    std::optional<Result<TimerInfo>> out;
    timers_->Create(name, std::move(spec), [&](Result<TimerInfo> r) { out = std::move(r); });
    RunUntil([&] { return out.has_value(); });
    EXPECT_FALSE(out->ok());
    return out->ok() ? std::string() : out->status().field();
  };
  EXPECT_EQ(field("a", Spec("61 * * * *")), "schedule");
  TimerSpec zone = Spec("* * * * *");
  zone.timezone = "Nowhere/City";
  EXPECT_EQ(field("a", zone), "timezone");
  EXPECT_EQ(field("", Spec("* * * * *")), "name");
  EXPECT_EQ(field("a", Spec("* * * * *", "")), "topic");
  TimerSpec backwards = Spec("* * * * *");
  backwards.start_ms = kStartMs + 10;
  backwards.end_ms = kStartMs;
  EXPECT_EQ(field("a", backwards), "end_at");
  Create("taken", Spec("* * * * *"));
  EXPECT_EQ(field("taken", Spec("0 * * * *")), "name");
  auto list = List(0, 10);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 1u) << "a refused definition stores nothing";
}

}  // namespace
}  // namespace delayd::timer
