// Test support: a store that fails every submission on demand, as a full
// disk would, and otherwise forwards to a real one, counting the
// submissions not yet answered.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/executor.h"
#include "store/store.h"

namespace delayd::store::testing {

// Forwards to a real store, but fails every submission while `failing` is set,
// as a full disk would (the mutation is not applied), and the loaders' reads
// (timers, and the horizon's) while `reads_failing` is set, as an
// unreachable database would.
class FlakyStore final : public Store {
 public:
  explicit FlakyStore(Store& real, Executor post) : real_(real), post_(std::move(post)) {}
  // When set, Recover answers these rows instead of the real store's: rows
  // another store could hold that the real one's constraints refuse
  // (fuzz/rows_fuzz.cc).
  std::optional<Recovered> recovered;
  Result<Recovered> Recover(int64_t m) override {
    if (recovered) return *recovered;
    return real_.Recover(m);
  }
  void Submit(Mutation m, Done done) override {
    if (failing) {
      ++failed_submissions;
      post_([done = std::move(done)] { done(Status::IoError("disk full (simulated)")); });
      return;
    }
    real_.Submit(std::move(m), Counted(std::move(done)));
  }
  void SubmitAll(std::vector<Mutation> ms, Done done) override {
    if (failing) {
      ++failed_submissions;
      post_([done = std::move(done)] { done(Status::IoError("disk full (simulated)")); });
      return;
    }
    real_.SubmitAll(std::move(ms), Counted(std::move(done)));
  }
  Result<std::optional<JobRecord>> Get(uint64_t id) override { return real_.Get(id); }
  Result<std::optional<JobRecord>> GetByKey(const std::string& t, const std::string& k) override {
    return real_.GetByKey(t, k);
  }
  Result<std::vector<JobRecord>> List(const ListQuery& q) override { return real_.List(q); }
  Result<std::vector<ErrorGroup>> BuriedByError(const std::optional<std::string>& tube,
                                                size_t limit) override {
    return real_.BuriedByError(tube, limit);
  }
  Result<std::vector<uint64_t>> DueCounts(int64_t now, int64_t from, int64_t width, size_t n,
                                          const std::optional<std::string>& tube) override {
    return real_.DueCounts(now, from, width, n, tube);
  }
  bool ScansSets() const override { return real_.ScansSets(); }
  Result<std::vector<JobRecord>> ScanSet(const std::string& tube, JobSet set, SetKey after,
                                         size_t limit) override {
    ++set_scans;
    if (reads_failing) return Status::IoError("injected read failure");
    return real_.ScanSet(tube, set, after, limit);
  }
  // Held back reads (defer_reads) go aside instead, as PostgreSQL's do.
  std::shared_ptr<SetRead> ScanSetAhead(const std::string& tube, JobSet set, SetKey after,
                                        size_t limit, std::function<void()> ready) override {
    if (defer_reads) return nullptr;
    ++set_scans;
    if (!reads_failing) return real_.ScanSetAhead(tube, set, after, limit, std::move(ready));
    auto read = std::make_shared<SetRead>();
    read->Set(Status::IoError("injected read failure"));
    post_(std::move(ready));
    return read;
  }
  Result<std::vector<JobRecord>> LoadMinute(int64_t m, uint64_t a, size_t l) override {
    last_load_minute_ = m;
    if (reads_failing) return Status::IoError("injected read failure");
    return real_.LoadMinute(m, a, l);
  }
  // While `defer_reads` is set, a read aside is made at once and answered
  // only at DeliverReads, as a store reading on a thread of its own may.
  void ReadAside(std::function<void()> read, std::function<void()> then) override {
    if (!defer_reads) return real_.ReadAside(std::move(read), std::move(then));
    read();
    deferred_.push_back(std::move(then));
  }
  void DeliverReads() {
    auto answers = std::move(deferred_);
    deferred_.clear();
    for (auto& then : answers) then();
  }
  // Answers the oldest read held back.
  void DeliverOneRead() {
    auto then = std::move(deferred_.front());
    deferred_.erase(deferred_.begin());
    then();
  }
  size_t reads_deferred() const { return deferred_.size(); }
  // The minute the latest LoadMinute asked for.
  int64_t last_load_minute() const { return last_load_minute_; }
  Result<std::vector<JobRecord>> FarDelayed(const std::string& t, int64_t a, size_t l) override {
    return real_.FarDelayed(t, a, l);
  }
  Result<std::optional<TimerRecord>> GetTimer(uint64_t id) override { return real_.GetTimer(id); }
  Result<std::optional<TimerRecord>> GetTimerByName(const std::string& n) override {
    return real_.GetTimerByName(n);
  }
  Result<std::vector<TimerRecord>> ListTimers(uint64_t a, size_t l) override {
    return real_.ListTimers(a, l);
  }
  Result<std::vector<TimerRecord>> TimersDue(int64_t f, uint64_t a, int64_t b, size_t l) override {
    if (reads_failing) return Status::IoError("injected read failure");
    return real_.TimersDue(f, a, b, l);
  }
  Result<uint64_t> NextTimerId() override { return real_.NextTimerId(); }
  Result<std::vector<TimerFire>> TimerFires(uint64_t id, size_t l) override {
    return real_.TimerFires(id, l);
  }
  StoreStats stats() const override { return real_.stats(); }
  void Close() override { real_.Close(); }
  bool failing = false;
  bool reads_failing = false;
  bool defer_reads = false;
  size_t set_scans = 0;           // ScanSet and ScanSetAhead calls, failed ones too
  size_t failed_submissions = 0;  // Submit and SubmitAll calls failed while `failing`
  // Submissions forwarded and not yet answered.
  size_t pending() const { return pending_; }

 private:
  Done Counted(Done done) {
    ++pending_;
    return [this, done = std::move(done)](const Status& s) {
      --pending_;
      done(s);
    };
  }

  Store& real_;
  Executor post_;
  size_t pending_ = 0;  // answers run on the engine's thread, like the calls
  std::vector<std::function<void()>> deferred_;
  int64_t last_load_minute_ = -1;
};

}  // namespace delayd::store::testing
