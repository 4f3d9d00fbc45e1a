// CommitQueue: group commit, for any store. Submissions queue from any
// thread; a writer thread takes everything queued (up to max_batch) and hands
// it to the store's Backend to commit as one transaction; a syncer thread
// makes commits durable, so the writer goes on with the next batch during a
// sync. Callbacks run on the completion executor, in submission order within
// a batch.
//
// When a submission is answered (Store's Durability):
//   - every mutation kSynced (or sync_delay_ms 0): after the sync that covers
//     its commit;
//   - every mutation kWritten: right after its commit, and the commit is
//     synced at most sync_delay_ms later.
// A batch whose every submission lingers (Mutation::lingers: answered by
// its caller already) waits up to linger_us for more before it commits, and
// commits at once when one that does not linger comes: under a trickle of
// such changes (a serial consumer's deletes in cluster mode) a transaction
// then carries several rather than one each.
// A sync covers every commit before it, so a power cut loses a suffix of the
// commits, never a hole. A commit of one submission owed its sync at once
// (one producer's put), with nothing queued behind it and the syncer idle, is
// synced by the writer itself: one thread hand-off fewer on a serial
// producer's path.
//
// Batches are vectors whose storage goes round between the threads rather
// than being freed (Spares): a submission is queued on one thread and
// answered on another, and glibc's free of memory another thread allocated
// takes that thread's arena lock. With a node per submission (a deque), the
// writer slept on that lock more often than it waited for work in a
// backlog's drain (bench/README.md, "Batches reuse their storage").
//
// The queue knows nothing of SQL. A backend has two steps: Commit (the batch
// reaches a place where a crash of this process no longer loses it: the
// operating system for SQLite, the database server for PostgreSQL) and Sync
// (every commit so far survives a power cut: fsync of SQLite's log; for
// PostgreSQL a commit with synchronous_commit on, which flushes the WAL of
// every earlier asynchronous commit too).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/executor.h"
#include "common/histogram.h"
#include "store/store.h"

namespace delayd::store {

class CommitQueue {
 public:
  // One submission: a mutation, or several that commit together.
  struct Submission {
    Mutation mutation;
    std::vector<Mutation> more;
    Store::Done done;
    Status status;  // set by the backend when this submission alone failed

    // Calls f on each mutation of the submission, in order.
    template <typename F>
    void ForEach(F&& f) const {
      f(mutation);
      for (const Mutation& m : more) f(m);
    }
    // Whether it can fail alone: a taken key, name or fire time, a timer to
    // advance that is gone, a job changed since the version it requires, or
    // a fenced write of a lease lost. A backend gives such a submission a
    // savepoint when it shares a batch, so that it fails without the rest,
    // unless it is checked in one statement (below).
    bool MayConflict() const;
    // Whether each of its mutations lingers (Mutation::lingers).
    bool Lingers() const;
    // Whether it is one change whose check is made in the one statement that
    // applies it, so that failing the check changes nothing: a guarded update
    // or delete of a job, or a fenced write. Its failure shows in the rows
    // the statement changed, with no savepoint.
    bool CheckedInOneStatement() const;
  };
  using Batch = std::vector<Submission>;

  class Backend {
   public:
    virtual ~Backend() = default;
    // Applies `batch` in order in one transaction and commits it. A submission
    // that fails alone (kConflict: a taken key or name) sets its `status`
    // and the rest commit; any other failure rolls back the whole batch and
    // is returned. Runs on the writer thread only.
    virtual Status Commit(Batch& batch) = 0;
    // Makes every commit so far survive a power cut. Runs on the syncer
    // thread, concurrently with Commit, or on the writer thread between two
    // commits (a commit of one submission owed its sync at once while the
    // syncer is idle); never two at once.
    virtual Status Sync() = 0;
    // A failure that leaves an outcome in doubt: Commit returned kUnknown
    // (the connection broke with the COMMIT sent), or a Sync failed (the
    // server may have lost commits it acknowledged). Each submission of
    // `batch` holds the failure in `status`. The backend finds out, within
    // a bounded time, what the store kept: it sets `status` to OK for each
    // submission whose writes are in the store and now durable, leaves the
    // failure where they are not, and sets kUnknown (with the job ids) where
    // it could not tell. `commit_in_flight`: called by the writer for a
    // Commit's kUnknown. By default nothing can be learned, and each failure
    // stands. Runs on the thread whose step failed.
    virtual void Settle(Batch& batch, bool commit_in_flight) {
      (void)batch;
      (void)commit_in_flight;
    }
  };

  struct Options {
    size_t max_batch = 8192;  // submissions per transaction at most
    // The longest a commit of only kWritten mutations waits for its sync; 0
    // syncs every batch before any of its callbacks (every mutation kSynced).
    int64_t sync_delay_ms = kDefaultSyncDelayMs;
    int writer_nice = 0;    // CPU priority of the writer thread, relative to the process
    int64_t linger_us = 0;  // the longest a batch of lingering submissions waits for more
  };

  CommitQueue(Backend& backend, Options options, Executor executor);
  ~CommitQueue();  // Close()
  CommitQueue(const CommitQueue&) = delete;
  CommitQueue& operator=(const CommitQueue&) = delete;

  // Starts the writer and the syncer.
  void Start();
  // Thread-safe. After Close(), answers kUnavailable.
  void Submit(Mutation m, Store::Done done);
  void SubmitAll(std::vector<Mutation> ms, Store::Done done);
  // Commits and syncs everything queued, answers it, and stops the threads.
  void Close();
  StoreStats stats() const;
  // Tests only: the submissions the queue's storage holds, those the writer
  // already took from its front included.
  size_t SlotsForTest() const {
    std::lock_guard lock(mu_);
    return queue_.size();
  }

 private:
  void Enqueue(Submission s);
  size_t Queued() const { return queue_.size() - queue_head_; }  // with mu_ held
  void WriterLoop();
  void SyncerLoop();
  // Syncs every commit through `target` and answers the submissions that
  // waited for it. On the syncer, or on the writer (`on_writer`) for a lone
  // submission; never both at once (syncing_).
  void SyncThrough(uint64_t target, bool stopping, bool on_writer);
  // Runs the callbacks of `batch` on the executor.
  void Complete(Batch batch, const Status& s);
  // Backend::Settle, then Complete with each submission's status.
  void SettleAndComplete(Batch batch, const Status& failure, bool commit_in_flight);

  // Emptied batches, kept for the next ones. Thread-safe; shared with the
  // callbacks on the executor, which may run after the queue is gone.
  class Spares {
   public:
    explicit Spares(size_t keep_capacity) : keep_capacity_(keep_capacity) {}
    Batch Take();
    // Destroys b's submissions on the calling thread and keeps its storage,
    // unless enough are kept or it grew beyond a full batch.
    void GiveBack(Batch b);

   private:
    static constexpr size_t kKept = 4;
    const size_t keep_capacity_;
    std::mutex mu_;
    std::vector<Batch> kept_;  // guarded by mu_
  };

  Backend& backend_;
  const Options options_;
  const Executor executor_;
  const std::shared_ptr<Spares> spares_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Batch queue_;                  // guarded by mu_; queued from queue_head_ on
  size_t queue_head_ = 0;        // guarded by mu_: taken by the writer before it
  size_t urgent_ = 0;            // guarded by mu_: submissions in queue_ that do not linger
  bool stopping_ = false;        // guarded by mu_
  StoreStats stats_;             // guarded by mu_; the rest is filled by stats()
  bool commit_failing_ = false;  // guarded by mu_: the last commit failed
  bool sync_failing_ = false;    // guarded by mu_: the last sync failed
  Histogram commit_seconds_{Histogram::LatencyBounds()};
  Histogram sync_seconds_{Histogram::LatencyBounds()};
  std::thread writer_;

  // Between the writer and the syncer. Commits are numbered from 1.
  struct Awaiting {
    uint64_t commit;    // the commit they are in
    Batch submissions;  // answered once it is synced
  };
  std::mutex sync_mu_;
  std::condition_variable sync_cv_;
  uint64_t committed_ = 0;         // guarded by sync_mu_
  uint64_t synced_ = 0;            // guarded by sync_mu_
  std::deque<Awaiting> awaiting_;  // guarded by sync_mu_
  // When the oldest commit not yet synced must be; set while one is owed.
  std::optional<std::chrono::steady_clock::time_point> sync_by_;  // guarded by sync_mu_
  bool sync_stopping_ = false;                                    // guarded by sync_mu_
  bool syncing_ = false;  // guarded by sync_mu_: a Sync runs (on the syncer or the writer)
  std::thread syncer_;
};

}  // namespace delayd::store
