// SharedHome: jobs live in the database's rows, shared by every node of a
// cluster (doc/cluster.md, "The engine in cluster mode"). Memory holds
// clients, tubes, waiters and the jobs this node's clients hold, each with
// the row version its claim or read gave it:
//
// - a waiter is served by a claim (engine::Claims, which cluster::Claimer
//   implements) and a put takes its id from a block (engine::IdSource:
//   cluster::IdBlocks);
// - every write of a job read from the database is guarded by the version
//   it was read at: a job another node changed meanwhile answers
//   kNotFound, as beanstalkd answers for a reservation that ran out;
// - a job a transition brings into memory (a kick, a delete) leaves it once
//   its write is answered;
// - peeks and counts are read from the database: `stats` counts the
//   cluster's jobs; the counters of commands (total-jobs, cmd-*,
//   job-timeouts) are this node's;
// - push jobs of the shards this node owns are claimed for its dispatcher
//   (shared_home_push.cc).
#pragma once

#include <map>
#include <memory>
#include <unordered_map>
#include <utility>

#include "engine/job_home.h"
#include "engine/shared_seams.h"

namespace delayd::engine {

class Engine;

class SharedHome final : public JobHome {
 public:
  // All three must outlive the home.
  SharedHome(Engine& e, store::SharedQueue& queue, Claims& claims, IdSource& ids);

  bool shared() const override { return true; }
  Status Recover() override;
  bool IdsAtHand(size_t n) const override { return ids_.available() >= n; }
  void WaitIds(size_t n, Done then) override { ids_.Wait(n, std::move(then)); }
  uint64_t NextId() override { return ids_.Next(); }

  void Reserve(Client* c, int64_t timeout_ms) override;
  void Readied(Tube* t, const Job* j) override;
  void StoppedWaiting(Client* c) override;
  void TubeMade(const std::string& name) override { ReadTubes(name); }
  void Hear(const std::vector<store::Notice>& notices) override;

  void Guard(Job& j, store::Mutation& m) override;
  bool Refused(Job* j, const Status& s, const Done& done) override;
  void WriteHeld(Job* j, store::Mutation m, Done committed, Done reply) override;
  bool Keeps(const Job& j) const override;
  void Forgotten(uint64_t id) override;
  void Requeued(Job* j) override;
  void Stamp(const Job& j, store::JobRecord& r) const override;
  void ReservedById(Job* j, Reply<JobView> done) override;
  void Touched(Job* j, Done done) override;
  void Unused(Job* j) override;

  bool IsFar(const store::JobRecord& r) const override;
  Result<Job*> Bring(const store::JobRecord& r,
                     const std::function<bool(const Job&)>& allowed) override;
  void FindBuried(uint64_t id, Reply<Job*> done) override;
  void Kick(Client* c, uint64_t bound, Reply<uint64_t> done) override;

  void PeekReady(Client* c, Reply<JobView> done) override;
  void PeekBuried(Client* c, Reply<JobView> done) override;
  void PeekDelayed(const std::string& tube, Reply<JobView> done) override;
  void StatsTube(const std::string& name, Reply<TubeStats> done) override;
  void Stats(Reply<EngineStats> done) override;
  void TubeNames(Reply<std::vector<std::string>> done) override;
  void Topics(std::optional<std::string> name, Reply<std::vector<TopicInfo>> done) override;
  bool ReservationsInMemory() const override { return false; }
  bool CountsDueInMemory() const override { return false; }

  bool Dispatchable(const Job& j) const override;
  void NoPushReady(const std::string& topic) override { ClaimPush(topic); }
  void SetOwnership(const store::Ownership& owned) override;
  void ReturnClaimed() override;
  size_t PushClaimsInFlight() const override;
  void RetryPush() override;

 private:
  // The watched tubes a claim may take from (not paused).
  std::vector<std::string> ClaimTubes(const Client* c) const;
  // (Re)starts the claims of a waiting client, after its tubes' pauses
  // changed.
  void Claim(Client* c);
  void Rewait(Tube* t);
  // A job claimed for `c` (a waiter, or a one-shot claim): held by it, or
  // returned if it stopped waiting.
  void Adopt(Client* c, store::JobRecord r);
  // A row brought into memory in its stored state, for a transition.
  Job* AdoptRow(const store::JobRecord& r);
  // Drops a job adopted for a transition that did not happen.
  void Unadopt(Job* j);
  // A tube's stored pause and settings, read again.
  void TakeTube(const store::TubeRow& row);
  void ReadTubes(std::optional<std::string> name);
  // The database's job counts of `tube`, or of every tube.
  void Count(std::optional<std::string> tube, Reply<std::vector<store::TubeCount>> done);

  // Push jobs (shared_home_push.cc): the topics whose push jobs a claim
  // should look for, claims for the dispatcher, and their retries.
  void ReadPushTubes(std::vector<int> shards);
  void WantPush(const std::string& topic);
  void EmitPushReady(const std::string& topic);
  void ClaimPush(const std::string& topic);
  void PushClaimed(const std::string& topic, size_t limit,
                   Result<std::vector<store::JobRecord>> rows);
  void ScheduleRetry();

  Engine& e_;
  store::SharedQueue& queue_;
  Claims& claims_;
  IdSource& ids_;
  std::unique_ptr<Client> remote_holder_;  // holds jobs adopted reserved by another node
  // Claims answered for a client while the job was still in memory (a write
  // of it pending): adopted once it leaves.
  std::unordered_map<uint64_t, std::pair<Client*, store::JobRecord>> adopt_after_;
  store::Ownership owned_;  // shards this node owns (their push jobs are its own)
  // Per topic whose push jobs this node claims: a claim is in flight, or
  // another is wanted (a notice came, or the last claim came back full).
  struct PushClaims {
    bool claiming = false;
    bool more = false;
  };
  std::map<std::string, PushClaims> push_claims_;
  bool push_rescan_ = false;  // the push topics of owned shards must be read again
};

}  // namespace delayd::engine
