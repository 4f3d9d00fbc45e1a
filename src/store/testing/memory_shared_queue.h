// Test support: SharedQueue over a MemoryStore's rows, for unit tests of the
// engine's cluster mode (engine::SharedHome) without a database. It models
// what the engine relies on of PgStore: a claim reserves the best ready
// rows of unpaused tubes for this node, raising their versions; peeks,
// counts, tubes and push tubes read the committed rows. What only the shard
// clock, the id blocks and the timers use (Due, TakeIds, timers, notices)
// is not modelled and answers kInternal saying so.
//
// Single-threaded, as MemoryStore: claims are answered through `post`.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "store/shared_queue.h"
#include "store/testing/memory_store.h"

namespace delayd::store::testing {

class MemorySharedQueue final : public SharedQueue {
 public:
  MemorySharedQueue(MemoryStore& store, std::function<void(std::function<void()>)> post,
                    std::string node_id = "node-a", int shards = 4)
      : store_(store), post_(std::move(post)), node_id_(std::move(node_id)), shards_(shards) {}

  const std::string& node_id() const override { return node_id_; }
  int shards() const override { return shards_; }
  int ShardOf(const JobRecord& j) const override { return static_cast<int>(j.id % shards_); }

  // What Claim answers, at once.
  std::vector<JobRecord> ClaimNow(const ClaimQuery& q) {
    std::vector<JobRecord*> ready;
    for (auto& [id, j] : store_.rows()) {
      if (j.state != StoredState::kReady || j.push != q.push) continue;
      if (std::find(q.tubes.begin(), q.tubes.end(), j.tube) == q.tubes.end()) continue;
      if (Paused(j.tube, q.now_ms)) continue;
      if (!q.shards.empty() &&
          std::find(q.shards.begin(), q.shards.end(), ShardOf(j)) == q.shards.end()) {
        continue;
      }
      ready.push_back(&j);
    }
    std::sort(ready.begin(), ready.end(), [](const JobRecord* a, const JobRecord* b) {
      return std::make_pair(a->priority, a->id) < std::make_pair(b->priority, b->id);
    });
    if (ready.size() > q.limit) ready.resize(q.limit);
    std::vector<JobRecord> out;
    for (JobRecord* j : ready) {
      j->state = StoredState::kReserved;
      j->reserved_by = node_id_;
      j->deadline_ms = q.now_ms + j->ttr_ms;
      ++j->counters.reserves;
      ++j->version;
      out.push_back(*j);
    }
    return out;
  }
  void Claim(ClaimQuery q, std::function<void(Result<std::vector<JobRecord>>)> done) override {
    post_([this, q = std::move(q), done = std::move(done)] { done(ClaimNow(q)); });
  }

  Result<std::optional<JobRecord>> BestReady(const std::string& tube) override {
    std::optional<JobRecord> best;
    for (const auto& [id, j] : store_.rows()) {
      if (j.state != StoredState::kReady || j.push || j.tube != tube) continue;
      if (!best || std::make_pair(j.priority, j.id) < std::make_pair(best->priority, best->id)) {
        best = j;
      }
    }
    return best;
  }
  Result<std::vector<TubeCount>> CountJobs(std::optional<std::string> tube) override {
    std::map<std::string, TubeCount> counts;
    for (const auto& [id, j] : store_.rows()) {
      if (tube && j.tube != *tube) continue;
      if (j.state == StoredState::kDone) continue;
      TubeCount& c = counts[j.tube];
      c.tube = j.tube;
      switch (j.state) {
        case StoredState::kReady:
          ++c.ready;
          if (j.priority < 1024) ++c.urgent;
          if (c.oldest_ready_due_ms == 0 || j.due_ms < c.oldest_ready_due_ms) {
            c.oldest_ready_due_ms = j.due_ms;
          }
          break;
        case StoredState::kDelayed:
          ++c.delayed;
          break;
        case StoredState::kReserved:
          ++c.reserved;
          break;
        case StoredState::kBuried:
          ++c.buried;
          break;
        case StoredState::kDone:
          break;
      }
    }
    std::vector<TubeCount> out;
    for (auto& [name, c] : counts) out.push_back(c);
    return out;
  }
  Result<std::vector<TubeRow>> Tubes(std::optional<std::string> tube) override {
    std::map<std::string, TubeRow> rows;
    for (const auto& [name, p] : store_.pauses()) {
      if (tube && name != *tube) continue;
      TubeRow& r = rows[name];
      r.tube = name;
      r.pause_ms = p.pause_ms;
      r.unpause_ms = p.unpause_ms;
    }
    for (const auto& [name, s] : store_.settings()) {
      if (tube && name != *tube) continue;
      rows[name].tube = name;
      rows[name].settings = s;
    }
    std::vector<TubeRow> out;
    for (auto& [name, r] : rows) out.push_back(r);
    return out;
  }
  Result<std::vector<std::string>> PushTubes(const std::vector<int>& shards) override {
    std::vector<std::string> out;
    for (const auto& [id, j] : store_.rows()) {
      if (j.state != StoredState::kReady || !j.push) continue;
      if (std::find(shards.begin(), shards.end(), ShardOf(j)) == shards.end()) continue;
      if (std::find(out.begin(), out.end(), j.tube) == out.end()) out.push_back(j.tube);
    }
    return out;
  }

  void Due(DueQuery, std::function<void(Result<std::vector<DueEntry>>)> done) override {
    done(NotModelled("Due"));
  }
  void TakeIds(uint64_t, std::function<void(Result<uint64_t>)> done) override {
    done(NotModelled("TakeIds"));
  }
  Result<std::vector<TimerRecord>> TimersDueOf(const std::vector<int>&, int64_t, uint64_t, int64_t,
                                               size_t) override {
    return NotModelled("TimersDueOf");
  }
  int TimerShardOf(uint64_t id) const override { return static_cast<int>(id % shards_); }
  void TakeTimerId(std::function<void(Result<uint64_t>)> done) override {
    done(NotModelled("TakeTimerId"));
  }
  Status Listen(std::function<void(std::vector<Notice>)>) override { return NotModelled("Listen"); }

 private:
  bool Paused(const std::string& tube, int64_t now_ms) const {
    auto it = store_.pauses().find(tube);
    return it != store_.pauses().end() && it->second.unpause_ms > now_ms;
  }
  static Status NotModelled(const char* what) {
    return Status::Internal(std::string("MemorySharedQueue does not model ") + what);
  }

  MemoryStore& store_;
  std::function<void(std::function<void()>)> post_;
  std::string node_id_;
  int shards_;
};

}  // namespace delayd::store::testing
