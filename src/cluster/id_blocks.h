// IdBlocks: job ids for a node in cluster mode (doc/cluster.md, "Ids").
//
// Every node puts jobs, and no two may hand out one id, so a node takes ids
// in blocks that no other node is handed (SharedQueue::TakeIds) and hands
// them out one by one. The next block is taken while half of the current
// one is left, so a put finds an id at hand unless puts outrun the
// database; then it waits for the block (Wait). Ids rise within a node,
// not across nodes: they are names, and the order of jobs is (priority,
// id) within a node's puts only, as it is across beanstalkd connections.
//
// Threading: not thread-safe; every call, and every callback, runs on the
// thread that owns it (the server's event loop).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <utility>

#include "common/status.h"
#include "engine/shared_seams.h"
#include "store/shared_queue.h"

namespace delayd::cluster {

class IdBlocks final : public engine::IdSource {
 public:
  explicit IdBlocks(store::SharedQueue& queue, uint64_t block = 1024);
  IdBlocks(const IdBlocks&) = delete;
  IdBlocks& operator=(const IdBlocks&) = delete;

  // How many ids are at hand.
  uint64_t available() const override { return available_; }
  // The next id. REQUIRES: available() > 0.
  uint64_t Next() override;
  // Runs `then` once `n` ids are at hand (at once if they are), or with the
  // error of a block that could not be taken. Waiters are served in order;
  // `then` takes its ids at once (Next), before the next waiter is served.
  void Wait(uint64_t n, std::function<void(const Status&)> then) override;

 private:
  void Refill();
  void OnBlock(const Status& s);

  store::SharedQueue& queue_;
  const uint64_t block_;
  std::deque<std::pair<uint64_t, uint64_t>> ranges_;  // [first, end)
  uint64_t available_ = 0;
  bool taking_ = false;
  std::deque<std::pair<uint64_t, std::function<void(const Status&)>>> waiting_;
};

}  // namespace delayd::cluster
