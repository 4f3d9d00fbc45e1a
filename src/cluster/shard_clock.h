// ShardClock: the clock a node keeps for the shards it leases
// (doc/cluster.md, "The clock of a shard").
//
// In cluster mode a delayed job becomes ready by a write, not by a move in
// one node's memory: at its due millisecond the owner of its shard makes
// it ready with a fenced statement (change::PromoteDue), which announces the
// tube to every node. The clock holds the ids and due times of its shards'
// delayed jobs due within the horizon, loaded from the store when it takes a
// shard and, minute by minute, as time advances; delayed jobs written
// meanwhile, by any node, come as due notices. It also sweeps its shards'
// reservations whose deadline passed long ago (their node died) back to
// ready (change::RequeueExpired).
//
// The promotion also serves this node's own waiting consumers (when given
// a Claimer): it reserves for them, in the same statement, as many of the
// due jobs as they would take (Claimer::Wanted), so that the common case
// costs no notice, no claim and one row version fewer; the rest become
// ready for any node as before.
//
// A fenced write the database refuses means the lease moved: the clock
// drops the shard at once and counts the refusal. A write that failed for
// any other reason (a lost connection) is tried again after retry_ms.
//
// Which notices are kept, and why none is missed: a shard's load covers the
// minutes through `through_` (all loaded shards) or, while a load runs,
// through its last minute; a due notice is kept when its minute is within
// that bound. A job written before a load started is in the load; one
// written after is heard, since its notice comes after its commit and the
// bound already covers its minute; one due later is loaded by a later step.
// Entries are a set, so a job both loaded and heard is held once.
//
// Threading: not thread-safe; every call, and every callback of the store,
// runs on the thread that owns it (the server's event loop).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "cluster/claimer.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "store/ownership.h"
#include "store/shared_queue.h"
#include "store/store.h"

namespace delayd::cluster {

struct ShardClockOptions {
  // Delayed jobs due within this many ms are held (whole minutes, as the
  // store indexes by due minute). At most the store's due_notice_ms, which
  // decides which writes are announced.
  int64_t horizon_ms = 60'000;
  // How often the owned shards' expired reservations are swept, and how
  // long after its deadline a reservation is swept: its own node, if alive,
  // has returned it by then. Node clocks must agree within the grace.
  int64_t sweep_ms = 1000;
  int64_t sweep_grace_ms = 1000;
  // A write that failed other than by fencing is tried again after this.
  int64_t retry_ms = 200;
  size_t load_chunk = 2048;
};

struct ShardClockStats {
  size_t shards = 0;        // owned
  size_t pending = 0;       // owned, waiting for their (re)load
  size_t held = 0;          // due entries held
  uint64_t promoted = 0;    // jobs made ready by committed promotions
  uint64_t promotions = 0;  // promote writes committed (each of every owned shard's due ids)
  uint64_t reserved = 0;    // of the promoted, reserved at once for this node's waiters
  uint64_t fencing_refusals = 0;
  uint64_t write_errors = 0;  // failed for another reason, tried again
};

class ShardClock {
 public:
  // Called with the steady time (us) at which Tick() should next run, each
  // time that time moves earlier (as Engine's WakeFn).
  using WakeFn = std::function<void(int64_t steady_us)>;

  // `store`, `queue` and `clock` must outlive the clock.
  ShardClock(store::Store& store, store::SharedQueue& queue, const Clock& clock,
             ShardClockOptions options, WakeFn wake);
  ShardClock(const ShardClock&) = delete;
  ShardClock& operator=(const ShardClock&) = delete;

  // The leases held after a round (store::LeaseTable::Round): shards taken are loaded,
  // shards lost are dropped, a shard held at a new epoch is loaded again.
  void SetOwnership(const store::Ownership& now);
  // Notices heard (SharedQueue::Listen): due notices of owned shards are
  // kept; kListening (notices may have been missed) loads every shard again.
  void Hear(const std::vector<store::Notice>& notices);
  // Promotes what is due, sweeps and loads when their time comes.
  void Tick();

  ShardClockStats stats() const;
  // Records each promoted job's fire lateness in `metrics`, which must
  // outlive the clock.
  void SetMetrics(Metrics* metrics) { metrics_ = metrics; }
  // Promotions reserve due jobs for `claimer`'s waiters and hand them to it;
  // `claimer` must outlive the clock.
  void ServeWaiters(Claimer* claimer) { claimer_ = claimer; }

 private:
  using Entry = std::tuple<int64_t, int, uint64_t>;  // due ms, shard, id

  void Drop(int shard);
  // Marks `shard` to be loaded (again).
  void Pend(int shard);
  // Starts the next load if none runs and one is needed.
  void Load();
  // A chunk of the load `q` read; `gens` are the pending generations of a
  // first load's shards, empty for an extension.
  void OnChunk(store::DueQuery q, std::map<int, uint64_t> gens,
               Result<std::vector<store::DueEntry>> r);
  // One fenced write (a promotion, a sweep) for every owned shard it
  // concerns: one statement, however many shards (doc/cluster.md, "Next").
  void Promote(int64_t now_ms);
  void Sweep(int64_t now_ms);
  // The write of some owned shards, given their fences.
  using Write = std::function<store::Mutation(const std::vector<store::change::Fence>&)>;
  using Shards = std::function<void(const std::vector<int>&)>;
  // The shards whose write committed, and the jobs it reserved for this node.
  using Committed = std::function<void(const std::vector<int>&, std::vector<store::JobRecord>)>;
  // Submits write(fences of `shards`), owned, each once. `ok` gets the
  // shards whose write committed; `retry` those whose write failed other
  // than by fencing and which are still owned at the same epoch. A refusal
  // of several shards is written again shard by shard, so that only the
  // shards whose lease moved are dropped. `then` runs once every part is
  // answered.
  void Fenced(std::vector<int> shards, Write write, Committed ok, Shards retry,
              std::function<void()> then);
  // The minute through which due notices are kept.
  int64_t Bound() const;
  void Arm();
  int64_t SteadyAtWall(int64_t wall_ms) const;

  store::Store& store_;
  store::SharedQueue& queue_;
  const Clock& clock_;
  const ShardClockOptions options_;
  const WakeFn wake_;
  Metrics* metrics_ = nullptr;
  Claimer* claimer_ = nullptr;

  store::Ownership held_;         // as the last round left it
  std::map<int, int64_t> owned_;  // shard -> epoch: held_, less shards dropped on a refusal
  std::set<int> loaded_;          // owned, complete through through_
  // Owned, to be loaded through through_: shard -> the generation it was
  // marked at, so that a load that ran while it was marked again does not
  // count.
  std::map<int, uint64_t> pending_;
  uint64_t generation_ = 0;
  int64_t through_ = -1;  // due minute every loaded shard is complete through
  // The load running, and the minute it reads through.
  bool loading_ = false;
  int64_t loading_through_ = -1;
  int64_t load_after_us_ = 0;  // steady: no load before (after a failed one)
  std::set<Entry> due_;
  // Promotions in flight. Jobs that come due meanwhile wait for their
  // answers and then go in one promotion: a tick per due job, each its own
  // statement, once cost the writer more than 2,000 due jobs a second left
  // it (doc/cluster.md, "Next").
  size_t promoting_ = 0;
  int64_t next_sweep_us_ = 0;  // steady
  int64_t armed_us_ = INT64_MAX;
  ShardClockStats stats_;
};

}  // namespace delayd::cluster
