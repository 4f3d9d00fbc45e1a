#include "cluster/shard_clock.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

namespace delayd::cluster {

using store::DueEntry;
using store::DueMinute;
using store::Mutation;
using store::Notice;
using store::change::Fence;

namespace {
// An entry within this much after the start of its millisecond counts as
// due: the wake-up maps wall time to steady time through two clock reads
// (Engine's kWallSkewUs).
constexpr int64_t kWallSkewUs = 50;
}  // namespace

ShardClock::ShardClock(store::Store& store, store::SharedQueue& queue, const Clock& clock,
                       ShardClockOptions options, WakeFn wake)
    : store_(store), queue_(queue), clock_(clock), options_(options), wake_(std::move(wake)) {}

void ShardClock::SetOwnership(const store::Ownership& now) {
  const store::Ownership::Change change = now.Since(held_);
  held_ = now;
  for (int shard : change.lost) Drop(shard);
  // Taken, or held again at a new epoch: another owner may have changed the
  // shard meanwhile, unheard by this clock. (A shard dropped on a fenced
  // refusal comes back only at a higher epoch: retaken.)
  for (const std::vector<int>* taken : {&change.gained, &change.retaken}) {
    for (int shard : *taken) {
      owned_[shard] = now.epochs().at(shard);
      Pend(shard);
    }
  }
  if (through_ < 0 && !owned_.empty()) {
    through_ = DueMinute(clock_.WallMillis() + options_.horizon_ms);
  }
  if (next_sweep_us_ == 0) next_sweep_us_ = clock_.SteadyMicros() + options_.sweep_ms * 1000;
  Load();
  Arm();
}

void ShardClock::Hear(const std::vector<Notice>& notices) {
  for (const Notice& n : notices) {
    if (n.kind == Notice::Kind::kListening) {
      for (const auto& [shard, epoch] : owned_) Pend(shard);
    } else if (n.kind == Notice::Kind::kDue && owned_.count(n.shard) != 0 &&
               DueMinute(n.due_ms) <= Bound()) {
      due_.emplace(n.due_ms, n.shard, n.id);
    }
  }
  Load();
  Arm();
}

void ShardClock::Tick() {
  armed_us_ = INT64_MAX;
  Promote(clock_.WallMillis());
  if (!owned_.empty() && clock_.SteadyMicros() >= next_sweep_us_) {
    Sweep(clock_.WallMillis());
    next_sweep_us_ = clock_.SteadyMicros() + options_.sweep_ms * 1000;
  }
  Load();
  Arm();
}

ShardClockStats ShardClock::stats() const {
  ShardClockStats out = stats_;
  out.shards = owned_.size();
  out.pending = pending_.size();
  out.held = due_.size();
  return out;
}

void ShardClock::Drop(int shard) {
  owned_.erase(shard);
  loaded_.erase(shard);
  pending_.erase(shard);
  for (auto it = due_.begin(); it != due_.end();) {
    it = std::get<1>(*it) == shard ? due_.erase(it) : std::next(it);
  }
}

void ShardClock::Pend(int shard) {
  loaded_.erase(shard);
  pending_[shard] = ++generation_;
}

int64_t ShardClock::Bound() const {
  return std::max(through_, loading_ ? loading_through_ : int64_t{-1});
}

void ShardClock::Load() {
  if (loading_ || owned_.empty() || clock_.SteadyMicros() < load_after_us_) return;
  store::DueQuery q;
  q.limit = options_.load_chunk;
  std::map<int, uint64_t> gens;
  const int64_t target = DueMinute(clock_.WallMillis() + options_.horizon_ms);
  if (!pending_.empty()) {
    // Shards taken or to be read again: everything due through through_.
    gens = pending_;
    for (const auto& [shard, gen] : pending_) q.shards.push_back(shard);
    q.through_minute = through_;
  } else if (target > through_) {
    // The next minutes of every loaded shard.
    q.shards.assign(loaded_.begin(), loaded_.end());
    q.after_minute = through_;
    q.after_id = UINT64_MAX;
    q.through_minute = target;
  } else {
    return;
  }
  loading_ = true;
  loading_through_ = q.through_minute;
  store::DueQuery copy = q;
  queue_.Due(std::move(copy), [this, q = std::move(q),
                               gens = std::move(gens)](Result<std::vector<DueEntry>> r) mutable {
    OnChunk(std::move(q), std::move(gens), std::move(r));
  });
}

void ShardClock::OnChunk(store::DueQuery q, std::map<int, uint64_t> gens,
                         Result<std::vector<DueEntry>> r) {
  if (!r.ok()) {
    loading_ = false;
    ++stats_.write_errors;
    spdlog::warn("cluster: loading the due jobs of {} shards failed, trying again: {}",
                 q.shards.size(), r.status().ToString());
    load_after_us_ = clock_.SteadyMicros() + options_.retry_ms * 1000;
    Arm();
    return;
  }
  for (const DueEntry& e : *r) {
    if (owned_.count(e.shard) != 0) due_.emplace(e.due_ms, e.shard, e.id);
  }
  if (r->size() == q.limit) {
    q.after_minute = DueMinute(r->back().due_ms);
    q.after_id = r->back().id;
    store::DueQuery copy = q;
    queue_.Due(std::move(copy), [this, q = std::move(q), gens = std::move(gens)](
                                    Result<std::vector<DueEntry>> next) mutable {
      OnChunk(std::move(q), std::move(gens), std::move(next));
    });
    return;
  }
  loading_ = false;
  if (gens.empty()) {
    through_ = q.through_minute;  // every loaded shard, now through the new minutes
  } else {
    for (const auto& [shard, gen] : gens) {
      auto it = pending_.find(shard);
      if (it == pending_.end() || it->second != gen) continue;  // dropped, or marked again
      pending_.erase(it);
      loaded_.insert(shard);
    }
  }
  Load();
  Arm();
}

void ShardClock::Promote(int64_t now_ms) {
  if (promoting_ > 0) return;  // the answers promote what is due meanwhile
  const int64_t wall_us = clock_.WallMicros();
  // Shard -> its due jobs' ids and due times (ms).
  using Due = std::map<int, std::vector<std::pair<uint64_t, int64_t>>>;
  auto due = std::make_shared<Due>();
  int64_t latest_ms = now_ms;
  while (!due_.empty() && std::get<0>(*due_.begin()) * 1000 <= wall_us + kWallSkewUs) {
    const auto [due_ms, shard, id] = *due_.begin();
    due_.erase(due_.begin());
    if (owned_.count(shard) == 0) continue;  // Drop took its entries; kept for safety
    (*due)[shard].emplace_back(id, due_ms);
    latest_ms = std::max(latest_ms, due_ms);
  }
  if (due->empty()) return;
  std::vector<int> shards;
  for (const auto& [shard, jobs] : *due) shards.push_back(shard);
  // Never earlier than the latest due time, which the skew above may put a
  // few microseconds ahead of the wall clock.
  auto write = [this, due, at = latest_ms](const std::vector<Fence>& fences) {
    std::vector<store::change::DueJob> jobs;
    for (const Fence& f : fences) {
      for (const auto& [id, due_ms] : due->at(f.shard)) jobs.push_back({f.shard, id});
    }
    // Asked as each write is made: a write again (a refusal's, shard by
    // shard) serves the waiters of its time.
    if (claimer_ == nullptr) return Mutation::Promote(fences, std::move(jobs), at).Written();
    return Mutation::Promote(fences, std::move(jobs), at, claimer_->Wanted(),
                             std::make_shared<std::vector<store::JobRecord>>())
        .Written();
  };
  // A job's lateness ends when the promotion that makes it ready (or
  // reserves it) commits.
  auto ok = [this, due](const std::vector<int>& committed, std::vector<store::JobRecord> mine) {
    ++stats_.promotions;
    stats_.reserved += mine.size();
    if (!mine.empty() && claimer_ != nullptr) claimer_->Take(std::move(mine));
    const int64_t done_us = clock_.WallMicros();
    for (int shard : committed) {
      for (const auto& [id, due_ms] : due->at(shard)) {
        ++stats_.promoted;
        if (metrics_ != nullptr) metrics_->fire_lateness.ObserveMicros(done_us - due_ms * 1000);
      }
    }
  };
  auto retry = [this, due](const std::vector<int>& failed) {
    const int64_t when = clock_.WallMillis() + options_.retry_ms;
    for (int shard : failed) {
      for (const auto& [id, due_ms] : due->at(shard)) due_.emplace(when, shard, id);
    }
  };
  ++promoting_;
  if (claimer_ != nullptr) claimer_->Hold(true);
  Fenced(std::move(shards), std::move(write), std::move(ok), std::move(retry), [this] {
    --promoting_;
    if (claimer_ != nullptr) claimer_->Hold(false);
  });
}

void ShardClock::Sweep(int64_t now_ms) {
  std::vector<int> shards;
  for (const auto& [shard, epoch] : owned_) shards.push_back(shard);
  // A failed sweep is made again at the next one.
  Fenced(
      std::move(shards),
      [before_ms = now_ms - options_.sweep_grace_ms](const std::vector<Fence>& fences) {
        return Mutation::Requeue(fences, before_ms).Written();
      },
      [](const std::vector<int>&, std::vector<store::JobRecord>) {}, [](const std::vector<int>&) {},
      [] {});
}

void ShardClock::Fenced(std::vector<int> shards, Write write, Committed ok, Shards retry,
                        std::function<void()> then) {
  std::vector<Fence> fences;
  for (int shard : shards) fences.push_back({shard, owned_.at(shard)});
  Mutation m = write(fences);
  std::shared_ptr<std::vector<store::JobRecord>> claimed;
  if (const auto* p = std::get_if<store::change::PromoteDue>(&m.change)) claimed = p->claimed;
  store_.Submit(std::move(m), [this, fences = std::move(fences), claimed = std::move(claimed),
                               write = std::move(write), ok = std::move(ok),
                               retry = std::move(retry), then = std::move(then)](const Status& s) {
    // The shards still owned at the epochs written under.
    std::vector<int> same;
    for (const Fence& f : fences) {
      auto it = owned_.find(f.shard);
      if (it != owned_.end() && it->second == f.epoch) same.push_back(f.shard);
    }
    if (s.ok()) {
      std::vector<int> all;
      for (const Fence& f : fences) all.push_back(f.shard);
      ok(all, claimed ? std::move(*claimed) : std::vector<store::JobRecord>{});
    } else if (s.code() == StatusCode::kFenced) {
      // A lease moved. The write is all or nothing: with several shards,
      // which one is not known, so each still owned is written alone.
      ++stats_.fencing_refusals;
      if (fences.size() > 1 && !same.empty()) {
        auto left = std::make_shared<size_t>(same.size());
        for (int shard : same) {
          Fenced({shard}, write, ok, retry, [left, then] {
            if (--*left == 0) then();
          });
        }
        return Arm();
      }
      if (!same.empty()) {
        spdlog::warn(
            "cluster: shard {}: the database refused a write at epoch {} ({}); "
            "dropping the shard",
            fences.front().shard, fences.front().epoch, s.ToString());
        Drop(fences.front().shard);
      }
    } else {
      ++stats_.write_errors;
      if (!same.empty()) retry(same);
    }
    then();
    Arm();
  });
}

int64_t ShardClock::SteadyAtWall(int64_t wall_ms) const {
  return clock_.SteadyMicros() + wall_ms * 1000 - clock_.WallMicros();
}

void ShardClock::Arm() {
  int64_t next = INT64_MAX;
  // With promotions in flight, their answers arm the next.
  if (!due_.empty() && promoting_ == 0) next = SteadyAtWall(std::get<0>(*due_.begin()));
  if (!owned_.empty()) {
    next = std::min(next, next_sweep_us_);
    if (!loading_) {
      // A failed load is tried again after load_after_us_; the next minutes
      // are loaded as soon as now + horizon reaches them.
      const int64_t extend =
          SteadyAtWall((through_ + 1) * store::kMillisPerMinute - options_.horizon_ms);
      next = std::min(next, std::max(pending_.empty() ? extend : 0, load_after_us_));
    }
  }
  if (next < armed_us_) {
    armed_us_ = next;
    wake_(next);
  }
}

}  // namespace delayd::cluster
