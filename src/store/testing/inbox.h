// Test support: an executor whose work the test thread runs, so that a
// store's completions run where the test can wait for them.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <vector>

#include "common/executor.h"

namespace delayd::store::testing {

class Inbox {
 public:
  Executor executor() {
    return [this](std::function<void()> f) {
      std::lock_guard lock(mu_);
      work_.push_back(std::move(f));
      cv_.notify_all();
    };
  }
  // Waits up to `d` for posted work and runs what there is.
  void RunFor(std::chrono::microseconds d) {
    const auto until = std::chrono::steady_clock::now() + d;
    std::vector<std::function<void()>> work;
    {
      std::unique_lock lock(mu_);
      cv_.wait_until(lock, until, [&] { return !work_.empty(); });
      work.swap(work_);
    }
    for (auto& f : work) f();
  }
  // Runs posted work until `count` reaches `n` or 10 s pass.
  void RunUntil(const std::atomic<int>& count, int n) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (count.load() < n) {
      std::vector<std::function<void()>> work;
      {
        std::unique_lock lock(mu_);
        cv_.wait_until(lock, deadline, [&] { return !work_.empty(); });
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "timed out";
        work.swap(work_);
      }
      for (auto& f : work) f();
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::function<void()>> work_;
};

}  // namespace delayd::store::testing
