// PgStore: the Store on PostgreSQL (libpq). The schema is created and
// migrated on open (pg_schema.h); every table of jobs and timers carries a
// shard number (doc/store.md). Its SQL is in pg_statements.h, its rows'
// layout and readers in pg_rows.h, its connections in pg_link.h; the write
// path (a batch's commit, the sync, the settle of a batch in doubt) is in
// pg_commit.cc with pg_batcher.h, the SharedQueue side in
// pg_shared_queue.cc, the rest in pg_store.cc.
//
// Threads and connections, each connection used by one thread only:
//   - the CommitQueue's writer commits each batch in one transaction with
//     synchronous_commit off, its statements sent as one pipeline (one round
//     trip per batch, more only around a submission that may conflict);
//   - the syncer makes every commit so far durable with a commit of its own
//     with synchronous_commit on: PostgreSQL flushes the WAL up to that
//     commit, which covers every earlier asynchronous one, and the syncer
//     checks that none of them was lost by a server crash (PgStore::Sync);
//   - every read is made on the read lane (a thread and a third connection):
//     the engine's reads aside (ReadAside) are queued to it and answered
//     through the executor, so that the event loop never waits for
//     PostgreSQL; a synchronous read from another thread (recovery at start,
//     tests) is queued too, and waited for.
// In cluster mode (PgOptions::node_id set; doc/cluster.md) the store is also
// the SharedQueue: claims run on a claim lane of their own (a claim never
// waits behind a long read), committed without waiting for the disk (a
// claim lost to a crash of PostgreSQL only leaves its jobs ready, to be
// delivered again); id blocks are taken on the reader lane, whose commits
// are durable, so that no block is handed out twice. A listener connection
// hears the
// notices, and the writer sends them: every batch announces the tubes it
// made jobs ready in, the delayed jobs it wrote that fall due within
// due_notice_ms (for their shards' owners), and the tubes it paused,
// resumed or gave settings (for every node to read). A notice may be spurious (a
// guarded write that failed), never missing for a committed change.
// A lost connection fails the calls that needed it with kIoError (clients
// are told to retry); each connection reconnects by itself, with backoff,
// and the store logs each change of state once.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/executor.h"
#include "store/commit_queue.h"
#include "store/postgres/pg_conn.h"
#include "store/postgres/pg_link.h"
#include "store/postgres/pg_listener.h"
#include "store/shared_queue.h"
#include "store/store.h"

namespace delayd::store {

struct PgOptions {
  std::string conninfo;     // a libpq connection string or postgres:// URI
  size_t max_batch = 8192;  // mutations per transaction at most
  int64_t sync_delay_ms = kDefaultSyncDelayMs;
  int shards = 256;  // shard count of a new database; an existing one keeps its own
  // Cluster mode: this node's id (the owner of its leases). Empty: a store
  // of one node, which sends no notices and makes no claims.
  std::string node_id = {};
  // How this process is named to another delayd that finds the database
  // held (pg_owner.h): "<host>:<port>" or the node id.
  std::string owner_name = {};
  // Delayed jobs written due within this many ms of now are announced on
  // kDueChannel: their owner holds that far ahead on its clock.
  int64_t due_notice_ms = 60'000;
  // The longest a batch of changes answered before their commit waits for
  // more (CommitQueue::Options::linger_us).
  int64_t linger_us = 0;
  // How often this store folds the job count deltas into the counts, and
  // how many of its folds pass between vacuums of job_deltas (FoldCounts).
  // At the same ticks it takes the jobs table's statistics again once the
  // table holds at least twice the rows they say, and this many
  // (KeepStatistics).
  int64_t fold_counts_ms = 1000;
  uint64_t vacuum_deltas_every = 10;
  int64_t analyze_from_rows = 1000;
  // The wall time the due notices' window is measured from; null: the
  // system's. It must outlive the store.
  const Clock* clock = nullptr;
};

class PgStore final : public Store, public SharedQueue, private CommitQueue::Backend {
 public:
  // Takes the database (pg_owner.h: alone, or shared with the nodes of a
  // cluster when `node_id` is set), then connects, creates or migrates the
  // schema, and starts the writer. A bad connection string, an unreachable
  // server, a database another delayd holds (kConflict; nothing is written)
  // or a database of a newer schema version is an error that says which.
  static Result<std::unique_ptr<PgStore>> Open(PgOptions options, Executor executor);
  ~PgStore() override;

  Result<Recovered> Recover(int64_t horizon_minute) override;
  // A node of its own reads its windows from the store; a cluster's nodes
  // hold no ready or buried jobs but the few they claimed (doc/cluster.md).
  bool ScansSets() const override { return options_.node_id.empty(); }
  Result<std::vector<JobRecord>> ScanSet(const std::string& tube, JobSet set, SetKey after,
                                         size_t limit) override;
  void Submit(Mutation m, Done done) override;
  void SubmitAll(std::vector<Mutation> ms, Done done) override;
  void ReadAside(std::function<void()> read, std::function<void()> then) override;
  Result<std::optional<JobRecord>> Get(uint64_t id) override;
  Status Probe() override;
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
  SharedQueue* shared() override { return options_.node_id.empty() ? nullptr : this; }
  void Close() override;

  // SharedQueue (cluster mode).
  const std::string& node_id() const override { return options_.node_id; }
  int shards() const override { return shards_; }
  int ShardOf(const JobRecord& j) const override;
  void Claim(ClaimQuery q, std::function<void(Result<std::vector<JobRecord>>)> done) override;
  void Due(DueQuery q, std::function<void(Result<std::vector<DueEntry>>)> done) override;
  void TakeIds(uint64_t n, std::function<void(Result<uint64_t>)> done) override;
  Status Listen(std::function<void(std::vector<Notice>)> fn) override;
  Result<std::optional<JobRecord>> BestReady(const std::string& tube) override;
  Result<std::vector<TubeCount>> CountJobs(std::optional<std::string> tube) override;
  Result<std::vector<TubeRow>> Tubes(std::optional<std::string> tube) override;
  Result<std::vector<std::string>> PushTubes(const std::vector<int>& shards) override;
  Result<std::vector<TimerRecord>> TimersDueOf(const std::vector<int>& shards, int64_t from_ms,
                                               uint64_t after_id, int64_t before_ms,
                                               size_t limit) override;
  int TimerShardOf(uint64_t id) const override;
  void TakeTimerId(std::function<void(Result<uint64_t>)> done) override;

 private:
  using Link = pg::Link;
  using Lane = pg::Lane;
  using Session = pg::Session;

  PgStore(PgOptions options, Executor executor);
  Status Commit(CommitQueue::Batch& batch) override;  // writer thread
  // The sync side: one thread at a time, the syncer's or, for a lone
  // submission, the writer's between its commits (CommitQueue::Backend).
  Status Sync() override;  // the sync side
  Status KeepDatabase();   // the sync side
  void Settle(CommitQueue::Batch& batch, bool commit_in_flight) override;
  Result<Recovered> RecoverNow(int64_t horizon_minute);  // on the read lane
  // Runs a read on the read lane and waits for it (Lane::Use).
  Result<pg::PgResult> Read(const std::function<Result<pg::PgResult>(pg::PgConn&)>& run);
  // Runs prepared read statement `name`.
  Result<pg::PgResult> Read(const char* name, const pg::Params& p);
  // `work` on `lane`, then `answer` through the executor.
  void Aside(Lane& lane, std::function<void()> work, std::function<void()> answer);
  // `run` on `lane`'s connection (Lane::Use), its result to `done` through
  // the executor.
  template <class T>
  void Answer(Lane& lane, std::function<Result<T>(pg::PgConn&)> run,
              std::function<void(Result<T>)> done);

  PgOptions options_;
  const Clock& clock_;
  int shards_ = 0;
  std::unique_ptr<Link> writer_;  // writer thread only (and Open before it starts)
  std::unique_ptr<Link> syncer_;  // the sync side only
  // The session that holds the database (pg_owner.h): taken by Open, then
  // the syncer's, which takes it again after a reconnection, and fails its
  // syncs (so every write) while another delayd has it.
  std::unique_ptr<pg::PgConn> owner_;
  uint64_t owner_checked_connects_ = 0;  // the sync side: syncer_->connects() then
  std::unique_ptr<Lane> reads_;          // every read
  std::unique_ptr<Lane> claims_;         // claims (cluster mode)
  Executor executor_;                    // where reads aside, claims and notices answer
  // The meta row the syncer's commits write: this node's own, so that nodes
  // never wait for each other's.
  const std::string syncs_key_;
  uint64_t next_id_floor_ = 0;  // writer thread: highest id committed + 1
  // The writer's server process when it last sent a COMMIT (Settle).
  std::atomic<int> committing_pid_{0};
  std::atomic<int> committing_port_{-1};  // its connection's local port
  // The writer's session of its latest batch (Sync says why).
  Session writer_session() const;
  void set_writer_session(const Session& w);
  mutable std::mutex writer_session_mu_;
  Session writer_session_;               // guarded by writer_session_mu_
  uint64_t synced_writer_connects_ = 0;  // the sync side: at the last sync

  // The job count deltas folded into the counts (migration 7), and the
  // jobs table's statistics kept up with its growth, on the reads lane
  // every options_.fold_counts_ms.
  void FoldCounts();
  void KeepStatistics();
  uint64_t folds_ = 0;               // reads lane: folds made
  bool fold_failing_ = false;        // reads lane
  bool statistics_failing_ = false;  // reads lane

  std::unique_ptr<pg::PgListener> listener_;  // once Listen is called

  CommitQueue queue_;  // last: its threads use everything above
};

template <class T>
void PgStore::Answer(Lane& lane, std::function<Result<T>(pg::PgConn&)> run,
                     std::function<void(Result<T>)> done) {
  auto out = std::make_shared<Result<T>>(Status::Internal("postgres: not run"));
  Aside(
      lane, [&lane, out, run = std::move(run)] { *out = lane.Use(run); },
      [out, done = std::move(done)] { done(std::move(*out)); });
}

}  // namespace delayd::store
