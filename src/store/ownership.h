// Ownership: the shards this node owns after a lease round, each with the
// epoch it holds it at (store/lease_table.h). cluster::Member hands one to
// every part that acts as a shard's owner (the shard clock, the timers,
// push); each asks what changed since the last one (Since) and fences its
// writes with FenceFor. One value, one diff: the parts cannot disagree on
// what was lost or taken again.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "store/lease_table.h"
#include "store/store.h"

namespace delayd::store {

class Ownership {
 public:
  // What changed between two ownerships, by shard, ascending.
  struct Change {
    std::vector<int> lost;    // held before, not now
    std::vector<int> gained;  // held now, not before
    // Held before and now, at a new epoch: the lease was lost and taken
    // again between two rounds, so another owner may have changed the shard
    // meanwhile, unheard. Act as for a shard gained.
    std::vector<int> retaken;
  };

  Ownership() = default;
  explicit Ownership(const std::vector<Lease>& held) {
    for (const Lease& l : held) epochs_[l.shard] = l.epoch;
  }

  bool empty() const { return epochs_.empty(); }
  bool Owns(int shard) const { return epochs_.count(shard) != 0; }
  // The fence of a write made as `shard`'s owner; none if it is not owned.
  std::optional<change::Fence> FenceFor(int shard) const {
    auto it = epochs_.find(shard);
    if (it == epochs_.end()) return std::nullopt;
    return change::Fence{shard, it->second};
  }
  const std::map<int, int64_t>& epochs() const { return epochs_; }
  std::vector<int> shards() const {
    std::vector<int> out;
    for (const auto& [shard, epoch] : epochs_) out.push_back(shard);
    return out;
  }

  Change Since(const Ownership& before) const {
    Change c;
    for (const auto& [shard, epoch] : before.epochs_) {
      if (epochs_.count(shard) == 0) c.lost.push_back(shard);
    }
    for (const auto& [shard, epoch] : epochs_) {
      auto it = before.epochs_.find(shard);
      if (it == before.epochs_.end()) {
        c.gained.push_back(shard);
      } else if (it->second != epoch) {
        c.retaken.push_back(shard);
      }
    }
    return c;
  }

  bool operator==(const Ownership&) const = default;

 private:
  std::map<int, int64_t> epochs_;
};

}  // namespace delayd::store
