#include "delivery/dispatcher.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <filesystem>

#include "store/sqlite/sqlite_store.h"
#include "store/testing/test_dir.h"

namespace delayd::delivery {
namespace {

namespace asio = boost::asio;

class DispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = store::testing::FreshTestDir("dispatcher");
    auto post = [this](std::function<void()> f) { asio::post(io_, std::move(f)); };
    auto s = store::SqliteStore::Open({.path = (dir_ / "delayd.db").string()}, post);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    engine_ =
        std::make_unique<engine::Engine>(*store_, clock_, engine::EngineOptions{}, [](int64_t) {});
    ASSERT_TRUE(engine_->Recover().ok());
    client_ = std::make_unique<HttpClient>(post);
    dispatcher_ =
        std::make_unique<Dispatcher>(io_, *engine_, *client_, clock_, DispatcherOptions{});
    dispatcher_->Start();
  }
  void TearDown() override {
    dispatcher_->Stop();
    client_->Stop();
    store_->Close();
    io_.poll();
    dispatcher_.reset();
    client_.reset();
    engine_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  // Runs the loop one handler at a time until `pred` holds (10 s at most).
  template <typename Pred>
  void RunUntil(Pred pred) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!pred()) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "condition not reached";
      io_.restart();
      io_.run_one_for(std::chrono::milliseconds(10));
    }
  }

  std::filesystem::path dir_;
  asio::io_context io_;
  ManualClock clock_;
  std::unique_ptr<store::SqliteStore> store_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<HttpClient> client_;
  std::unique_ptr<Dispatcher> dispatcher_;
};

TEST_F(DispatcherTest, PumpPendingSendsReadyJobsBeforeWorkAlreadyQueued) {
  engine::NewJob job;
  job.spec.target.emplace().url = "http://127.0.0.1:9/hook";  // nothing listens: refused
  std::vector<engine::NewJob> batch;
  batch.push_back(std::move(job));
  bool submitted = false;
  engine_->Submit("push", std::move(batch), [&](auto r) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    submitted = true;
  });
  RunUntil([&] { return submitted; });
  // The job is ready and a pump is scheduled behind whatever the loop holds.
  ASSERT_EQ(dispatcher_->stats().in_flight, 0u);
  uint64_t in_flight_seen_by_queued_work = 99;
  asio::post(io_, [&] { in_flight_seen_by_queued_work = dispatcher_->stats().in_flight; });

  dispatcher_->PumpPending();
  EXPECT_EQ(dispatcher_->stats().in_flight, 1u);

  RunUntil([&] { return dispatcher_->stats().failed == 1; });
  EXPECT_EQ(in_flight_seen_by_queued_work, 1u);
  // The pump that was scheduled found nothing left to send: one attempt.
  EXPECT_EQ(dispatcher_->stats().in_flight, 0u);
  EXPECT_EQ(dispatcher_->stats().failed, 1u);
}

}  // namespace
}  // namespace delayd::delivery
