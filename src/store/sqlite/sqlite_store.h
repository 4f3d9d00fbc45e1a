// SqliteStore: the embedded Store. One file `delayd.db` in the data dir, in
// WAL mode.
//
// Threads: the CommitQueue's writer owns the write connection and commits
// each batch in one transaction with synchronous=NORMAL (the commit reaches
// the operating system, not the disk); its syncer syncs the write-ahead log
// through a handle of its own, so the writer goes on meanwhile. A sync
// covers the whole log, so a power cut loses only commits after the last
// sync. Reads use a second connection and must come from one thread (the
// engine's). A third connection checkpoints the log into the database on a
// thread of its own, so the writer does not stop for it
// (sqlite_checkpointer.h). The schema is in sqlite_schema.h.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/executor.h"
#include "store/commit_queue.h"
#include "store/store.h"

struct sqlite3;
struct sqlite3_file;

namespace delayd::store {
namespace sqlite {
class Checkpointer;
}  // namespace sqlite

struct SqliteOptions {
  std::string path;             // the database file
  size_t max_batch = 8192;      // mutations per transaction at most
  int write_cache_kib = 32768;  // page cache of the write connection
  int read_cache_kib = 8192;    // page cache of the read connection
  int writer_nice = 5;          // CPU priority of the writer thread, relative to the process
  // The longest a commit of only kWritten mutations waits for its sync; 0
  // syncs every batch before any of its callbacks (every mutation kSynced).
  int64_t sync_delay_ms = kDefaultSyncDelayMs;
};

class SqliteStore final : public Store, private CommitQueue::Backend {
 public:
  // Opens (creating if needed) the database and starts the writer thread.
  static Result<std::unique_ptr<SqliteStore>> Open(SqliteOptions options, Executor executor);
  ~SqliteStore() override;

  Result<Recovered> Recover(int64_t horizon_minute) override;
  void Submit(Mutation m, Done done) override;
  void SubmitAll(std::vector<Mutation> ms, Done done) override;
  Result<std::optional<JobRecord>> Get(uint64_t id) override;
  Result<std::optional<JobRecord>> GetByKey(const std::string& tube,
                                            const std::string& key) override;
  Result<std::vector<JobRecord>> List(const ListQuery& q) override;
  Result<std::vector<ErrorGroup>> BuriedByError(const std::optional<std::string>& tube,
                                                size_t limit) override;
  Result<std::vector<uint64_t>> DueCounts(int64_t now_ms, int64_t from_minute,
                                          int64_t bucket_minutes, size_t buckets,
                                          const std::optional<std::string>& tube) override;
  Result<std::vector<JobRecord>> LoadMinute(int64_t minute, uint64_t after_id,
                                            size_t limit) override;
  bool ScansSets() const override { return true; }
  Result<std::vector<JobRecord>> ScanSet(const std::string& tube, JobSet set, SetKey after,
                                         size_t limit) override;
  std::shared_ptr<SetRead> ScanSetAhead(const std::string& tube, JobSet set, SetKey after,
                                        size_t limit, std::function<void()> ready) override;
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

 private:
  class Statements;

  SqliteStore(SqliteOptions options, Executor executor);
  // CommitQueue::Backend, on the writer's and the syncer's thread.
  Status Commit(CommitQueue::Batch& batch) override;
  Status Sync() override;  // syncs the write-ahead log: every commit so far is durable
  Status ApplyOne(const CommitQueue::Submission& p, uint64_t* max_id);
  Status Apply(const Mutation& m, uint64_t* max_id);
  void CloseLogFile();
  // The reads ahead's thread: makes them one after another in call order;
  // `Stop` makes those still queued, then ends it.
  void AheadLoop();
  void StopAhead();

  SqliteOptions options_;
  sqlite3* write_db_ = nullptr;  // writer thread only (and Open/Recover before it starts)
  sqlite3* read_db_ = nullptr;   // engine thread only
  std::unique_ptr<Statements> write_stmts_;
  std::unique_ptr<Statements> read_stmts_;
  Executor executor_;  // the completion executor, shared with queue_

  // Reads ahead (ScanSetAhead), on a thread and a connection of their own.
  sqlite3* ahead_db_ = nullptr;  // the ahead thread only (and Open)
  std::unique_ptr<Statements> ahead_stmts_;
  std::mutex ahead_mu_;
  std::condition_variable ahead_cv_;
  std::deque<std::function<void()>> ahead_work_;  // guarded by ahead_mu_
  bool ahead_stop_ = false;                       // guarded by ahead_mu_
  std::thread ahead_thread_;
  uint64_t next_id_floor_ = 0;  // writer thread: highest id committed + 1

  std::string log_path_;  // the write-ahead log
  std::string log_name_;  // the same, as a VFS name; outlives log_file_
  std::unique_ptr<sqlite3_file, void (*)(sqlite3_file*)> log_file_{nullptr, nullptr};  // Sync only

  // Checkpoints, beside the writer (sqlite_checkpointer.h); closed after
  // the writer's connection is done with it.
  std::unique_ptr<sqlite::Checkpointer> checkpointer_;

  CommitQueue queue_;  // last: its threads use everything above
};

}  // namespace delayd::store
