#include "cluster/id_blocks.h"

#include <algorithm>

namespace delayd::cluster {

IdBlocks::IdBlocks(store::SharedQueue& queue, uint64_t block)
    : queue_(queue), block_(std::max<uint64_t>(block, 2)) {}

uint64_t IdBlocks::Next() {
  auto& [first, end] = ranges_.front();
  const uint64_t id = first++;
  if (first == end) ranges_.pop_front();
  --available_;
  Refill();
  return id;
}

void IdBlocks::Wait(uint64_t n, std::function<void(const Status&)> then) {
  if (waiting_.empty() && available_ >= n) return then(Status::Ok());
  waiting_.emplace_back(n, std::move(then));
  Refill();
}

void IdBlocks::Refill() {
  if (taking_) return;
  // Waiters first in line ask for this much, beside the half block kept.
  uint64_t wanted = block_ / 2;
  for (const auto& [n, then] : waiting_) wanted += n;
  if (available_ >= wanted) return;
  taking_ = true;
  const uint64_t count = std::max(block_, wanted - available_);
  queue_.TakeIds(count, [this, count](Result<uint64_t> first) {
    if (first.ok()) {
      ranges_.emplace_back(*first, *first + count);
      available_ += count;
    }
    taking_ = false;
    OnBlock(first.status());
  });
}

void IdBlocks::OnBlock(const Status& s) {
  if (!s.ok()) {
    // Every waiter hears of it; the next Wait or Next tries again.
    auto waiting = std::move(waiting_);
    waiting_.clear();
    for (auto& [n, then] : waiting) then(s);
    return;
  }
  while (!waiting_.empty() && available_ >= waiting_.front().first) {
    auto then = std::move(waiting_.front().second);
    waiting_.pop_front();
    then(Status::Ok());
  }
  Refill();
}

}  // namespace delayd::cluster
