#include "cluster/claimer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

namespace delayd::cluster {

using store::JobRecord;
using store::Mutation;
using store::Notice;

Claimer::Claimer(store::Store& store, store::SharedQueue& queue, const Clock& clock,
                 ClaimerOptions options, WakeFn wake)
    : store_(store), queue_(queue), clock_(clock), options_(options), wake_(std::move(wake)) {}

std::string Claimer::KeyOf(std::vector<std::string>& tubes) {
  std::sort(tubes.begin(), tubes.end());
  tubes.erase(std::unique(tubes.begin(), tubes.end()), tubes.end());
  // Tube names hold no NUL.
  std::string key;
  for (const std::string& t : tubes) key.append(t).push_back('\0');
  return key;
}

std::optional<JobRecord> Claimer::Spare(const std::string& key) {
  auto it = groups_.find(key);
  if (it == groups_.end() || it->second.spares.empty()) return std::nullopt;
  Group& g = it->second;
  JobRecord j = std::move(g.spares.front().first);
  g.spares.pop_front();
  g.served_us = clock_.SteadyMicros();
  ++stats_.granted;
  // Running low while consumers keep coming: claim ahead again.
  if (g.spares.size() * 2 < options_.prefetch && !g.claiming && !g.drained && g.retry_at_us == 0) {
    Claim(key);
  }
  MaybeErase(key);
  return j;
}

std::optional<JobRecord> Claimer::TakeSpare(std::vector<std::string> tubes) {
  return Spare(KeyOf(tubes));
}

bool Claimer::Busy(const Group& g) const {
  return g.served_us != 0 && clock_.SteadyMicros() - g.served_us < options_.spare_ms * 1000;
}

void Claimer::MaybeErase(const std::string& key) {
  auto it = groups_.find(key);
  if (it != groups_.end() && it->second.waiters.empty() && it->second.spares.empty() &&
      !it->second.claiming) {
    groups_.erase(it);
  }
}

Claimer::WaiterId Claimer::Wait(std::vector<std::string> tubes, Granted granted) {
  const std::string key = KeyOf(tubes);
  if (auto spare = Spare(key)) {
    granted(std::move(*spare));
    return 0;
  }
  const WaiterId id = next_id_++;
  Group& g = groups_[key];
  if (g.tubes.empty()) g.tubes = std::move(tubes);
  g.waiters.push_back(id);
  waiters_.emplace(id, std::make_pair(key, std::move(granted)));
  if (g.claiming) {
    g.again = true;  // the claim in flight was not sized for this waiter
  } else if (g.retry_at_us == 0) {
    const int64_t until = KnownEmptyUntil(g.tubes);
    if (until == 0) {
      Claim(key);
    } else {
      g.retry_at_us = until;  // unless a notice comes first
      Arm();
    }
  }
  return id;
}

int64_t Claimer::KnownEmptyUntil(const std::vector<std::string>& tubes) const {
  const int64_t now = clock_.SteadyMicros();
  int64_t until = INT64_MAX;
  for (const std::string& t : tubes) {
    auto it = empty_.find(t);
    if (it == empty_.end() || it->second <= now) return 0;
    until = std::min(until, it->second);
  }
  return tubes.empty() ? 0 : until;
}

void Claimer::Cancel(WaiterId id) {
  auto w = waiters_.find(id);
  if (w == waiters_.end()) return;
  const std::string key = w->second.first;
  waiters_.erase(w);
  Group& g = groups_.at(key);
  g.waiters.erase(std::find(g.waiters.begin(), g.waiters.end(), id));
  MaybeErase(key);
}

void Claimer::Hear(const std::vector<Notice>& notices) {
  for (const Notice& n : notices) {
    if (n.kind == Notice::Kind::kDue) continue;
    // A tube with ready jobs, or one resumed (kTube), may have jobs to claim.
    const bool all = n.kind == Notice::Kind::kListening;
    if (all) {
      empty_.clear();
    } else {
      empty_.erase(n.tube);
    }
    for (auto& [key, g] : groups_) {
      if (!all && !std::binary_search(g.tubes.begin(), g.tubes.end(), n.tube)) continue;
      g.drained = false;
      if (g.claiming) {
        g.again = true;
      } else if (held_) {
        g.heard = true;
      } else if (!g.waiters.empty()) {
        g.retry_at_us = 0;
        Claim(key);
      }
    }
  }
}

void Claimer::Resumed(const std::string& tube) {
  empty_.erase(tube);
  for (auto& [key, g] : groups_) {
    if (std::binary_search(g.tubes.begin(), g.tubes.end(), tube)) g.retry_at_us = 0;
  }
}

std::vector<std::pair<std::string, int64_t>> Claimer::Wanted() const {
  std::map<std::string, int64_t> per_tube;
  for (const auto& [key, g] : groups_) {
    const size_t want = Want(g);
    if (want == 0) continue;
    for (const std::string& t : g.tubes) per_tube[t] += static_cast<int64_t>(want);
  }
  return {per_tube.begin(), per_tube.end()};
}

void Claimer::Take(std::vector<JobRecord> jobs) {
  const int64_t now = clock_.SteadyMicros();
  std::set<std::string> touched;
  for (JobRecord& j : jobs) {
    // Looked up again for each job: a grant may wait or cancel again.
    std::string waiting;
    std::string busy;
    for (const auto& [key, g] : groups_) {
      if (!std::binary_search(g.tubes.begin(), g.tubes.end(), j.tube)) continue;
      if (!g.waiters.empty()) {
        waiting = key;
        break;
      }
      if (busy.empty() && Busy(g) && g.spares.size() < options_.prefetch) busy = key;
    }
    if (!waiting.empty()) {
      touched.insert(waiting);
      Grant(groups_.at(waiting), std::move(j), now);
    } else if (!busy.empty()) {
      groups_.at(busy).spares.emplace_back(std::move(j), now);
    } else {
      Return(std::move(j));
    }
  }
  for (const std::string& key : touched) MaybeErase(key);
  Arm();
}

void Claimer::Hold(bool held) {
  held_ = held;
  if (held) return;
  for (auto& [key, g] : groups_) {
    if (!g.heard) continue;
    g.heard = false;
    if (g.claiming) {
      g.again = true;
    } else if (!g.waiters.empty()) {
      g.retry_at_us = 0;
      Claim(key);
    }
  }
  Arm();
}

void Claimer::Tick() {
  armed_us_ = INT64_MAX;
  const int64_t now = clock_.SteadyMicros();
  std::vector<std::string> due;
  std::vector<std::string> idle;
  std::erase_if(empty_, [now](const auto& e) { return e.second <= now; });
  for (auto& [key, g] : groups_) {
    // Claimed ahead and not taken in time: back to ready for everyone.
    while (!g.spares.empty() && g.spares.front().second + options_.spare_ms * 1000 <= now) {
      Return(std::move(g.spares.front().first));
      g.spares.pop_front();
    }
    if (g.spares.empty() && g.waiters.empty() && !g.claiming) {
      idle.push_back(key);  // never also due: erased below
    } else if (g.retry_at_us != 0 && g.retry_at_us <= now) {
      due.push_back(key);
    }
  }
  for (const std::string& key : idle) groups_.erase(key);
  for (const std::string& key : due) {
    Group& g = groups_.at(key);
    g.retry_at_us = 0;
    if (held_) {
      g.heard = true;  // as a notice: claimed for once released (Hold)
    } else if (!g.claiming && !g.waiters.empty()) {
      Claim(key);
    }
  }
  Arm();
}

ClaimerStats Claimer::stats() const {
  ClaimerStats out = stats_;
  out.waiters = waiters_.size();
  for (const auto& [key, g] : groups_) {
    out.spares += g.spares.size();
    if (g.claiming) ++out.in_flight;
  }
  return out;
}

size_t Claimer::Want(const Group& g) const {
  size_t want = g.waiters.size();
  if (Busy(g) && g.spares.size() < options_.prefetch) want += options_.prefetch - g.spares.size();
  return std::min(want, options_.max_per_claim);
}

void Claimer::Grant(Group& g, JobRecord j, int64_t now_us) {
  const WaiterId id = g.waiters.front();
  g.waiters.pop_front();
  auto w = waiters_.find(id);
  Granted granted = std::move(w->second.second);
  waiters_.erase(w);
  ++stats_.granted;
  g.served_us = now_us;
  granted(std::move(j));
}

void Claimer::Claim(const std::string& key) {
  Group& g = groups_.at(key);
  g.claiming = true;
  g.again = false;
  ++stats_.claims;
  store::ClaimQuery q;
  q.tubes = g.tubes;
  q.limit = g.asked = Want(g);
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
    g.drained = got < g.asked;
    const bool empty = g.drained && !g.again && !g.heard;
    const int64_t empty_until = clock_.SteadyMicros() + options_.empty_ms * 1000;
    if (empty) {
      for (const std::string& t : g.tubes) empty_[t] = empty_until;
    }
    // Still claiming while granting: a grant may wait or cancel again,
    // which must not remove this group. What no waiter takes now is kept
    // for the next ones, for spare_ms.
    const int64_t now = clock_.SteadyMicros();
    for (JobRecord& j : *r) {
      if (g.waiters.empty()) {
        g.spares.emplace_back(std::move(j), now);
        continue;
      }
      Grant(g, std::move(j), now);
    }
    // The waiters left claim again when that knowledge runs out, unless a
    // notice comes first.
    if (empty && !g.waiters.empty()) g.retry_at_us = empty_until;
  }
  g.claiming = false;
  const bool more = r.ok() && (g.again || got == g.asked);
  if (g.waiters.empty()) {
    MaybeErase(key);
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
    if (!g.spares.empty())
      next = std::min(next, g.spares.front().second + options_.spare_ms * 1000);
  }
  if (next < armed_us_) {
    armed_us_ = next;
    wake_(next);
  }
}

}  // namespace delayd::cluster
