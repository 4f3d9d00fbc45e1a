// What the engine needs in cluster mode that lives above it (doc/cluster.md):
// claims that serve this node's waiting consumers (cluster::Claimer) and
// job ids no other node hands out (cluster::IdBlocks). The engine owns
// these interfaces, so that cluster/ sits above the engine and the engine
// neither includes nor links it.
//
// Threading: as the engine's: every call, and every callback, runs on the
// thread that owns the engine.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/job_record.h"

namespace delayd::engine {

class Claims {
 public:
  using WaiterId = uint64_t;
  // A job claimed for the waiter: kReserved by this node, with its version.
  using Granted = std::function<void(store::JobRecord)>;

  virtual ~Claims() = default;
  // Waits for a ready job of `tubes`. `granted` runs once, unless Cancel
  // comes first; with a job claimed ahead at hand it runs before Wait
  // returns, and Wait returns 0 (no waiter to cancel).
  virtual WaiterId Wait(std::vector<std::string> tubes, Granted granted) = 0;
  // A job of `tubes` claimed ahead, if one is at hand.
  virtual std::optional<store::JobRecord> TakeSpare(std::vector<std::string> tubes) = 0;
  // Stops waiting; a job claimed for it later goes back to ready.
  virtual void Cancel(WaiterId id) = 0;
  // Puts a job claimed for nobody back to ready, its reservation uncounted.
  virtual void Return(store::JobRecord j) = 0;
  // `tube`'s pause ended here (it ran out, or a resume was heard), which no
  // notice announces when it runs out: what a claim made during the pause
  // found says nothing of the tube now.
  virtual void Resumed(const std::string& tube) = 0;
};

class IdSource {
 public:
  virtual ~IdSource() = default;
  // How many ids are at hand.
  virtual uint64_t available() const = 0;
  // The next id. REQUIRES: available() > 0.
  virtual uint64_t Next() = 0;
  // Runs `then` once `n` ids are at hand (at once if they are), or with the
  // error that kept them; `then` takes its ids at once.
  virtual void Wait(uint64_t n, std::function<void(const Status&)> then) = 0;
};

}  // namespace delayd::engine
