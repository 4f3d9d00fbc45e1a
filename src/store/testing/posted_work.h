// Test support: store completions collected from the writer thread and run
// on the test's thread, where the engine lives.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>

#include "common/status.h"

namespace delayd::store::testing {

class PostedWork {
 public:
  // The completion executor to give a store.
  std::function<void(std::function<void()>)> executor() {
    return [this](std::function<void()> f) {
      std::lock_guard lock(mu_);
      posted_.push_back(std::move(f));
      cv_.notify_all();
    };
  }
  // Runs what has been posted so far.
  void RunPosted() {
    std::deque<std::function<void()>> work;
    {
      std::lock_guard lock(mu_);
      work.swap(posted_);
    }
    for (auto& f : work) f();
  }
  // Drops what has been posted and not run: the process it belonged to died.
  void Discard() {
    std::lock_guard lock(mu_);
    posted_.clear();
  }
  // What `op` passes to the callback it is given (a read that answers
  // through one), once it has: at once, or through posted work.
  template <class T, class Op>
  Result<T> Answer(Op op) {
    std::optional<Result<T>> out;
    op([&](Result<T> r) { out.emplace(std::move(r)); });
    RunUntil([&] { return out.has_value(); });
    if (!out) return Status::Internal("not answered");
    return std::move(*out);
  }
  // Runs completions as they come until `pred` holds (10 s at most).
  template <typename Pred>
  void RunUntil(Pred pred) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!pred()) {
      {
        std::unique_lock lock(mu_);
        cv_.wait_until(lock, deadline, [&] { return !posted_.empty(); });
      }
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "condition not reached";
      RunPosted();
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> posted_;
};

}  // namespace delayd::store::testing
