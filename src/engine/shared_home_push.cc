// SharedHome's push jobs, on the owner of their shard (doc/cluster.md, "Push
// jobs on their shard's owner"). The dispatcher asks for a topic's next push
// job as on one node (Engine::TakePush); here the home claims push jobs from
// the database for the shards this node owns, and holds them ready for it.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "engine/engine.h"
#include "engine/shared_home.h"

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

// In cluster mode a push job is this node's once claimed for it; one made
// ready here is being written back, for its shard's owner.
bool SharedHome::Dispatchable(const Job& j) const { return j.claimed; }

void SharedHome::SetOwnership(const store::Ownership& owned) {
  store::Ownership::Change change = owned.Since(owned_);
  owned_ = owned;
  // No notice told this node which push jobs of the shards it did not own
  // (or owned at an older epoch, another node owning them in between) are
  // ready.
  std::vector<int> read = std::move(change.gained);
  read.insert(read.end(), change.retaken.begin(), change.retaken.end());
  if (!read.empty()) ReadPushTubes(std::move(read));
}

void SharedHome::ScheduleRetry() {
  e_.Schedule(e_.push_retry_timer_, e_.TickAtSteady(e_.clock_.SteadyMicros() + kPushRetryUs));
}

void SharedHome::ReadPushTubes(std::vector<int> shards) {
  e_.Aside([q = &queue_, shards] { return q->PushTubes(shards); },
           [this](Result<std::vector<std::string>> tubes, uint64_t) {
             if (!tubes.ok()) {
               spdlog::warn("cluster: reading the topics with push jobs ready: {}; again shortly",
                            tubes.status().ToString());
               push_rescan_ = true;
               ScheduleRetry();
               return;
             }
             for (const std::string& topic : *tubes) WantPush(topic);
           });
}

void SharedHome::WantPush(const std::string& topic) {
  push_claims_[topic].more = true;
  EmitPushReady(topic);
}

void SharedHome::EmitPushReady(const std::string& topic) {
  const JobEvent e{JobEventKind::kReady, 0, topic, true};
  for (const auto& [id, fn] : e_.listeners_) fn(e);
}

void SharedHome::ClaimPush(const std::string& topic) {
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
  if (auto settings = e_.SettingsOf(topic); settings && settings->rate_limit_per_s > 0) {
    limit = std::clamp<size_t>(static_cast<size_t>(std::ceil(settings->rate_limit_per_s)), 1,
                               kPushClaim);
  }
  store::ClaimQuery q{{topic}, limit, e_.clock_.WallMillis(), owned_.shards(), true};
  queue_.Claim(std::move(q), [this, topic, limit](Result<std::vector<JobRecord>> rows) {
    PushClaimed(topic, limit, std::move(rows));
  });
}

void SharedHome::PushClaimed(const std::string& topic, size_t limit,
                             Result<std::vector<JobRecord>> rows) {
  PushClaims& pc = push_claims_[topic];
  pc.claiming = false;
  if (!rows.ok()) {
    spdlog::warn("cluster: claiming push jobs of {}: {}; again shortly", topic,
                 rows.status().ToString());
    pc.more = true;
    ScheduleRetry();
    return;
  }
  if (rows->size() >= limit) pc.more = true;  // there may be more
  for (JobRecord& r : *rows) {
    if (e_.jobs_.count(r.id) != 0) {
      // This node's own write of the job is not answered yet: the row goes
      // back to ready (guarded), and its notice brings it back.
      claims_.Return(std::move(r));
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

void SharedHome::RetryPush() {
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

size_t SharedHome::PushClaimsInFlight() const {
  return static_cast<size_t>(std::count_if(push_claims_.begin(), push_claims_.end(),
                                           [](const auto& pc) { return pc.second.claiming; }));
}

void SharedHome::ReturnClaimed() {
  std::vector<Job*> claimed;
  for (auto& [id, j] : e_.jobs_) {
    if (j->claimed) claimed.push_back(j.get());
  }
  for (Job* j : claimed) {
    JobRecord r = e_.Record(*j);
    r.version = j->version;
    ++r.counters.reserves;  // as claimed: Return uncounts the claim's reservation
    Unadopt(j);
    claims_.Return(std::move(r));
  }
}

}  // namespace delayd::engine
