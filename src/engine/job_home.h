// JobHome: where jobs live between transitions (doc/cluster.md, "Next", 1).
//
// The engine keeps clients, tubes, waiters, the transitions and the events,
// one path for both modes; what differs is where a job is kept while no
// transition holds it, and so how a waiter is served, how a write is
// guarded, and where peeks and counts are read. That is this interface:
//
//   LocalHome  (local_home.cc): memory and the horizon loader, over any
//              store (SQLite, PostgreSQL on one node). Jobs stay in memory;
//              a waiter takes the best of its tubes' ready heaps.
//   SharedHome (shared_home.cc): the database's rows, shared by every node
//              of a cluster. Memory holds only the jobs this node's clients
//              hold; a waiter is served by a claim, every write of a row is
//              guarded by the version it was read at, peeks and counts are
//              the database's.
//
// The engine calls its home where the two differ and nowhere else; each
// home reaches into the engine it serves (a friend) for the state both
// share. Threading: as the engine's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/api_types.h"
#include "engine/stats.h"
#include "engine/types.h"
#include "store/job_record.h"
#include "store/ownership.h"
#include "store/shared_queue.h"
#include "store/store.h"

namespace delayd::engine {

class JobHome {
 public:
  using Done = std::function<void(const Status&)>;
  template <class T>
  using Reply = std::function<void(Result<T>)>;

  virtual ~JobHome() = default;

  // Whether jobs live in a database shared with other nodes (the server
  // asks; the engine does not).
  virtual bool shared() const = 0;

  // --- recovery and ids ---
  // Rebuilds what the home keeps in memory from the store.
  virtual Status Recover() = 0;
  // Whether `n` new ids are at hand; if not, WaitIds before taking them.
  virtual bool IdsAtHand(size_t n) const = 0;
  // Runs `then` once `n` ids are at hand, or with the error that kept them.
  virtual void WaitIds(size_t n, Done then) = 0;
  // REQUIRES: IdsAtHand(1).
  virtual uint64_t NextId() = 0;

  // --- waiters and tubes ---
  // A reserve of `c` (Engine::Reserve).
  virtual void Reserve(Client* c, int64_t timeout_ms) = 0;
  // A pull job `j` became ready in `t`, or (j null) the tube resumed.
  virtual void Readied(Tube* t, const Job* j) = 0;
  // `c` stopped waiting.
  virtual void StoppedWaiting(Client* c) = 0;
  // A tube was made in memory.
  virtual void TubeMade(const std::string& name) = 0;
  // Notices heard from the database.
  virtual void Hear(const std::vector<store::Notice>& notices) = 0;

  // --- writes ---
  // Before `m`, a change of `j`, goes to the store.
  virtual void Guard(Job& j, store::Mutation& m) = 0;
  // A write of `j` failed with `s`: true when the home answered `done` and
  // `j` is to be let go (WriteDone), false to resync it from the store.
  virtual bool Refused(Job* j, const Status& s, const Done& done) = 0;
  // A change of a job this node's client held (Engine::WriteHeld).
  virtual void WriteHeld(Job* j, store::Mutation m, Done committed, Done reply) = 0;
  // Whether memory keeps `j` once its last write is answered.
  virtual bool Keeps(const Job& j) const = 0;
  // `id` left memory.
  virtual void Forgotten(uint64_t id) = 0;
  // A held job went back to ready (ttr ran out, its client hung up).
  virtual void Requeued(Job* j) = 0;
  // What a record of `j` adds (who holds it, until when).
  virtual void Stamp(const Job& j, store::JobRecord& r) const = 0;
  // reserve-job granted `j`: `done` once the reservation is where it lives.
  virtual void ReservedById(Job* j, Reply<JobView> done) = 0;
  // touch restarted `j`'s ttr.
  virtual void Touched(Job* j, Done done) = 0;
  // `j` was brought into memory for a transition that did not happen.
  virtual void Unused(Job* j) = 0;
  uint64_t held_write_failures() const { return held_write_failures_; }

  // --- jobs memory does not hold ---
  // Whether the store's record `r` is of a job memory does not hold.
  virtual bool IsFar(const store::JobRecord& r) const = 0;
  // The record `r` (IsFar) in memory for a transition `allowed` accepts.
  virtual Result<Job*> Bring(const store::JobRecord& r,
                             const std::function<bool(const Job&)>& allowed) = 0;
  // The buried job `id` (kConflict when not buried).
  virtual void FindBuried(uint64_t id, Reply<Job*> done) = 0;
  // beanstalk's kick of `c`'s used tube.
  virtual void Kick(Client* c, uint64_t bound, Reply<uint64_t> done) = 0;

  // --- reads ---
  virtual void PeekReady(Client* c, Reply<JobView> done) = 0;
  virtual void PeekBuried(Client* c, Reply<JobView> done) = 0;
  virtual void PeekDelayed(const std::string& tube, Reply<JobView> done) = 0;
  virtual void StatsTube(const std::string& name, Reply<TubeStats> done) = 0;
  virtual void Stats(Reply<EngineStats> done) = 0;
  virtual void TubeNames(Reply<std::vector<std::string>> done) = 0;
  // Every topic (`name` nullopt), or topic `name` alone (an empty list
  // when it has nothing).
  virtual void Topics(std::optional<std::string> name, Reply<std::vector<TopicInfo>> done) = 0;
  // Whether memory holds every reservation (a list of reserved jobs reads
  // memory, not the store).
  virtual bool ReservationsInMemory() const = 0;
  // Whether memory counts every delayed job per hour (the forecast).
  virtual bool CountsDueInMemory() const = 0;

  // --- push jobs ---
  // Whether the dispatcher may take the ready push job `j`.
  virtual bool Dispatchable(const Job& j) const = 0;
  // The dispatcher found no push job of `topic` to take.
  virtual void NoPushReady(const std::string& topic) = 0;
  virtual void SetOwnership(const store::Ownership& owned) = 0;
  virtual void ReturnClaimed() = 0;
  virtual size_t PushClaimsInFlight() const = 0;
  // The push retry timer fired.
  virtual void RetryPush() = 0;

 protected:
  uint64_t held_write_failures_ = 0;
};

}  // namespace delayd::engine
