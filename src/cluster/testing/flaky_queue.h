// Test support: a SharedQueue that fails the next calls it is told to, as a
// lost connection would (kIoError, answered through the executor), and
// passes every other call to the real queue. It lets the components' retry
// paths run against a real database.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/executor.h"
#include "store/shared_queue.h"

namespace delayd::cluster::testing {

class FlakyQueue final : public store::SharedQueue {
 public:
  FlakyQueue(store::SharedQueue& real, Executor executor)
      : real_(real), executor_(std::move(executor)) {}

  // How many of the next calls of each kind fail.
  std::atomic<int> fail_claims{0};
  std::atomic<int> fail_dues{0};
  std::atomic<int> fail_takes{0};

  const std::string& node_id() const override { return real_.node_id(); }
  int shards() const override { return real_.shards(); }
  int ShardOf(const store::JobRecord& j) const override { return real_.ShardOf(j); }
  void Claim(store::ClaimQuery q,
             std::function<void(Result<std::vector<store::JobRecord>>)> done) override {
    if (Fail(fail_claims, done)) return;
    real_.Claim(std::move(q), std::move(done));
  }
  void Due(store::DueQuery q,
           std::function<void(Result<std::vector<store::DueEntry>>)> done) override {
    if (Fail(fail_dues, done)) return;
    real_.Due(std::move(q), std::move(done));
  }
  void TakeIds(uint64_t n, std::function<void(Result<uint64_t>)> done) override {
    if (Fail(fail_takes, done)) return;
    real_.TakeIds(n, std::move(done));
  }
  Result<std::optional<store::JobRecord>> BestReady(const std::string& tube) override {
    return real_.BestReady(tube);
  }
  Result<std::vector<store::TubeCount>> CountJobs(std::optional<std::string> tube) override {
    return real_.CountJobs(std::move(tube));
  }
  Result<std::vector<store::TubeRow>> Tubes(std::optional<std::string> tube) override {
    return real_.Tubes(std::move(tube));
  }
  Status Listen(std::function<void(std::vector<store::Notice>)> fn) override {
    return real_.Listen(std::move(fn));
  }
  Result<std::vector<std::string>> PushTubes(const std::vector<int>& shards) override {
    return real_.PushTubes(shards);
  }
  Result<std::vector<store::TimerRecord>> TimersDueOf(const std::vector<int>& shards,
                                                      int64_t from_ms, uint64_t after_id,
                                                      int64_t before_ms, size_t limit) override {
    return real_.TimersDueOf(shards, from_ms, after_id, before_ms, limit);
  }
  int TimerShardOf(uint64_t id) const override { return real_.TimerShardOf(id); }
  void TakeTimerId(std::function<void(Result<uint64_t>)> done) override {
    if (Fail(fail_takes, done)) return;
    real_.TakeTimerId(std::move(done));
  }

 private:
  template <class Done>
  bool Fail(std::atomic<int>& left, Done& done) {
    if (left.load() <= 0) return false;
    --left;
    executor_([done = std::move(done)] { done(Status::IoError("injected: connection lost")); });
    return true;
  }

  store::SharedQueue& real_;
  Executor executor_;
};

}  // namespace delayd::cluster::testing
