// Member: this node's part in the cluster's membership (doc/cluster.md).
//
// On a thread and a connection of its own, a member runs a lease round
// (Leases::Round) every lease/3 and hands the leases it holds after each to
// the event loop, where the shard clock takes them (ShardClock::SetLeases).
// With each round it records the node's addresses and figures in its row of
// `nodes`, for the cluster view.
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

#include "cluster/leases.h"
#include "common/executor.h"
#include "common/status.h"

namespace delayd::cluster {

struct MemberOptions {
  std::string conninfo;
  std::string node_id;
  int64_t lease_ms = 3000;
  // Where clients reach this node, for the cluster view ("host:port").
  std::string beanstalk = {};
  std::string http = {};
};

// The cluster as the database has it (GET /v1/cluster).
struct NodeView {
  std::string id;
  int64_t started_ms = 0;
  int64_t seen_ms = 0;
  bool live = false;  // seen within one lease
  std::string beanstalk;
  std::string http;
  std::string figures;  // a JSON object, or empty
  size_t shards = 0;    // leases held that have not run out
};
struct ShardView {
  int shard = 0;
  std::string owner;  // empty: free
  int64_t epoch = 0;
  int64_t expires_ms = 0;  // 0: free
  bool live = false;       // an owner whose lease has not run out
};
struct ClusterView {
  int64_t now_ms = 0;  // the database's clock
  std::vector<NodeView> nodes;
  std::vector<ShardView> shards;
};

struct MemberStats {
  uint64_t rounds = 0;
  uint64_t failed_rounds = 0;
};

class Member {
 public:
  using LeasesFn = std::function<void(std::vector<Lease>)>;

  // Connects and starts the rounds (the first at once); `on_leases` runs
  // through `executor` after each round whose leases differ from the last
  // handed on.
  static Result<std::unique_ptr<Member>> Start(MemberOptions options, Executor executor,
                                               LeasesFn on_leases);
  ~Member();
  Member(const Member&) = delete;
  Member& operator=(const Member&) = delete;

  // The figures recorded with the next rounds: a JSON object.
  void SetFigures(std::string json);
  // Reads the cluster view on the member's thread; `done` runs through the
  // executor.
  void View(std::function<void(Result<ClusterView>)> done);
  // Ends the rounds and gives every lease up at once. Call after the node's
  // last write as an owner.
  Status Leave();

  MemberStats stats() const { return {rounds_.load(), failed_rounds_.load()}; }
  const MemberOptions& options() const { return options_; }

 private:
  Member(MemberOptions options, Executor executor, LeasesFn on_leases);
  void Loop();
  void RoundNow();
  // The connection, made again if it broke; null when it cannot be.
  store::pg::PgConn* Conn();
  Result<ClusterView> ReadView();
  void Stop();

  const MemberOptions options_;
  const Executor executor_;
  const LeasesFn on_leases_;
  Leases leases_;
  std::unique_ptr<store::pg::PgConn> conn_;  // the thread's (Start and Leave's before and after)

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::deque<std::function<void()>> work_;  // views to read
  std::string figures_;

  // The thread's: the last leases handed on, and when the last good round
  // started (steady us).
  std::vector<Lease> handed_;
  bool handed_any_ = false;
  int64_t good_start_us_ = 0;
  bool failing_ = false;  // logged once per run of failed rounds

  std::atomic<uint64_t> rounds_{0};
  std::atomic<uint64_t> failed_rounds_{0};
  std::thread thread_;
};

}  // namespace delayd::cluster
