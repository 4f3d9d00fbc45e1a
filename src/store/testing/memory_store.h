// Test support: a Store held in memory that models what the disk keeps, so
// a unit test can crash or cut the power and see exactly what a real store
// would bring back.
//
// Submissions queue until the executor runs the commit it posts, as the
// SQLite store's writer thread would commit them: in order, each
// submission all or nothing. A committed change is "written" (it survives
// Crash(), as a kill -9 keeps what reached the operating system); it is
// "synced" (it survives PowerCut()) once a commit holding a kSynced mutation,
// or SyncNow(), comes after it, since a sync covers everything before it.
//
// Rows have versions as PostgreSQL's do (JobRecord::version): every change
// of a row raises it, and a change made IfVersion(v) is refused with
// kConflict unless the row is still at v (MemorySharedQueue builds cluster
// mode's claims on this).
//
// Single-threaded: every call, and every callback, on the test's thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "store/store.h"

namespace delayd::store::testing {

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(std::function<void(std::function<void()>)> post) : post_(std::move(post)) {}

  // kill -9: submissions not yet committed are gone, unanswered.
  void Crash() {
    queue_.clear();
    commit_posted_ = false;
  }
  // Power loss: as Crash(), and every change not yet synced is gone too.
  void PowerCut() {
    Crash();
    written_ = synced_;
  }
  void SyncNow() {
    synced_ = written_;
    ++stats_.syncs;
  }
  // Submissions not yet committed.
  size_t queued() const { return queue_.size(); }
  // While set, every submission fails as a full disk would, changing nothing.
  bool failing = false;

  // The committed rows, for MemorySharedQueue and for a test that acts as
  // another node would: a change made here is written, not yet synced.
  std::map<uint64_t, JobRecord>& rows() { return written_.jobs; }
  const std::map<std::string, TubePause>& pauses() const { return written_.pauses; }
  const std::map<std::string, std::string>& settings() const { return written_.settings; }

  Result<Recovered> Recover(int64_t horizon_minute) override {
    Recovered r;
    std::map<std::pair<std::string, int64_t>, uint64_t> far;
    std::map<std::pair<std::string, JobSet>, SetCount> sets;
    for (const auto& [id, j] : written_.jobs) {
      if (j.state == StoredState::kDone) continue;
      if (j.state == StoredState::kDelayed && DueMinute(j.due_ms) > horizon_minute) {
        ++far[{j.tube, DueHour(j.due_ms)}];
      } else if (std::optional<JobSet> set = SetOf(j)) {
        SetCount& c = sets[{j.tube, *set}];
        ++c.jobs;
        c.urgent += *set != JobSet::kBuried && j.priority < 1024 ? 1 : 0;
        r.max_bury_seq = std::max(r.max_bury_seq, j.bury_seq);
      } else {
        r.jobs.push_back(j);
      }
    }
    for (auto& [at, c] : sets) {
      c.tube = at.first;
      c.set = at.second;
      r.sets.push_back(c);
    }
    for (const auto& [at, n] : far) r.far.push_back({at.first, at.second, n});
    for (const auto& [tube, p] : written_.pauses) r.pauses.push_back(p);
    for (const auto& [tube, s] : written_.settings) r.settings.push_back({tube, s});
    r.next_id = written_.next_id;
    r.next_timer_id = written_.next_timer_id;
    return r;
  }

  // Mutations submitted to linger for company (Mutation::lingers).
  uint64_t lingering_submitted = 0;

  void Submit(Mutation m, Done done) override {
    std::vector<Mutation> ms;
    ms.push_back(std::move(m));
    SubmitAll(std::move(ms), std::move(done));
  }
  void SubmitAll(std::vector<Mutation> ms, Done done) override {
    if (failing) {
      post_([done = std::move(done)] { done(Status::IoError("disk full (simulated)")); });
      return;
    }
    for (const Mutation& m : ms) lingering_submitted += m.lingers ? 1 : 0;
    queue_.push_back({std::move(ms), std::move(done)});
    if (commit_posted_) return;
    commit_posted_ = true;
    post_([this] { Commit(); });
  }

  Result<std::optional<JobRecord>> Get(uint64_t id) override {
    auto it = written_.jobs.find(id);
    if (it == written_.jobs.end()) return std::optional<JobRecord>();
    return std::optional<JobRecord>(it->second);
  }
  Result<std::optional<JobRecord>> GetByKey(const std::string& tube,
                                            const std::string& key) override {
    for (const auto& [id, j] : written_.jobs) {
      if (j.tube == tube && !key.empty() && j.key == key) return std::optional<JobRecord>(j);
    }
    return std::optional<JobRecord>();
  }
  Result<std::vector<ErrorGroup>> BuriedByError(const std::optional<std::string>& tube,
                                                size_t limit) override {
    std::map<std::string, ErrorGroup> groups;
    for (const auto& [id, j] : written_.jobs) {
      if (j.state != StoredState::kBuried || (tube && j.tube != *tube)) continue;
      ErrorGroup& g = groups[j.last_error];
      if (g.count++ == 0) g.first_id = id;
      g.error = j.last_error;
    }
    std::vector<ErrorGroup> out;
    for (auto& [e, g] : groups) out.push_back(g);
    std::stable_sort(out.begin(), out.end(),
                     [](const ErrorGroup& a, const ErrorGroup& b) { return a.count > b.count; });
    if (out.size() > limit) out.resize(limit);
    return out;
  }
  Result<std::vector<uint64_t>> DueCounts(int64_t now, int64_t from, int64_t width, size_t n,
                                          const std::optional<std::string>& tube) override {
    std::vector<uint64_t> out(n);
    for (const auto& [id, j] : written_.jobs) {
      const int64_t b = (DueMinute(j.due_ms) - from) / width;
      if (j.state != StoredState::kDelayed || (tube && j.tube != *tube)) continue;
      if (j.due_ms >= now && b < static_cast<int64_t>(n)) ++out[static_cast<size_t>(b)];
    }
    return out;
  }
  Result<std::vector<JobRecord>> List(const ListQuery& q) override {
    std::vector<JobRecord> out;
    for (auto it = written_.jobs.upper_bound(q.after_id);
         it != written_.jobs.end() && out.size() < q.limit; ++it) {
      const JobRecord& j = it->second;
      if (q.tube && j.tube != *q.tube) continue;
      if (q.state && j.state != *q.state) continue;
      if (j.key.compare(0, q.key_prefix.size(), q.key_prefix) != 0) continue;
      if (q.due_after_ms && j.due_ms < *q.due_after_ms) continue;
      if (q.due_before_ms && j.due_ms >= *q.due_before_ms) continue;
      if (j.last_error.find(q.error_contains) == std::string::npos) continue;
      out.push_back(j);
    }
    return out;
  }
  Result<std::vector<JobRecord>> LoadMinute(int64_t minute, uint64_t after_id,
                                            size_t limit) override {
    std::vector<JobRecord> out;
    for (auto it = written_.jobs.upper_bound(after_id);
         it != written_.jobs.end() && out.size() < limit; ++it) {
      const JobRecord& j = it->second;
      if (j.state == StoredState::kDelayed && DueMinute(j.due_ms) == minute) out.push_back(j);
    }
    return out;
  }
  bool ScansSets() const override { return true; }
  Result<std::vector<JobRecord>> ScanSet(const std::string& tube, JobSet set, SetKey after,
                                         size_t limit) override {
    std::vector<std::pair<SetKey, const JobRecord*>> found;
    for (const auto& [id, j] : written_.jobs) {
      if (j.tube != tube || SetOf(j) != set) continue;
      const SetKey key = KeyOf(j);
      if (key > after) found.emplace_back(key, &j);
    }
    std::sort(found.begin(), found.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<JobRecord> out;
    for (size_t i = 0; i < found.size() && i < limit; ++i) out.push_back(*found[i].second);
    return out;
  }
  // Read at once (what is written now), answered through the executor, as
  // if SQLite's thread for them had read at once.
  std::shared_ptr<SetRead> ScanSetAhead(const std::string& tube, JobSet set, SetKey after,
                                        size_t limit, std::function<void()> ready) override {
    auto read = std::make_shared<SetRead>();
    read->Set(ScanSet(tube, set, after, limit));
    post_(std::move(ready));
    return read;
  }
  Result<std::vector<JobRecord>> FarDelayed(const std::string& tube, int64_t after_minute,
                                            size_t limit) override {
    std::vector<JobRecord> out;
    for (const auto& [id, j] : written_.jobs) {
      if (j.tube == tube && j.state == StoredState::kDelayed &&
          DueMinute(j.due_ms) > after_minute) {
        out.push_back(j);
      }
    }
    std::sort(out.begin(), out.end(), [](const JobRecord& a, const JobRecord& b) {
      return a.due_ms != b.due_ms ? a.due_ms < b.due_ms : a.id < b.id;
    });
    if (out.size() > limit) out.resize(limit);
    return out;
  }

  Result<std::optional<TimerRecord>> GetTimer(uint64_t id) override {
    auto it = written_.timers.find(id);
    if (it == written_.timers.end()) return std::optional<TimerRecord>();
    return std::optional<TimerRecord>(it->second);
  }
  Result<std::optional<TimerRecord>> GetTimerByName(const std::string& name) override {
    for (const auto& [id, t] : written_.timers) {
      if (t.name == name) return std::optional<TimerRecord>(t);
    }
    return std::optional<TimerRecord>();
  }
  Result<std::vector<TimerRecord>> ListTimers(uint64_t after_id, size_t limit) override {
    std::vector<TimerRecord> out;
    for (auto it = written_.timers.upper_bound(after_id);
         it != written_.timers.end() && out.size() < limit; ++it) {
      out.push_back(it->second);
    }
    return out;
  }
  Result<std::vector<TimerRecord>> TimersDue(int64_t from_ms, uint64_t after_id, int64_t before_ms,
                                             size_t limit) override {
    std::vector<TimerRecord> out;
    for (const auto& [id, t] : written_.timers) {
      if (t.next_fire_ms == 0 || t.next_fire_ms >= before_ms) continue;
      if (std::make_pair(t.next_fire_ms, id) <= std::make_pair(from_ms, after_id)) continue;
      out.push_back(t);
    }
    std::sort(out.begin(), out.end(), [](const TimerRecord& a, const TimerRecord& b) {
      return std::make_pair(a.next_fire_ms, a.id) < std::make_pair(b.next_fire_ms, b.id);
    });
    if (out.size() > limit) out.resize(limit);
    return out;
  }
  Result<uint64_t> NextTimerId() override { return written_.next_timer_id; }
  Result<std::vector<TimerFire>> TimerFires(uint64_t timer_id, size_t limit) override {
    std::vector<TimerFire> out;
    for (auto it = written_.fires.rbegin(); it != written_.fires.rend() && out.size() < limit;
         ++it) {
      if (it->first.first == timer_id) out.push_back(it->second);
    }
    return out;
  }

  StoreStats stats() const override { return stats_; }
  void Close() override {
    while (!queue_.empty()) Commit();
  }

 private:
  // The set a stored job is in, as SqliteStore's indexes see it.
  static std::optional<JobSet> SetOf(const JobRecord& j) {
    if (j.state == StoredState::kBuried) return JobSet::kBuried;
    if (j.state != StoredState::kReady) return std::nullopt;
    return j.push ? JobSet::kPushReady : JobSet::kReady;
  }
  static SetKey KeyOf(const JobRecord& j) {
    return {j.state == StoredState::kBuried ? j.bury_seq : j.priority, j.id};
  }

  struct State {
    std::map<uint64_t, JobRecord> jobs;
    std::map<std::string, TubePause> pauses;
    std::map<std::string, std::string> settings;
    std::map<uint64_t, TimerRecord> timers;
    std::map<std::pair<uint64_t, int64_t>, TimerFire> fires;  // by (timer, fire time)
    uint64_t next_id = 1;
    uint64_t next_timer_id = 1;
  };
  struct Queued {
    std::vector<Mutation> ms;
    Done done;
  };

  // Commits everything queued, one submission at a time, then answers.
  void Commit() {
    commit_posted_ = false;
    std::deque<Queued> batch;
    batch.swap(queue_);
    bool sync = false;
    std::vector<std::pair<Done, Status>> answers;
    for (Queued& q : batch) {
      State next = written_;
      Status s = Status::Ok();
      for (const Mutation& m : q.ms) {
        s = Apply(next, m);
        if (!s.ok()) break;
        sync = sync || m.durability == Durability::kSynced;
      }
      if (s.ok()) {
        written_ = std::move(next);
        stats_.mutations += q.ms.size();
      }
      answers.emplace_back(std::move(q.done), s);
    }
    ++stats_.batches;
    if (sync) SyncNow();
    for (auto& [done, s] : answers) done(s);
  }

  // The row a guarded change may change: kConflict when `if_version` is set
  // and the row is gone or at another version.
  static Status Guard(const State& st, uint64_t id, const std::optional<uint64_t>& if_version) {
    if (!if_version) return Status::Ok();
    auto it = st.jobs.find(id);
    if (it == st.jobs.end() || it->second.version != *if_version) {
      return Status::Conflict("job " + std::to_string(id) + " changed since version " +
                              std::to_string(*if_version));
    }
    return Status::Ok();
  }

  static Status Apply(State& st, const Mutation& m) {
    return std::visit(
        [&](const auto& c) -> Status {
          using C = std::decay_t<decltype(c)>;
          if constexpr (std::is_same_v<C, change::InsertJob> ||
                        std::is_same_v<C, change::ReplaceJob>) {
            uint64_t version = c.job.version;
            if constexpr (std::is_same_v<C, change::ReplaceJob>) {
              if (Status g = Guard(st, c.job.id, c.if_version); !g.ok()) return g;
              auto old = st.jobs.find(c.job.id);
              version = old != st.jobs.end() ? old->second.version + 1 : 0;
            }
            if (!c.job.key.empty()) {
              for (const auto& [id, j] : st.jobs) {
                if (id != c.job.id && j.tube == c.job.tube && j.key == c.job.key) {
                  return Status::Conflict("key taken");
                }
              }
            }
            st.jobs[c.job.id] = c.job;
            st.jobs[c.job.id].version = version;
            st.next_id = std::max(st.next_id, c.job.id + 1);
          } else if constexpr (std::is_same_v<C, change::UpdateJob>) {
            if (Status g = Guard(st, c.job.id, c.if_version); !g.ok()) return g;
            auto it = st.jobs.find(c.job.id);
            if (it == st.jobs.end()) return Status::Ok();  // as UPDATE of no row
            JobRecord& j = it->second;
            j.priority = c.job.priority;
            j.state = c.job.state;
            j.due_ms = c.job.due_ms;
            j.delay_ms = c.job.delay_ms;
            j.ttr_ms = c.job.ttr_ms;
            j.counters = c.job.counters;
            j.attempt_log = c.job.attempt_log;
            j.last_error = c.job.last_error;
            j.done_ms = c.job.state == StoredState::kDone ? c.job.done_ms : 0;
            j.reserved_by = c.job.reserved_by;
            j.deadline_ms = c.job.deadline_ms;
            ++j.version;
          } else if constexpr (std::is_same_v<C, change::DeleteJob>) {
            if (Status g = Guard(st, c.id, c.if_version); !g.ok()) return g;
            st.jobs.erase(c.id);
          } else if constexpr (std::is_same_v<C, change::PauseTube>) {
            st.pauses[c.tube] = TubePause{c.tube, c.pause_ms, c.unpause_ms};
          } else if constexpr (std::is_same_v<C, change::SetTopicSettings>) {
            if (c.settings.empty()) {
              st.settings.erase(c.tube);
            } else {
              st.settings[c.tube] = c.settings;
            }
          } else if constexpr (std::is_same_v<C, change::PurgeDone>) {
            std::erase_if(st.jobs, [&](const auto& kv) {
              return kv.second.state == StoredState::kDone && kv.second.done_ms < c.before_ms;
            });
          } else if constexpr (std::is_same_v<C, change::PutTimer>) {
            for (const auto& [id, t] : st.timers) {
              if (id != c.timer.id && t.name == c.timer.name) return Status::Conflict("name taken");
            }
            st.timers[c.timer.id] = c.timer;
            st.next_timer_id = std::max(st.next_timer_id, c.timer.id + 1);
          } else if constexpr (std::is_same_v<C, change::DeleteTimer>) {
            st.timers.erase(c.id);
            std::erase_if(st.fires, [&](const auto& kv) { return kv.first.first == c.id; });
          } else if constexpr (std::is_same_v<C, change::AdvanceTimer>) {
            auto it = st.timers.find(c.id);
            if (it == st.timers.end()) return Status::Conflict("advance timer: no such timer");
            it->second.next_fire_ms = c.next_fire_ms;
            it->second.last_fire_ms = c.last_fire_ms;
            for (const TimerFire& f : c.fires) {
              if (!st.fires.emplace(std::make_pair(f.timer_id, f.fire_ms), f).second) {
                return Status::Conflict("fire time recorded before");
              }
            }
            // Only the latest kTimerFiresKept fires of a timer are kept.
            auto first = st.fires.lower_bound({c.id, INT64_MIN});
            auto end = st.fires.lower_bound({c.id + 1, INT64_MIN});
            for (auto n = std::distance(first, end); n > kTimerFiresKept; --n) {
              first = st.fires.erase(first);
            }
          }
          return Status::Ok();
        },
        m.change);
  }

  std::function<void(std::function<void()>)> post_;
  State written_;  // what survives a kill -9
  State synced_;   // what survives a power cut
  std::deque<Queued> queue_;
  bool commit_posted_ = false;
  StoreStats stats_;
};

}  // namespace delayd::store::testing
