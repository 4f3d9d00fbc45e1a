#include "cluster/claimer.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace delayd::cluster {

using store::JobRecord;
using store::Mutation;
using store::Notice;

Claimer::Claimer(store::Store& store, store::SharedQueue& queue, const Clock& clock,
                 ClaimerOptions options, WakeFn wake)
    : store_(store), queue_(queue), clock_(clock), options_(options), wake_(std::move(wake)) {}

Claimer::WaiterId Claimer::Wait(std::vector<std::string> tubes, Granted granted) {
  std::sort(tubes.begin(), tubes.end());
  tubes.erase(std::unique(tubes.begin(), tubes.end()), tubes.end());
  // Tube names hold no NUL.
  std::string key;
  for (const std::string& t : tubes) key.append(t).push_back('\0');
  const WaiterId id = next_id_++;
  Group& g = groups_[key];
  if (g.tubes.empty()) g.tubes = std::move(tubes);
  g.waiters.push_back(id);
  waiters_.emplace(id, std::make_pair(key, std::move(granted)));
  if (g.claiming) {
    g.again = true;  // the claim in flight was not sized for this waiter
  } else if (g.retry_at_us == 0) {
    Claim(key);
  }
  return id;
}

void Claimer::Cancel(WaiterId id) {
  auto w = waiters_.find(id);
  if (w == waiters_.end()) return;
  const std::string key = w->second.first;
  waiters_.erase(w);
  Group& g = groups_.at(key);
  g.waiters.erase(std::find(g.waiters.begin(), g.waiters.end(), id));
  if (g.waiters.empty() && !g.claiming) groups_.erase(key);
}

void Claimer::Hear(const std::vector<Notice>& notices) {
  for (const Notice& n : notices) {
    if (n.kind == Notice::Kind::kDue) continue;
    // A tube with ready jobs, or one resumed (kTube), may have jobs to claim.
    const bool all = n.kind == Notice::Kind::kListening;
    for (auto& [key, g] : groups_) {
      if (!all && !std::binary_search(g.tubes.begin(), g.tubes.end(), n.tube)) continue;
      if (g.claiming) {
        g.again = true;
      } else if (!g.waiters.empty()) {
        g.retry_at_us = 0;
        Claim(key);
      }
    }
  }
}

void Claimer::Tick() {
  armed_us_ = INT64_MAX;
  const int64_t now = clock_.SteadyMicros();
  std::vector<std::string> due;
  for (auto& [key, g] : groups_) {
    if (g.retry_at_us != 0 && g.retry_at_us <= now) due.push_back(key);
  }
  for (const std::string& key : due) {
    Group& g = groups_.at(key);
    g.retry_at_us = 0;
    if (!g.claiming && !g.waiters.empty()) Claim(key);
  }
  Arm();
}

ClaimerStats Claimer::stats() const {
  ClaimerStats out = stats_;
  out.waiters = waiters_.size();
  return out;
}

void Claimer::Claim(const std::string& key) {
  Group& g = groups_.at(key);
  g.claiming = true;
  g.again = false;
  ++stats_.claims;
  store::ClaimQuery q;
  q.tubes = g.tubes;
  q.limit = g.asked = std::min(g.waiters.size(), options_.max_per_claim);
  q.now_ms = clock_.WallMillis();
  queue_.Claim(std::move(q),
               [this, key](Result<std::vector<JobRecord>> r) { OnClaimed(key, std::move(r)); });
}

void Claimer::OnClaimed(const std::string& key, Result<std::vector<JobRecord>> r) {
  Group& g = groups_.at(key);  // kept while its claim is in flight
  size_t got = 0;
  if (!r.ok()) {
    ++stats_.failures;
    spdlog::warn("cluster: a claim failed, trying again in {} ms: {}", options_.retry_ms,
                 r.status().ToString());
    g.retry_at_us = clock_.SteadyMicros() + options_.retry_ms * 1000;
  } else {
    got = r->size();
    // Still claiming while granting: a grant may wait or cancel again,
    // which must not remove this group.
    for (JobRecord& j : *r) {
      if (g.waiters.empty()) {
        Return(std::move(j));
        continue;
      }
      const WaiterId id = g.waiters.front();
      g.waiters.pop_front();
      auto w = waiters_.find(id);
      Granted granted = std::move(w->second.second);
      waiters_.erase(w);
      ++stats_.granted;
      granted(std::move(j));
    }
  }
  g.claiming = false;
  const bool more = r.ok() && (g.again || got == g.asked);
  if (g.waiters.empty()) {
    groups_.erase(key);
  } else if (more && g.retry_at_us == 0) {
    // A notice came meanwhile, a waiter came, or the claim was full and
    // may have left more behind.
    Claim(key);
  }
  Arm();
}

void Claimer::Return(JobRecord j) {
  const uint64_t version = j.version;
  j.state = store::StoredState::kReady;
  j.reserved_by.clear();
  j.deadline_ms = 0;
  if (j.counters.reserves > 0) --j.counters.reserves;  // nobody reserved it
  store_.Submit(
      Mutation::Update(std::move(j)).IfVersion(version).Written(), [this](const Status& s) {
        if (s.ok()) {
          ++stats_.returned;
        } else if (s.code() != StatusCode::kConflict) {
          // Its reservation runs out, and the owner's sweep returns it.
          spdlog::warn("cluster: a job claimed for nobody could not be put back: {}", s.ToString());
        }
      });
}

void Claimer::Arm() {
  int64_t next = INT64_MAX;
  for (const auto& [key, g] : groups_) {
    if (g.retry_at_us != 0) next = std::min(next, g.retry_at_us);
  }
  if (next < armed_us_) {
    armed_us_ = next;
    wake_(next);
  }
}

}  // namespace delayd::cluster
