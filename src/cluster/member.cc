#include "cluster/member.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "common/thread_name.h"

namespace delayd::cluster {

Member::Member(std::unique_ptr<store::LeaseTable> table, MemberOptions options, Executor executor,
               LeasesFn on_leases)
    : table_(std::move(table)),
      lease_ms_(table_->options().lease_ms),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : TheSystemClock()),
      executor_(std::move(executor)),
      on_leases_(std::move(on_leases)) {}

Result<std::unique_ptr<Member>> Member::Start(std::unique_ptr<store::LeaseTable> table,
                                              MemberOptions options, Executor executor,
                                              LeasesFn on_leases) {
  if (table == nullptr) return Status::InvalidArgument("cluster: no lease table");
  if (table->options().node_id.empty()) {
    return Status::InvalidArgument("cluster: a node id is required");
  }
  if (table->options().lease_ms < 300) {
    return Status::InvalidArgument("cluster: the lease must be at least 300 ms");
  }
  std::unique_ptr<Member> m(
      new Member(std::move(table), std::move(options), std::move(executor), std::move(on_leases)));
  m->thread_ = StartNamedThread("cluster-member", [p = m.get()] { p->Loop(); });
  return m;
}

Member::~Member() { Stop(); }

void Member::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Member::SetFigures(std::string json) {
  std::lock_guard lock(mu_);
  figures_ = std::move(json);
}

void Member::View(std::function<void(Result<store::ClusterView>)> done) {
  auto read = [this, done = std::move(done)] {
    auto view = std::make_shared<Result<store::ClusterView>>(table_->View());
    executor_([view, done] { done(std::move(*view)); });
  };
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      work_.push_back(std::move(read));
      cv_.notify_all();
      return;
    }
  }
  executor_([done] { done(Status::Unavailable("cluster: the member has stopped")); });
}

Status Member::Leave() {
  Stop();
  Status s = table_->Leave();
  if (s.ok()) spdlog::info("cluster: node {} left, its leases given up", node_id());
  return s;
}

// The rounds' pace is kept on the condition variable's steady clock; what a
// lease's validity is counted on is clock_ (RoundNow).
void Member::Loop() {
  const auto interval = std::chrono::microseconds(lease_ms_ * 1000 / 3);
  auto next = std::chrono::steady_clock::now();
  for (;;) {
    std::function<void()> work;
    {
      std::unique_lock lock(mu_);
      cv_.wait_until(lock, next, [&] { return stopping_ || !work_.empty(); });
      if (stopping_) return;
      if (!work_.empty()) {
        work = std::move(work_.front());
        work_.pop_front();
      }
    }
    if (work) {
      work();
      continue;
    }
    if (std::chrono::steady_clock::now() < next) continue;
    next = std::chrono::steady_clock::now() + interval;
    RoundNow();
  }
}

void Member::RoundNow() {
  const int64_t start_us = clock_.SteadyMicros();
  Result<std::vector<store::Lease>> held = table_->Round();
  ++rounds_;
  std::vector<store::Lease> hand;
  if (held.ok()) {
    if (failing_) spdlog::info("cluster: lease rounds work again");
    failing_ = false;
    good_start_us_ = start_us;
    hand = std::move(held).value();
    store::NodeCard card{.beanstalk = options_.beanstalk, .http = options_.http};
    {
      std::lock_guard lock(mu_);
      card.figures = figures_;
    }
    // The view's part of the row; a failure here costs only the view.
    (void)table_->Describe(card);
  } else {
    ++failed_rounds_;
    if (!failing_) {
      spdlog::warn("cluster: a lease round failed: {}", held.status().ToString());
    }
    failing_ = true;
    // Valid until the last good round's start plus a lease; if the next
    // round might not end before then, hold nothing from now on.
    const int64_t until_us = good_start_us_ + lease_ms_ * 1000;
    if (good_start_us_ != 0 && clock_.SteadyMicros() + lease_ms_ * 1000 / 3 < until_us) return;
  }
  if (handed_any_ && hand == handed_) return;
  handed_ = hand;
  handed_any_ = true;
  executor_([fn = on_leases_, hand = std::move(hand)]() mutable { fn(std::move(hand)); });
}

}  // namespace delayd::cluster
