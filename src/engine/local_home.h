// LocalHome: jobs live in memory, delayed ones beyond the horizon in the
// store until the loader brings their minute in (engine.h, horizon.cc). The
// home of one node, on any store.
#pragma once

#include "engine/job_home.h"

namespace delayd::engine {

class Engine;

class LocalHome final : public JobHome {
 public:
  explicit LocalHome(Engine& e) : e_(e) {}

  bool shared() const override { return false; }
  Status Recover() override;
  bool IdsAtHand(size_t) const override { return true; }
  void WaitIds(size_t, Done then) override { then(Status::Ok()); }
  uint64_t NextId() override;

  void Reserve(Client* c, int64_t timeout_ms) override;
  void Readied(Tube* t, const Job* j) override;
  void StoppedWaiting(Client*) override {}
  void TubeMade(const std::string&) override {}
  void Hear(const std::vector<store::Notice>&) override {}

  void Guard(Job&, store::Mutation&) override {}
  bool Refused(Job*, const Status&, const Done&) override { return false; }
  void WriteHeld(Job* j, store::Mutation m, Done committed, Done reply) override;
  bool Keeps(const Job&) const override { return true; }
  void Forgotten(uint64_t) override {}
  void Requeued(Job*) override {}
  void Stamp(const Job&, store::JobRecord&) const override {}
  void ReservedById(Job* j, Reply<JobView> done) override;
  void Touched(Job*, Done done) override { done(Status::Ok()); }
  void Unused(Job*) override {}

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
  bool ReservationsInMemory() const override { return true; }
  bool CountsDueInMemory() const override { return true; }

  bool Dispatchable(const Job&) const override { return true; }
  void NoPushReady(const std::string&) override {}
  void SetOwnership(const store::Ownership&) override {}
  void ReturnClaimed() override {}
  size_t PushClaimsInFlight() const override { return 0; }
  void RetryPush() override {}

 private:
  Engine& e_;
};

}  // namespace delayd::engine
