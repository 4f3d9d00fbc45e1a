// BulkOps: one action on every job a filter matches (POST /v1/bulk): cancel,
// retry, kick, run now, or reschedule (shift the due time, or set it).
//
// An operation walks the filter's matches in id order, a chunk at a time
// (Engine::List with the operation's cursor), and applies the action to
// each job of the chunk through the engine's own calls, so every change is
// exactly what the one-job routes make and is durable before it counts.
// The next chunk starts once every change of the last is answered, so an
// operation interrupted anywhere (stopped, or the server stopped) has
// applied whole chunks and perhaps part of one, each change complete, none
// half-made; running it again takes up what still matches. A job that no
// longer allows the action when its turn comes (reserved meanwhile, gone)
// is counted as skipped. A dry run only counts the matches.
//
// Operations live in memory: the last kKeep are kept for their progress.
//
// Threading: event loop thread only (the engine's).
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "engine/engine.h"

namespace delayd::http {

enum class BulkAction : uint8_t { kCancel, kRetry, kKick, kRunNow, kReschedule };
std::string_view BulkActionName(BulkAction a);
std::optional<BulkAction> ParseBulkAction(std::string_view name);

struct BulkRequest {
  BulkAction action = BulkAction::kCancel;
  engine::ListFilter filter;  // its cursor and limit are the operation's own
  bool dry_run = false;
  std::optional<int64_t> shift_ms;   // reschedule: due time moved by this (never before now)
  std::optional<int64_t> due_at_ms;  // reschedule: due time set to this
  uint64_t max_jobs = 0;             // stop after this many matches; 0: all
};

enum class BulkState : uint8_t { kRunning, kDone, kStopped, kFailed };
std::string_view BulkStateName(BulkState s);

struct BulkProgress {
  uint64_t id = 0;
  BulkRequest request;
  BulkState state = BulkState::kRunning;
  bool stop_asked = false;
  uint64_t matched = 0;  // jobs the filter gave so far
  uint64_t applied = 0;  // changed, durably
  uint64_t skipped = 0;  // no longer allowed the action (changed meanwhile)
  uint64_t chunks = 0;
  uint64_t cursor = 0;  // the last id looked at
  std::string error;    // why it failed (kFailed): a read or write of the store failed
  int64_t started_ms = 0;
  int64_t finished_ms = 0;  // 0 while running
};

class BulkOps {
 public:
  static constexpr size_t kKeep = 100;
  static constexpr size_t kMaxRunning = 4;

  // `engine` and `clock` must outlive the BulkOps. `chunk`: jobs per step.
  BulkOps(boost::asio::io_context& io, engine::Engine& engine, const Clock& clock,
          size_t chunk = 500);
  BulkOps(const BulkOps&) = delete;
  BulkOps& operator=(const BulkOps&) = delete;

  // Starts an operation; kUnavailable while kMaxRunning run.
  Result<uint64_t> Start(BulkRequest request);
  // Asks it to stop after the chunk in flight; kNotFound for an unknown id.
  Status Stop(uint64_t id);
  // Null when unknown (or no longer kept).
  const BulkProgress* Find(uint64_t id) const;
  // Most recent first.
  std::vector<const BulkProgress*> Recent() const;

 private:
  void Step(std::shared_ptr<BulkProgress> op);
  void Apply(const std::shared_ptr<BulkProgress>& op, const engine::JobInfo& job,
             std::function<void(const Status&)> done);
  void Finish(BulkProgress& op, BulkState state);

  boost::asio::io_context& io_;
  engine::Engine& engine_;
  const Clock& clock_;
  const size_t chunk_;
  uint64_t next_id_ = 1;
  std::deque<std::shared_ptr<BulkProgress>> ops_;  // oldest first
};

}  // namespace delayd::http
