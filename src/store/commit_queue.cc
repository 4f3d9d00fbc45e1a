#include "store/commit_queue.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <utility>
#include <variant>

#include "common/overloaded.h"
#include "common/thread_name.h"

namespace delayd::store {

namespace {

int64_t MicrosSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t)
      .count();
}

}  // namespace

CommitQueue::CommitQueue(Backend& backend, Options options, Executor executor)
    : backend_(backend),
      options_(options),
      executor_(std::move(executor)),
      spares_(std::make_shared<Spares>(options.max_batch)) {}

CommitQueue::Batch CommitQueue::Spares::Take() {
  std::lock_guard lock(mu_);
  if (kept_.empty()) return {};
  Batch b = std::move(kept_.back());
  kept_.pop_back();
  return b;
}

void CommitQueue::Spares::GiveBack(Batch b) {
  b.clear();
  if (b.capacity() == 0 || b.capacity() > keep_capacity_) return;
  std::lock_guard lock(mu_);
  if (kept_.size() < kKept) kept_.push_back(std::move(b));
}

CommitQueue::~CommitQueue() { Close(); }

void CommitQueue::Start() {
  writer_ = StartNamedThread("store-writer", [this] { WriterLoop(); });
  syncer_ = StartNamedThread("store-syncer", [this] { SyncerLoop(); });
}

void CommitQueue::Submit(Mutation m, Store::Done done) {
  Enqueue({std::move(m), {}, std::move(done), Status::Ok()});
}

void CommitQueue::SubmitAll(std::vector<Mutation> ms, Store::Done done) {
  if (ms.empty()) {
    executor_([done = std::move(done)] { done(Status::Ok()); });
    return;
  }
  Mutation first = std::move(ms.front());
  ms.erase(ms.begin());
  Enqueue({std::move(first), std::move(ms), std::move(done), Status::Ok()});
}

void CommitQueue::Enqueue(Submission s) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      // Nothing is accepted after Close(); tell the caller rather than drop it.
      executor_([done = std::move(s.done)] { done(Status::Unavailable("store closed")); });
      return;
    }
    if (!s.Lingers()) ++urgent_;
    if (queue_.size() == queue_.capacity() && queue_head_ > 0 && queue_head_ >= queue_.size() / 2) {
      // Full, and at least half of it a front the writer took: that goes
      // instead of the storage growing, so that a queue that never empties
      // (producers ahead of the writer) does not keep every submission it
      // ever held. Moving the rest costs no more than growing would, and at
      // least as many submissions come before the next time.
      queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(queue_head_));
      queue_head_ = 0;
    }
    queue_.push_back(std::move(s));
  }
  cv_.notify_one();
}

void CommitQueue::WriterLoop() {
  // The writer yields the CPU to the event loop: on a busy machine, firing
  // due jobs on time matters more than a commit a moment sooner (Linux nice
  // values are per thread).
  if (options_.writer_nice != 0 && setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)),
                                               options_.writer_nice) != 0) {
    spdlog::warn("store: cannot lower the writer thread's priority");
  }
  const auto sync_delay = std::chrono::milliseconds(options_.sync_delay_ms);
  for (;;) {
    Batch batch = spares_->Take();
    Batch spent;  // a drained burst's storage, freed outside the lock
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || Queued() > 0; });
      if (Queued() == 0) return;  // stopping, and everything is applied
      if (urgent_ == 0 && options_.linger_us > 0) {
        cv_.wait_for(lock, std::chrono::microseconds(options_.linger_us),
                     [&] { return stopping_ || urgent_ > 0 || Queued() >= options_.max_batch; });
      }
      if (queue_head_ == 0 && queue_.size() <= options_.max_batch) {
        batch.swap(queue_);
        urgent_ = 0;
      } else {
        // A burst beyond a batch (a kick of a million jobs) is taken a
        // batch at a time from a head that moves, not erased from the
        // front, which moved the whole rest every batch. (Enqueue drops the
        // taken front rather than grow the storage, moving the rest again:
        // amortised O(1) per submission.)
        const size_t n = std::min(Queued(), options_.max_batch);
        auto first = queue_.begin() + static_cast<std::ptrdiff_t>(queue_head_);
        auto end = first + static_cast<std::ptrdiff_t>(n);
        urgent_ -= static_cast<size_t>(
            std::count_if(first, end, [](const Submission& s) { return !s.Lingers(); }));
        batch.assign(std::make_move_iterator(first), std::make_move_iterator(end));
        queue_head_ += n;
        if (queue_head_ == queue_.size()) {
          // Drained: the burst's storage goes (a spare is never that large).
          spent.swap(queue_);
          queue_head_ = 0;
        }
      }
    }
    const auto started = std::chrono::steady_clock::now();
    Status s = backend_.Commit(batch);
    commit_seconds_.ObserveMicros(MicrosSince(started));
    // A refusal of one submission (a taken key, a lease moved) is its own.
    const bool failed = !s.ok() && !RefusedAlone(s);
    if (failed) spdlog::error("store: batch of {} failed: {}", batch.size(), s.ToString());
    {
      std::lock_guard lock(mu_);
      ++stats_.batches;
      stats_.mutations += batch.size();
      commit_failing_ = failed;
    }
    if (s.code() == StatusCode::kUnknown) {  // the COMMIT was sent, its answer lost
      SettleAndComplete(std::move(batch), s, true);
      continue;
    }
    if (!s.ok()) {  // rolled back: nothing to sync, everyone is told
      Complete(std::move(batch), s);
      continue;
    }
    // Written-only submissions are answered now; the rest once the syncer
    // has synced this commit. The writer goes on meanwhile.
    const size_t batch_size = batch.size();
    Batch written = spares_->Take(), synced = spares_->Take();
    for (auto& p : batch) {
      bool w = options_.sync_delay_ms > 0;
      p.ForEach([&](const Mutation& m) { w = w && m.durability == Durability::kWritten; });
      (w ? written : synced).push_back(std::move(p));
    }
    spares_->GiveBack(std::move(batch));
    if (written.empty()) {
      spares_->GiveBack(std::move(written));
    } else {
      Complete(std::move(written), Status::Ok());
    }
    // A lone submission owed a sync at once with nothing queued behind it
    // (a serial producer's put) is synced here when the syncer is idle: a
    // hand-off to the syncer and its wake-up cost as much as a fast disk's
    // sync. Under load the syncer takes each sync, so that the next batch
    // commits meanwhile, as group commit wants.
    const bool owed_now = !synced.empty();
    bool alone = false;
    if (owed_now && batch_size == 1) {
      std::lock_guard lock(mu_);
      alone = Queued() == 0;
    }
    // The syncer is woken only when this commit changes what it waits for:
    // a sync owed at once, or the first commit owed one. A wake-up per
    // commit cost a context switch per delete of a serial consumer.
    bool wake = owed_now;
    std::optional<uint64_t> sync_here;
    {
      std::lock_guard lock(sync_mu_);
      ++committed_;
      if (owed_now) awaiting_.push_back({committed_, std::move(synced)});
      if (alone && !syncing_) {
        syncing_ = true;
        sync_here = committed_;
        sync_by_.reset();
        wake = false;
      } else if (!sync_by_) {
        sync_by_ = std::chrono::steady_clock::now() + sync_delay;
        wake = true;
      }
    }
    if (!owed_now) spares_->GiveBack(std::move(synced));
    if (sync_here) {
      SyncThrough(*sync_here, false, true);
    } else if (wake) {
      sync_cv_.notify_one();
    }
  }
}

void CommitQueue::SyncerLoop() {
  using Clock = std::chrono::steady_clock;
  for (;;) {
    uint64_t target = 0;
    bool stopping = false;
    {
      std::unique_lock lock(sync_mu_);
      for (;;) {
        const bool owed = committed_ > synced_;
        stopping = sync_stopping_;
        const auto due = sync_by_.value_or(Clock::now());  // set whenever one is owed
        if (!syncing_ && owed && (!awaiting_.empty() || stopping || Clock::now() >= due)) break;
        if (!syncing_ && !owed && stopping) return;
        if (owed && !syncing_) {
          sync_cv_.wait_until(lock, due);
        } else {
          sync_cv_.wait(lock);  // for a commit, or for the writer's sync to end
        }
      }
      target = committed_;
      sync_by_.reset();
      syncing_ = true;
    }
    SyncThrough(target, stopping, false);
  }
}

void CommitQueue::SyncThrough(uint64_t target, bool stopping, bool on_writer) {
  using Clock = std::chrono::steady_clock;
  // Commits the writer makes during this sync wait for the next one.
  const auto started = Clock::now();
  Status s = backend_.Sync();
  sync_seconds_.ObserveMicros(MicrosSince(started));
  {
    std::lock_guard lock(mu_);
    if (s.ok()) ++stats_.syncs;
    sync_failing_ = !s.ok();
  }
  if (!s.ok()) spdlog::error("store: {}", s.ToString());
  Batch answered = spares_->Take();
  bool wake = false;
  {
    std::lock_guard lock(sync_mu_);
    syncing_ = false;
    if (s.ok() || stopping) {
      synced_ = target;  // on a failure at close, there is no one left to retry for
    } else if (!sync_by_) {
      sync_by_ = Clock::now() + std::chrono::milliseconds(options_.sync_delay_ms);  // try again
    }
    while (!awaiting_.empty() && awaiting_.front().commit <= target) {
      Batch& done = awaiting_.front().submissions;
      if (answered.empty()) {
        answered.swap(done);
      } else {
        std::move(done.begin(), done.end(), std::back_inserter(answered));
      }
      spares_->GiveBack(std::move(done));
      awaiting_.pop_front();
    }
    // After the writer's sync, the syncer may have waited for it to end with
    // a sync owed (a retry, or a written commit's deadline).
    wake = on_writer && (committed_ > synced_ || sync_by_.has_value());
  }
  if (wake) sync_cv_.notify_one();
  if (answered.empty()) return spares_->GiveBack(std::move(answered));
  if (s.ok() || stopping) {
    Complete(std::move(answered), s);
  } else {
    SettleAndComplete(std::move(answered), s, false);
  }
}

void CommitQueue::SettleAndComplete(Batch batch, const Status& failure, bool commit_in_flight) {
  // Until the backend says otherwise, each write failed; kUnknown is only
  // for what the backend could not learn.
  const Status failed =
      failure.code() == StatusCode::kUnknown ? Status::IoError(failure.message()) : failure;
  for (Submission& p : batch) {
    if (p.status.ok()) p.status = failed;
  }
  backend_.Settle(batch, commit_in_flight);
  Complete(std::move(batch), Status::Ok());  // each submission's own status
}

bool CommitQueue::Submission::Lingers() const {
  bool all = true;
  ForEach([&](const Mutation& m) { all = all && m.lingers; });
  return all;
}

bool CommitQueue::Submission::MayConflict() const {
  bool may = false;
  ForEach([&](const Mutation& m) {
    may =
        may || std::visit(Overloaded{
                              [](const change::InsertJob& c) { return !c.job.key.empty(); },
                              [](const change::UpdateJob& c) { return c.if_version.has_value(); },
                              [](const change::ReplaceJob& c) { return c.if_version.has_value(); },
                              [](const change::DeleteJob& c) { return c.if_version.has_value(); },
                              [](const change::PutTimer&) { return true; },
                              [](const change::AdvanceTimer&) { return true; },
                              [](const change::PromoteDue&) { return true; },
                              [](const change::RequeueExpired&) { return true; },
                              [](const auto&) { return false; },
                          },
                          m.change);
  });
  return may;
}

bool CommitQueue::Submission::CheckedInOneStatement() const {
  if (!more.empty()) return false;
  return std::visit(Overloaded{
                        [](const change::UpdateJob& c) { return c.if_version.has_value(); },
                        [](const change::DeleteJob& c) { return c.if_version.has_value(); },
                        [](const change::PromoteDue&) { return true; },
                        [](const change::RequeueExpired&) { return true; },
                        [](const auto&) { return false; },
                    },
                    mutation.change);
}

void CommitQueue::Complete(Batch batch, const Status& s) {
  executor_([batch = std::make_shared<Batch>(std::move(batch)), s, spares = spares_] {
    for (auto& p : *batch) p.done(s.ok() ? p.status : s);
    spares->GiveBack(std::move(*batch));
  });
}

StoreStats CommitQueue::stats() const {
  StoreStats out;
  {
    std::lock_guard lock(mu_);
    out = stats_;
    out.queued = Queued();
    out.failing = commit_failing_ || sync_failing_;
  }
  out.commit_seconds = commit_seconds_.Read();
  out.sync_seconds = sync_seconds_.Read();
  return out;
}

void CommitQueue::Close() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !writer_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_one();
  if (writer_.joinable()) writer_.join();
  // The writer is done; the syncer syncs what it committed, answers, stops.
  {
    std::lock_guard lock(sync_mu_);
    sync_stopping_ = true;
  }
  sync_cv_.notify_one();
  if (syncer_.joinable()) syncer_.join();
}

}  // namespace delayd::store
