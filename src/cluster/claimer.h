// Claimer: how a node's waiting consumers get ready jobs in cluster mode
// (doc/cluster.md, "Claims and waiting consumers").
//
// The ready jobs are rows that every node claims from (SharedQueue::Claim),
// so a waiter is served by a claim, and a claim is made when one may find
// something: when the waiter starts waiting, and when a notice says a tube
// it watches has ready jobs (any node's put, release, kick, promotion or
// requeue) or was changed (a resume). Waiters that watch the same tubes form a group, served by one
// claim for up to as many jobs as the group has waiters, first come first
// served; a burst of due jobs costs a claim per group, not one per job.
//
// No wake-up is lost: a group has at most one claim in flight, and a
// notice heard meanwhile (whose commit that claim may not have seen) makes
// it claim again once the claim is answered. kListening (notices may have
// been missed) claims for every group. A claim that failed (a lost
// connection) is made again after retry_ms. A job claimed for a waiter
// that stopped waiting meanwhile goes back to ready at once, its
// reservation uncounted, guarded by the version the claim gave it.
//
// Known empty: a claim that came back with fewer jobs than it asked for,
// with no notice heard while it was in flight, left none ready in its tubes
// (it took every one it found). Until a notice names such a tube (every
// change that makes a job ready announces its tube after committing), a
// waiter whose tubes are all known empty waits without claiming: a serial
// consumer would otherwise make a claim that finds nothing before each job.
// A claim finds a paused tube empty too, and a pause that runs out is not
// announced: the engine says so (Resumed). The knowledge lasts empty_ms,
// and a group left waiting on it claims again then: a job a claim skipped
// because another transaction held its row, which then rolled back, is
// ready with no notice to come (NOTIFY is transactional).
//
// Claiming ahead: a beanstalk connection has one reserve waiting at a time,
// so consumers that reserve, delete and reserve again would each cost a
// claim round trip. While a group's waiters keep coming back (one was
// served within spare_ms), its claims take up to `prefetch` jobs more than
// it has waiters; the next waiters get those at once. A job claimed ahead
// and not handed out within spare_ms goes back to ready. Its reservation's
// deadline counts from the claim, so it runs out up to spare_ms before the
// holder's own count does: well within the owners' sweep grace.
//
// Threading: not thread-safe; every call, and every callback, runs on the
// thread that owns it (the server's event loop).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "engine/shared_seams.h"
#include "store/shared_queue.h"
#include "store/store.h"

namespace delayd::cluster {

struct ClaimerOptions {
  size_t max_per_claim = 64;  // jobs per claim at most
  int64_t retry_ms = 200;     // after a failed claim
  size_t prefetch = 16;       // jobs claimed ahead per busy group, at most
  int64_t spare_ms = 100;     // how long a job claimed ahead waits for a waiter
  int64_t empty_ms = 1000;    // how long a tube a claim found empty is known empty
};

struct ClaimerStats {
  size_t waiters = 0;
  uint64_t claims = 0;    // claims made
  uint64_t granted = 0;   // jobs handed to waiters
  uint64_t returned = 0;  // jobs claimed for nobody and put back
  size_t spares = 0;      // jobs claimed ahead, not yet handed out
  size_t in_flight = 0;   // claims made and not answered yet
  uint64_t failures = 0;  // claims that failed, made again
};

class Claimer final : public engine::Claims {
 public:
  using WakeFn = std::function<void(int64_t steady_us)>;

  Claimer(store::Store& store, store::SharedQueue& queue, const Clock& clock,
          ClaimerOptions options, WakeFn wake);
  Claimer(const Claimer&) = delete;
  Claimer& operator=(const Claimer&) = delete;

  // Waits for a ready job of `tubes`, each claimed with a ttr deadline from
  // the claim's time. `granted` runs once, unless Cancel comes first; with a
  // job claimed ahead at hand it runs before Wait returns, and Wait returns
  // 0 (no waiter to cancel).
  WaiterId Wait(std::vector<std::string> tubes, Granted granted) override;
  // A job of `tubes` claimed ahead, if one is at hand (a reserve that will
  // not wait looks here before claiming).
  std::optional<store::JobRecord> TakeSpare(std::vector<std::string> tubes) override;
  // Stops waiting; a job claimed for it later goes back to ready.
  void Cancel(WaiterId id) override;
  void Hear(const std::vector<store::Notice>& notices);
  // Per tube, how many jobs this node's waiters would take now, with what
  // busy groups claim ahead (a waiter of several tubes counts for each):
  // what the owner's promotion reserves for this node
  // (change::PromoteDue::claim_for).
  std::vector<std::pair<std::string, int64_t>> Wanted() const;
  // Jobs reserved for this node by a promotion: each to the oldest waiter
  // of a group watching its tube, else kept as a busy group's spare, else
  // returned.
  void Take(std::vector<store::JobRecord> jobs);
  // While held (a promotion sized by Wanted is in flight), neither a notice
  // nor a claim whose time came (Tick) makes a claim: the promotion's answer
  // may serve those waiters, and a claim made before it would take the jobs
  // it left to others. Released, the groups that heard one (or whose claim
  // came due) claim, if they still wait. Call Take first.
  void Hold(bool held);
  // Makes the claims that failed, and those of groups whose tubes' known
  // emptiness ran out, that are due.
  void Tick();
  // Puts a job claimed for nobody back to ready, its reservation uncounted,
  // guarded by the version the claim gave it.
  void Return(store::JobRecord j) override;
  // Forgets that `tube` is known empty (a claim may have found it paused):
  // its groups' next waiters claim at once.
  void Resumed(const std::string& tube) override;

  ClaimerStats stats() const;

 private:
  struct Group {
    std::vector<std::string> tubes;  // sorted, distinct
    std::deque<WaiterId> waiters;    // in arrival order
    bool claiming = false;
    size_t asked = 0;         // jobs the claim in flight asked for
    bool again = false;       // a notice or a waiter came while claiming
    bool heard = false;       // a notice came while held
    int64_t retry_at_us = 0;  // steady; 0: no claim again pending (failed, known empty)
    // Jobs claimed ahead, oldest first, with when they were claimed (steady).
    std::deque<std::pair<store::JobRecord, int64_t>> spares;
    int64_t served_us = 0;  // steady: when a waiter was last served
    bool drained = false;   // the last claim found fewer jobs than it asked for
  };

  // The group key of `tubes` (sorted, distinct on return).
  static std::string KeyOf(std::vector<std::string>& tubes);
  // Takes `g`'s oldest spare, if any.
  std::optional<store::JobRecord> Spare(const std::string& key);
  // Whether `g` is busy enough to claim ahead for.
  bool Busy(const Group& g) const;
  void MaybeErase(const std::string& key);

  // How many jobs `g` would take now: its waiters, and its room for spares
  // when it is busy.
  size_t Want(const Group& g) const;
  // Hands `j` to `g`'s oldest waiter, which must exist.
  void Grant(Group& g, store::JobRecord j, int64_t now_us);
  void Claim(const std::string& key);
  void OnClaimed(const std::string& key, Result<std::vector<store::JobRecord>> r);
  void Arm();

  store::Store& store_;
  store::SharedQueue& queue_;
  const Clock& clock_;
  const ClaimerOptions options_;
  const WakeFn wake_;

  // Until when (steady) every tube of `tubes` is known empty; 0 if one is
  // not.
  int64_t KnownEmptyUntil(const std::vector<std::string>& tubes) const;

  std::map<std::string, Group> groups_;   // by their tubes, joined
  std::map<std::string, int64_t> empty_;  // tubes known empty (above), until (steady)
  std::unordered_map<WaiterId, std::pair<std::string, Granted>> waiters_;  // group key
  WaiterId next_id_ = 1;
  bool held_ = false;
  int64_t armed_us_ = INT64_MAX;
  ClaimerStats stats_;
};

}  // namespace delayd::cluster
