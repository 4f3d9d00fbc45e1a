// Member: this node's part in the cluster's membership (doc/cluster.md).
//
// On a thread of its own, with a lease table of its own (store/lease_table.h),
// a member runs a lease round every lease/3 and hands the leases it holds
// after each to the event loop, where the shard clock takes them
// (as a store::Ownership, ShardClock::SetOwnership). With each round it records the node's
// addresses and figures in its row of the table, for the cluster view.
//
// A round that fails (the database is unreachable) changes nothing, and the
// leases held at the last good round stay valid until that round's start
// plus one lease, by the database's clock, which runs no earlier than ours.
// Once another round could not end before then, the member hands on no
// leases at all: the node stops acting as an owner on its own, before the
// database would refuse it (fencing) anyway.
//
// Leave() is the clean stop: the rounds end and every lease is given up at
// once, so the others take the shards at their next round rather than after
// the lease runs out. Destroying a member without Leave() is a crash, as
// far as the others can tell.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/executor.h"
#include "common/status.h"
#include "store/lease_table.h"

namespace delayd::cluster {

// Where clients reach this node, for the cluster view ("host:port").
struct MemberOptions {
  std::string beanstalk = {};
  std::string http = {};
  // The steady time a lease's validity is counted on; null: the system's.
  // Read on the member's thread, so it must be safe to read from any
  // thread, and outlive the member.
  const Clock* clock = nullptr;
};

struct MemberStats {
  uint64_t rounds = 0;
  uint64_t failed_rounds = 0;
};

class Member {
 public:
  using LeasesFn = std::function<void(std::vector<store::Lease>)>;

  // Starts the rounds on `table` (the first at once); `on_leases` runs
  // through `executor` after each round whose leases differ from the last
  // handed on. The node's id and lease come from the table's options.
  static Result<std::unique_ptr<Member>> Start(std::unique_ptr<store::LeaseTable> table,
                                               MemberOptions options, Executor executor,
                                               LeasesFn on_leases);
  ~Member();
  Member(const Member&) = delete;
  Member& operator=(const Member&) = delete;

  // The figures recorded with the next rounds: a JSON object.
  void SetFigures(std::string json);
  // Reads the cluster view on the member's thread; `done` runs through the
  // executor.
  void View(std::function<void(Result<store::ClusterView>)> done);
  // Ends the rounds and gives every lease up at once. Call after the node's
  // last write as an owner.
  Status Leave();

  MemberStats stats() const { return {rounds_.load(), failed_rounds_.load()}; }
  const std::string& node_id() const { return table_->options().node_id; }

 private:
  Member(std::unique_ptr<store::LeaseTable> table, MemberOptions options, Executor executor,
         LeasesFn on_leases);
  void Loop();
  void RoundNow();
  void Stop();

  // The thread's (Start's before, Leave's after).
  const std::unique_ptr<store::LeaseTable> table_;
  const int64_t lease_ms_;
  const MemberOptions options_;
  const Clock& clock_;
  const Executor executor_;
  const LeasesFn on_leases_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::deque<std::function<void()>> work_;  // views to read
  std::string figures_;

  // The thread's: the last leases handed on, and when the last good round
  // started (steady us).
  std::vector<store::Lease> handed_;
  bool handed_any_ = false;
  int64_t good_start_us_ = 0;
  bool failing_ = false;  // logged once per run of failed rounds

  std::atomic<uint64_t> rounds_{0};
  std::atomic<uint64_t> failed_rounds_{0};
  std::thread thread_;
};

}  // namespace delayd::cluster
