// PgStore: the Store on PostgreSQL (libpq). The schema is created and
// migrated on open (pg_schema.h); every table of jobs and timers carries a
// shard number (doc/store.md).
//
// Threads and connections, each connection used by one thread only:
//   - the CommitQueue's writer commits each batch in one transaction with
//     synchronous_commit off, its statements sent as one pipeline (one round
//     trip per batch, more only around a submission that may conflict);
//   - the syncer makes every commit so far durable with a commit of its own
//     with synchronous_commit on: PostgreSQL flushes the WAL up to that
//     commit, which covers every earlier asynchronous one, and the syncer
//     checks that none of them was lost by a server crash (PgStore::Sync);
//   - every read is made on the read thread, on a third connection: the
//     engine's reads aside (ReadAside) are queued to it and answered through
//     the executor, so that the event loop never waits for PostgreSQL; a
//     synchronous read from another thread (recovery at start, tests) is
//     queued too, and waited for.
// A lost connection fails the calls that needed it with kIoError (clients
// are told to retry); each connection reconnects by itself, with backoff,
// and the store logs each change of state once.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/executor.h"
#include "store/commit_queue.h"
#include "store/postgres/pg_conn.h"
#include "store/store.h"

namespace delayd::store {

struct PgOptions {
  std::string conninfo;     // a libpq connection string or postgres:// URI
  size_t max_batch = 8192;  // mutations per transaction at most
  int64_t sync_delay_ms = kDefaultSyncDelayMs;
  int shards = 256;  // shard count of a new database; an existing one keeps its own
};

class PgStore final : public Store, private CommitQueue::Backend {
 public:
  // Connects, creates or migrates the schema, and starts the writer. A bad
  // connection string, an unreachable server or a database of a newer schema
  // version is an error that says which.
  static Result<std::unique_ptr<PgStore>> Open(PgOptions options, Executor executor);
  ~PgStore() override;

  Result<Recovered> Recover(int64_t horizon_minute) override;
  void Submit(Mutation m, Done done) override;
  void SubmitAll(std::vector<Mutation> ms, Done done) override;
  void ReadAside(std::function<void()> read, std::function<void()> then) override;
  Result<std::optional<JobRecord>> Get(uint64_t id) override;
  Result<std::optional<JobRecord>> GetByKey(const std::string& tube,
                                            const std::string& key) override;
  Result<std::vector<JobRecord>> List(const ListQuery& q) override;
  Result<std::vector<JobRecord>> LoadMinute(int64_t minute, uint64_t after_id,
                                            size_t limit) override;
  Result<std::vector<JobRecord>> FarDelayed(const std::string& tube, int64_t after_minute,
                                            size_t limit) override;
  Result<std::optional<TimerRecord>> GetTimer(uint64_t id) override;
  Result<std::optional<TimerRecord>> GetTimerByName(const std::string& name) override;
  Result<std::vector<TimerRecord>> ListTimers(uint64_t after_id, size_t limit) override;
  Result<std::vector<TimerRecord>> TimersDue(int64_t from_ms, uint64_t after_id, int64_t before_ms,
                                             size_t limit) override;
  Result<std::vector<TimerFire>> TimerFires(uint64_t timer_id, size_t limit) override;
  Result<uint64_t> NextTimerId() override;
  StoreStats stats() const override;
  void Close() override;

  int shards() const { return shards_; }

 private:
  // A connection with its prepared statements, reconnected when it broke.
  class Link;
  class Batcher;

  PgStore(PgOptions options, Executor executor);
  Status Commit(CommitQueue::Batch& batch) override;  // writer thread
  Status Sync() override;                             // syncer thread
  // Runs a read on the reader's connection, on the read thread (once more
  // on a new connection when the connection turns out to have broken while
  // idle).
  Result<pg::PgResult> Read(const std::function<Result<pg::PgResult>(pg::PgConn&)>& run);
  // Runs prepared read statement `name`.
  Result<pg::PgResult> Read(const char* name, const pg::Params& p);
  // The read itself, on the calling thread (the read thread's).
  Result<pg::PgResult> ReadNow(const std::function<Result<pg::PgResult>(pg::PgConn&)>& run);
  // Queues `work` for the read thread; false before it starts or after
  // Close, when the caller runs it itself.
  bool QueueRead(std::function<void()> work);
  // Runs `fn` on the read thread: at once when called there, else queued
  // and waited for (at once, too, before the thread starts or after Close).
  void OnReadThread(const std::function<void()>& fn);
  void ReadLoop();  // the read thread

  PgOptions options_;
  int shards_ = 0;
  std::unique_ptr<Link> writer_;  // writer thread only (and Open before it starts)
  std::unique_ptr<Link> syncer_;  // syncer thread only
  std::unique_ptr<Link> reader_;  // read thread only (and Open before it starts)
  Executor executor_;             // where ReadAside answers
  uint64_t next_id_floor_ = 0;    // writer thread: highest id committed + 1
  // The number of the writer's latest commit, and how often it connected
  // (Sync says why).
  std::atomic<int64_t> commit_seq_{0};
  std::atomic<uint64_t> writer_connects_{0};
  uint64_t synced_writer_connects_ = 0;  // syncer thread: at the last sync

  // The read thread's work, in order.
  std::mutex read_mu_;
  std::condition_variable read_cv_;       // work queued, or stop
  std::condition_variable read_done_cv_;  // a waited-for read is done
  std::deque<std::function<void()>> reads_;
  bool reads_stopped_ = false;
  std::thread read_thread_;

  CommitQueue queue_;  // last: its threads use everything above
};

}  // namespace delayd::store
