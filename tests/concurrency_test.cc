// 100 connections at once: 50 producers put, 50 consumers reserve and
// delete. Every job put must be reserved and deleted exactly once, and no
// job may be held by two consumers at the same time.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "support/client.h"
#include "support/process.h"

namespace delayd::testing {
namespace {

using namespace std::chrono_literals;

TEST(ConcurrencyTest, HundredConnectionsLoseAndDuplicateNothing) {
  constexpr int kProducers = 50, kConsumers = 50, kJobsEach = 100;
  std::string dir = MakeTempDir("delayd-concurrency");
  DelaydServer server(dir + "/data");

  std::mutex mu;
  std::set<uint64_t> inserted, deleted;
  std::atomic<int> producers_left{kProducers};
  std::atomic<int> errors{0};
  std::vector<std::string> error_texts;  // under mu
  auto failed = [&](const std::string& what) {
    ++errors;
    std::lock_guard lock(mu);
    error_texts.push_back(what);
  };
  std::atomic<int> double_reserved{0};
  std::set<uint64_t> held;  // reserved and not yet deleted, by anyone

  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      try {
        Client c(server.port());
        for (int i = 0; i < kJobsEach; ++i) {
          uint64_t id = c.Put("p" + std::to_string(p) + "-" + std::to_string(i), 0, 0, 120);
          std::lock_guard lock(mu);
          inserted.insert(id);
        }
      } catch (const std::exception& e) {
        failed(std::string("producer: ") + e.what());
      }
      --producers_left;
    });
  }
  for (int k = 0; k < kConsumers; ++k) {
    threads.emplace_back([&] {
      try {
        Client c(server.port());
        for (;;) {
          // Replies wait up to 30 s: under ThreadSanitizer, with another
          // test beside it, one of these 15,000 commands took over 10 s
          // (the test ran 49 s; 19 s alone). What it asserts is exactly
          // once, not speed.
          std::string r = c.Cmd("reserve-with-timeout 1", 30s);
          if (r == "TIMED_OUT\r\n") {
            if (producers_left == 0) {
              std::lock_guard lock(mu);
              if (deleted.size() >= inserted.size()) return;
            }
            continue;
          }
          uint64_t id = Number(r);
          {
            std::lock_guard lock(mu);
            if (!held.insert(id).second) ++double_reserved;
          }
          // Held until DELETED arrives: a job reserved by two consumers at
          // once shows as an id already in `held` (the ttr of 120 s never
          // runs out here, so no reservation ends any other way).
          const std::string reply = c.Cmd("delete " + std::to_string(id), 30s);
          if (reply != "DELETED\r\n") failed("delete " + std::to_string(id) + ": " + reply);
          std::lock_guard lock(mu);
          held.erase(id);
          if (reply == "DELETED\r\n" && !deleted.insert(id).second) ++double_reserved;
        }
      } catch (const std::exception& e) {
        failed(std::string("consumer: ") + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0) << ::testing::PrintToString(error_texts);
  EXPECT_EQ(double_reserved.load(), 0);
  EXPECT_EQ(inserted.size(), size_t{kProducers * kJobsEach});
  EXPECT_EQ(deleted, inserted);
  Client c(server.port());
  std::string stats = c.Cmd("stats");
  EXPECT_EQ(Field(stats, "current-jobs-ready"), "0");
  EXPECT_EQ(Field(stats, "current-jobs-reserved"), "0");
  EXPECT_EQ(Field(stats, "cmd-delete"), std::to_string(kProducers * kJobsEach));
  std::printf("concurrency: %d connections, %zu jobs put and deleted exactly once\n",
              kProducers + kConsumers, deleted.size());
  server.Kill9();
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

}  // namespace
}  // namespace delayd::testing
