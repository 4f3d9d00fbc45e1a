// Cluster mode: push jobs on the owner of their shard (doc/cluster.md, "Push
// jobs on their shard's owner"). The dispatcher asks for a topic's next push
// job as on one node (TakePush); here the engine claims push jobs from the
// database for the shards this node owns, and holds them ready for it.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "engine/engine.h"

namespace delayd::engine {

using store::JobRecord;
using store::StoredState;

namespace {
// Push jobs one claim takes at most: enough for a burst, few enough that a
// slow topic does not keep many claimed while the dispatcher gets to them.
constexpr size_t kPushClaim = 32;
// After a failed claim or read (the database unreachable), the next try.
constexpr int64_t kPushRetryUs = 200'000;
}  // namespace

void Engine::SetOwnership(const store::Ownership& owned) {
  if (shared_ == nullptr) return;
  store::Ownership::Change change = owned.Since(owned_);
  owned_ = owned;
  // No notice told this node which push jobs of the shards it did not own
  // (or owned at an older epoch, another node owning them in between) are
  // ready.
  std::vector<int> read = std::move(change.gained);
  read.insert(read.end(), change.retaken.begin(), change.retaken.end());
  if (!read.empty()) ReadPushTubes(std::move(read));
}

void Engine::ReadPushTubes(std::vector<int> shards) {
  Aside([q = shared_, shards] { return q->PushTubes(shards); },
        [this](Result<std::vector<std::string>> tubes, uint64_t) {
          if (!tubes.ok()) {
            spdlog::warn("cluster: reading the topics with push jobs ready: {}; again shortly",
                         tubes.status().ToString());
            push_rescan_ = true;
            Schedule(push_retry_timer_, TickAtSteady(clock_.SteadyMicros() + kPushRetryUs));
            return;
          }
          for (const std::string& topic : *tubes) WantPush(topic);
        });
}

void Engine::WantPush(const std::string& topic) {
  push_claims_[topic].more = true;
  EmitPushReady(topic);
}

void Engine::EmitPushReady(const std::string& topic) {
  const JobEvent e{JobEventKind::kReady, 0, topic, true};
  for (const auto& [id, fn] : listeners_) fn(e);
}

void Engine::ClaimPush(const std::string& topic) {
  auto it = push_claims_.find(topic);
  if (it == push_claims_.end() || it->second.claiming) return;
  if (!it->second.more || owned_.empty()) {
    push_claims_.erase(it);
    return;
  }
  it->second.claiming = true;
  it->second.more = false;
  // A rate-limited topic takes about a second's worth at a time.
  size_t limit = kPushClaim;
  if (auto settings = SettingsOf(topic); settings && settings->rate_limit_per_s > 0) {
    limit = std::clamp<size_t>(static_cast<size_t>(std::ceil(settings->rate_limit_per_s)), 1,
                               kPushClaim);
  }
  store::ClaimQuery q{{topic}, limit, clock_.WallMillis(), owned_.shards(), true};
  shared_->Claim(std::move(q), [this, topic, limit](Result<std::vector<JobRecord>> rows) {
    PushClaimed(topic, limit, std::move(rows));
  });
}

void Engine::PushClaimed(const std::string& topic, size_t limit,
                         Result<std::vector<JobRecord>> rows) {
  PushClaims& pc = push_claims_[topic];
  pc.claiming = false;
  if (!rows.ok()) {
    spdlog::warn("cluster: claiming push jobs of {}: {}; again shortly", topic,
                 rows.status().ToString());
    pc.more = true;
    Schedule(push_retry_timer_, TickAtSteady(clock_.SteadyMicros() + kPushRetryUs));
    return;
  }
  if (rows->size() >= limit) pc.more = true;  // there may be more
  for (JobRecord& r : *rows) {
    if (jobs_.count(r.id) != 0) {
      // This node's own write of the job is not answered yet: the row goes
      // back to ready (guarded), and its notice brings it back.
      claimer_->Return(std::move(r));
      continue;
    }
    // Claimed for this node's dispatcher: ready to it, reserved in the
    // database. Hold counts the reservation.
    if (r.counters.reserves > 0) --r.counters.reserves;
    r.state = StoredState::kReady;
    AdoptRow(r)->claimed = true;
  }
  const bool any = !rows->empty() || pc.more;
  if (!pc.more) push_claims_.erase(topic);
  if (any) EmitPushReady(topic);
}

void Engine::RetryPush() {
  if (push_rescan_) {
    push_rescan_ = false;
    ReadPushTubes(owned_.shards());
  }
  std::vector<std::string> topics;
  for (const auto& [topic, pc] : push_claims_) {
    if (pc.more && !pc.claiming) topics.push_back(topic);
  }
  for (const std::string& topic : topics) EmitPushReady(topic);
}

size_t Engine::PushClaimsInFlight() const {
  return static_cast<size_t>(std::count_if(push_claims_.begin(), push_claims_.end(),
                                           [](const auto& pc) { return pc.second.claiming; }));
}

void Engine::ReturnClaimed() {
  std::vector<Job*> claimed;
  for (auto& [id, j] : jobs_) {
    if (j->claimed) claimed.push_back(j.get());
  }
  for (Job* j : claimed) {
    JobRecord r = Record(*j);
    r.version = j->version;
    ++r.counters.reserves;  // as claimed: Return uncounts the claim's reservation
    Unadopt(j);
    claimer_->Return(std::move(r));
  }
}

}  // namespace delayd::engine
