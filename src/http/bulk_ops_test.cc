// BulkOps over a real engine on the in-memory store, everything on one
// io_context the test turns by hand: chunking, stopping between chunks,
// taking up again, a failing store, dry runs and reschedules.
#include "http/bulk_ops.h"

#include <gtest/gtest.h>

#include <boost/asio/post.hpp>

#include "store/testing/memory_store.h"

namespace delayd::http {
namespace {

class BulkOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::make_unique<store::testing::MemoryStore>(
        [this](std::function<void()> f) { boost::asio::post(io_, std::move(f)); });
    engine_ =
        std::make_unique<engine::Engine>(*store_, clock_, engine::EngineOptions{}, [](int64_t) {});
    ASSERT_TRUE(engine_->Recover().ok());
    bulk_ = std::make_unique<BulkOps>(io_, *engine_, clock_, /*chunk=*/10);
  }
  // Submits `n` jobs to `topic`, keys key-0.., due in an hour.
  std::vector<uint64_t> Submit(const std::string& topic, int n) {
    std::vector<engine::NewJob> jobs(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      jobs[static_cast<size_t>(i)].key = "key-" + std::to_string(i);
      jobs[static_cast<size_t>(i)].delay_ms = 3'600'000;
    }
    std::vector<uint64_t> ids;
    engine_->Submit(topic, std::move(jobs), [&](Result<std::vector<engine::Submitted>> r) {
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      for (const auto& s : *r) ids.push_back(s.id);
    });
    RunUntil([&] { return ids.size() == static_cast<size_t>(n); });
    return ids;
  }
  // Turns the loop until `pred` holds (at most 100k handlers).
  template <typename Pred>
  void RunUntil(Pred pred) {
    for (int i = 0; i < 100'000 && !pred(); ++i) {
      io_.restart();
      io_.run_one();
    }
    ASSERT_TRUE(pred());
  }
  uint64_t Started(const BulkRequest& r) {
    auto id = bulk_->Start(r);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : 0;
  }
  const BulkProgress& RunToEnd(uint64_t id) {
    RunUntil([&] { return bulk_->Find(id)->state != BulkState::kRunning; });
    return *bulk_->Find(id);
  }
  uint64_t Count(const std::string& topic) {
    auto t = engine_->Topic(topic);
    return t.ok() ? t->delayed + t->ready + t->buried : 0;
  }
  BulkRequest Cancel(const std::string& topic) {
    BulkRequest r;
    r.action = BulkAction::kCancel;
    r.filter.topic = topic;
    return r;
  }

  boost::asio::io_context io_;
  ManualClock clock_;
  std::unique_ptr<store::testing::MemoryStore> store_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<BulkOps> bulk_;
};

TEST_F(BulkOpsTest, ActsOnEveryMatchChunkByChunkAndNothingElse) {
  Submit("a", 35);
  Submit("b", 5);
  auto id = bulk_->Start(Cancel("a"));
  ASSERT_TRUE(id.ok());
  const BulkProgress& p = RunToEnd(*id);
  EXPECT_EQ(p.state, BulkState::kDone);
  EXPECT_EQ(p.matched, 35u);
  EXPECT_EQ(p.applied, 35u);
  EXPECT_EQ(p.skipped, 0u);
  EXPECT_EQ(p.chunks, 4u);  // 10 + 10 + 10 + 5
  EXPECT_EQ(Count("a"), 0u);
  EXPECT_EQ(Count("b"), 5u);
}

TEST_F(BulkOpsTest, AStopEndsItAfterTheChunkInFlightAndARunAgainTakesUpTheRest) {
  Submit("a", 35);
  auto id = bulk_->Start(Cancel("a"));
  RunUntil([&] { return bulk_->Find(*id)->chunks == 1; });
  ASSERT_TRUE(bulk_->Stop(*id).ok());
  const BulkProgress& p = RunToEnd(*id);
  EXPECT_EQ(p.state, BulkState::kStopped);
  EXPECT_EQ(p.applied, 10u) << "the chunk in flight is finished, whole";
  EXPECT_EQ(Count("a"), 25u);
  auto again = bulk_->Start(Cancel("a"));
  EXPECT_EQ(RunToEnd(*again).applied, 25u);
  EXPECT_EQ(Count("a"), 0u);
  EXPECT_EQ(bulk_->Stop(999).code(), StatusCode::kNotFound);
}

TEST_F(BulkOpsTest, AFailingStoreFailsTheOperationWithWhatItHadDoneKept) {
  Submit("a", 35);
  auto id = bulk_->Start(Cancel("a"));
  RunUntil([&] { return bulk_->Find(*id)->applied == 10; });
  store_->failing = true;
  const BulkProgress& p = RunToEnd(*id);
  EXPECT_EQ(p.state, BulkState::kFailed);
  EXPECT_FALSE(p.error.empty());
  EXPECT_EQ(p.applied, 10u);
  EXPECT_EQ(p.chunks, 2u) << "no chunk after the one whose writes failed";
  store_->failing = false;
  EXPECT_EQ(Count("a"), 25u);
}

TEST_F(BulkOpsTest, ADryRunCountsAndChangesNothing) {
  Submit("a", 35);
  BulkRequest r = Cancel("a");
  r.dry_run = true;
  r.filter.key_prefix = "key-1";  // key-1, key-10..key-19
  const BulkProgress& p = RunToEnd(Started(r));
  EXPECT_EQ(p.state, BulkState::kDone);
  EXPECT_EQ(p.matched, 11u);
  EXPECT_EQ(p.applied, 0u);
  EXPECT_EQ(Count("a"), 35u);
  r.dry_run = false;
  r.max_jobs = 4;
  const BulkProgress& q = RunToEnd(Started(r));
  EXPECT_EQ(q.applied, 4u);
  EXPECT_EQ(Count("a"), 31u);
}

TEST_F(BulkOpsTest, RescheduleShiftsOrSetsTheDueTimeNeverBeforeNow) {
  std::vector<uint64_t> ids = Submit("a", 3);
  auto due = [&](uint64_t id) {
    int64_t out = -1;
    engine_->GetJob(id, [&](Result<engine::JobInfo> info) {
      ASSERT_TRUE(info.ok());
      out = info->record.due_ms;
    });
    RunUntil([&] { return out >= 0; });
    return out;
  };
  const int64_t before = due(ids[0]);
  BulkRequest r;
  r.action = BulkAction::kReschedule;
  r.filter.topic = "a";
  r.shift_ms = -1'800'000;
  EXPECT_EQ(RunToEnd(Started(r)).applied, 3u);
  EXPECT_EQ(due(ids[0]), before - 1'800'000);
  r.shift_ms = -7'200'000;  // would be in the past: now
  EXPECT_EQ(RunToEnd(Started(r)).applied, 3u);
  EXPECT_EQ(due(ids[1]), clock_.WallMillis());
  r.shift_ms.reset();
  r.due_at_ms = clock_.WallMillis() + 60'000;
  RunToEnd(Started(r));
  EXPECT_EQ(due(ids[2]), clock_.WallMillis() + 60'000);
}

}  // namespace
}  // namespace delayd::http
