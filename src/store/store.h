// Store: the durable source of truth, in job operations rather than SQL, so
// that an embedded store (SQLite) and a shared one (PostgreSQL, cluster mode)
// can stand behind the same engine.
//
// Writes are asynchronous and grouped: Submit() queues a mutation and returns
// at once; the store applies queued mutations in submission order, in batches
// (one transaction, at most one sync each), and runs their `done` callbacks
// through the completion executor given at construction. A done callback with
// an OK status means the mutation is committed, and as durable as its
// Durability asks: synced to disk, or written to the operating system and
// synced within the store's sync delay. A sync covers everything committed
// before it, so a power cut loses a suffix of the commits, never a hole.
// CommitQueue (store/commit_queue.h) implements all of this for any store
// that can commit a batch in one transaction and sync.
//
// Reads are synchronous and see every mutation whose done callback has run
// (and possibly later ones already committed). The engine makes them through
// ReadAside, so that a store whose reads travel the network (PostgreSQL)
// answers them from a thread of its own and the event loop never waits.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "common/histogram.h"
#include "common/status.h"
#include "store/job_record.h"
#include "store/timer_record.h"

namespace delayd::store {

class SharedQueue;

// When a mutation's done callback may report success.
enum class Durability : uint8_t {
  // Synced to disk: survives a power cut. Anything whose loss would lose a
  // job, a key or a timer fire.
  kSynced,
  // Written to the operating system: survives a crash of delayd (kill -9) at
  // once, and a power cut once synced, within the store's sync delay. Only
  // for changes whose loss can at most bring a job back to be delivered again
  // (finish, release, bury of a reserved job) or a record back to be removed
  // again (the purge of done jobs).
  kWritten,
};

// A submission refused on its own (kConflict: a taken key or name, a row
// changed by another node; kFenced: a lease moved) changed nothing, and the
// rest of its batch may commit. Any other failure is the whole batch's.
inline bool RefusedAlone(const Status& s) {
  return s.code() == StatusCode::kConflict || s.code() == StatusCode::kFenced;
}

// The changes a mutation can make, one struct each.
namespace change {
struct InsertJob {
  JobRecord job;
};
// The changes of an existing job may require that the row still has the
// version they were made on (cluster mode, where other nodes change rows
// too): if it has another, or is gone, the mutation fails alone with
// kConflict and changes nothing. SQLite, whose only writer is this process,
// keeps no versions and does not check them.
// An update writes every field but body, key and spec, yet its record must
// carry the job's tube and key: cluster mode finds the job's shard from
// them, to announce a delayed job to the shard's owner.
struct UpdateJob {
  JobRecord job;
  std::optional<uint64_t> if_version;
};
struct ReplaceJob {  // every field
  JobRecord job;
  std::optional<uint64_t> if_version;
};
struct DeleteJob {
  uint64_t id = 0;
  std::optional<uint64_t> if_version;
};
struct PauseTube {
  std::string tube;
  int64_t pause_ms = 0;    // the pause length asked for
  int64_t unpause_ms = 0;  // wall ms when the pause ends; 0 with pause_ms 0 resumes
};
struct SetTopicSettings {
  std::string tube;
  std::string settings;  // stored form; empty removes them
};
struct PurgeDone {  // removes done jobs that finished before `before_ms`
  int64_t before_ms = 0;
};
struct PutTimer {  // inserts or replaces `timer` (by id); fails on a taken name
  TimerRecord timer;
};
struct DeleteTimer {  // removes the timer and its fires
  uint64_t id = 0;
};
// Cluster mode (PostgreSQL only): writes a node makes as the owner of
// shards. Each is fenced: it fails alone with kFenced, changing nothing,
// unless this node still holds the lease of *every* shard it names, at that
// shard's `epoch`, when it commits (doc/cluster.md, "Leases and fencing").
// All or nothing, so that one statement serves every owned shard; a writer
// refused learns which shard moved by writing again shard by shard.
struct Fence {
  int shard = 0;
  int64_t epoch = 0;
};

// Sets the timer's next and last fire times and records `fires`; fails if
// one of those fire times was recorded before. With a fence (cluster mode:
// the owner of the timer's shard fires it), it fails, and so does the rest
// of its submission (the fire's job), unless the lease still holds; SQLite
// ignores the fence.
struct AdvanceTimer {
  uint64_t id = 0;
  int64_t next_fire_ms = 0;
  int64_t last_fire_ms = 0;
  std::vector<TimerFire> fires;
  std::optional<Fence> fence = {};
};
// A delayed job an owner makes ready, and its shard.
struct DueJob {
  int shard = 0;
  uint64_t id = 0;
};
// The `jobs` (each of a shard of `fences`, every shard once) that are still
// delayed and due by `now_ms` become ready; or reserved by this node, for
// its own waiting consumers: per tube of `claim_for`, its best pull jobs (by
// priority, then id), at most that many, as a claim at `now_ms` would
// reserve them (a paused tube's none). Those rows are not announced; once
// the submission succeeds, `claimed` (when given) holds them as stored.
// A store without claims (SQLite) has no promotions.
struct PromoteDue {
  std::vector<Fence> fences;
  std::vector<DueJob> jobs;
  int64_t now_ms = 0;
  std::vector<std::pair<std::string, int64_t>> claim_for = {};
  std::shared_ptr<std::vector<JobRecord>> claimed = {};
};
// Reservations of the fences' shards whose deadline is before `before_ms`
// (their node died or lost them) go back to ready, as an expired ttr does.
struct RequeueExpired {
  std::vector<Fence> fences;
  int64_t before_ms = 0;
};
}  // namespace change

// How long a kWritten change may wait for its sync, unless configured.
inline constexpr int64_t kDefaultSyncDelayMs = 10;

struct Mutation {
  using Change = std::variant<change::InsertJob, change::UpdateJob, change::ReplaceJob,
                              change::DeleteJob, change::PauseTube, change::SetTopicSettings,
                              change::PurgeDone, change::PutTimer, change::DeleteTimer,
                              change::AdvanceTimer, change::PromoteDue, change::RequeueExpired>;
  Change change;
  Durability durability = Durability::kSynced;
  // Answered by its caller before its commit, so its commit may wait a
  // little (the store's linger) to be shared with more: nobody waits on it.
  bool lingers = false;

  // This mutation, acknowledged once written rather than once synced.
  Mutation Written() && {
    durability = Durability::kWritten;
    return std::move(*this);
  }
  // This mutation, whose commit may linger (above).
  Mutation Lingering() && {
    lingers = true;
    return std::move(*this);
  }
  // This change of an existing job, only if its row still has `version`
  // (change::UpdateJob). REQUIRES: an update, replace or delete.
  Mutation IfVersion(uint64_t version) &&;
  // This timer advance, made as the owner of its shard (change::AdvanceTimer).
  // REQUIRES: a timer advance.
  Mutation FencedBy(change::Fence fence) &&;
  static Mutation Insert(JobRecord j) { return {change::InsertJob{std::move(j)}}; }
  static Mutation Update(JobRecord j) { return {change::UpdateJob{std::move(j), {}}}; }
  static Mutation Replace(JobRecord j) { return {change::ReplaceJob{std::move(j), {}}}; }
  static Mutation Delete(uint64_t id) { return {change::DeleteJob{id, {}}}; }
  static Mutation PauseTube(std::string tube, int64_t pause_ms, int64_t unpause_ms) {
    return {change::PauseTube{std::move(tube), pause_ms, unpause_ms}};
  }
  static Mutation TopicSettings(std::string tube, std::string settings) {
    return {change::SetTopicSettings{std::move(tube), std::move(settings)}};
  }
  static Mutation PurgeDone(int64_t before_ms) { return {change::PurgeDone{before_ms}}; }
  static Mutation TimerPut(TimerRecord t) { return {change::PutTimer{std::move(t)}}; }
  static Mutation TimerDelete(uint64_t id) { return {change::DeleteTimer{id}}; }
  static Mutation TimerAdvance(uint64_t id, int64_t next_fire_ms, int64_t last_fire_ms,
                               std::vector<TimerFire> fires) {
    return {change::AdvanceTimer{id, next_fire_ms, last_fire_ms, std::move(fires), {}}};
  }
  static Mutation Promote(std::vector<change::Fence> fences, std::vector<change::DueJob> jobs,
                          int64_t now_ms,
                          std::vector<std::pair<std::string, int64_t>> claim_for = {},
                          std::shared_ptr<std::vector<JobRecord>> claimed = {}) {
    return {change::PromoteDue{std::move(fences), std::move(jobs), now_ms, std::move(claim_for),
                               std::move(claimed)}};
  }
  // Jobs `ids` of one shard.
  static Mutation Promote(change::Fence f, const std::vector<uint64_t>& ids, int64_t now_ms) {
    std::vector<change::DueJob> jobs;
    for (uint64_t id : ids) jobs.push_back({f.shard, id});
    return Promote({f}, std::move(jobs), now_ms);
  }
  static Mutation Requeue(std::vector<change::Fence> fences, int64_t before_ms) {
    return {change::RequeueExpired{std::move(fences), before_ms}};
  }
  static Mutation Requeue(change::Fence f, int64_t before_ms) {
    return Requeue(std::vector<change::Fence>{f}, before_ms);
  }
};

inline Mutation Mutation::IfVersion(uint64_t version) && {
  if (auto* u = std::get_if<change::UpdateJob>(&change)) u->if_version = version;
  if (auto* r = std::get_if<change::ReplaceJob>(&change)) r->if_version = version;
  if (auto* d = std::get_if<change::DeleteJob>(&change)) d->if_version = version;
  return std::move(*this);
}

inline Mutation Mutation::FencedBy(change::Fence fence) && {
  if (auto* a = std::get_if<change::AdvanceTimer>(&change)) a->fence = fence;
  return std::move(*this);
}

struct TubePause {
  std::string tube;
  int64_t pause_ms = 0;
  int64_t unpause_ms = 0;
};

// Delayed jobs beyond the horizon of one tube and due hour (DueHour).
struct FarCount {
  std::string tube;
  int64_t hour = 0;
  uint64_t delayed = 0;
};

struct TubeSettings {
  std::string tube;
  std::string settings;  // stored form of engine::TopicSettings
};

// How many jobs one set of one tube holds in the store.
struct SetCount {
  std::string tube;
  JobSet set = JobSet::kReady;
  uint64_t jobs = 0;
  uint64_t urgent = 0;  // ready jobs with a priority below 1024 (beanstalkd's urgent)
};

// What recovery hands the engine: everything it must hold in memory.
struct Recovered {
  // Delayed jobs due through the horizon minute; and, from a store that
  // does not ScanSets, every ready and buried job.
  std::vector<JobRecord> jobs;
  // From a store that ScanSets: its ready and buried jobs, counted per tube
  // and set (ScanSet reads them), and the largest bury_seq stored.
  std::vector<SetCount> sets;
  uint64_t max_bury_seq = 0;
  std::vector<FarCount> far;      // delayed jobs due after the horizon minute, by tube and hour
  std::vector<TubePause> pauses;  // pauses not yet over
  std::vector<TubeSettings> settings;
  uint64_t next_id = 1;        // larger than every id ever handed out
  uint64_t next_timer_id = 1;  // larger than every timer id ever handed out
};

// A filtered page of jobs, in id order. Unset filters match everything.
struct ListQuery {
  std::optional<std::string> tube;
  std::optional<StoredState> state;
  std::string key_prefix;
  std::optional<int64_t> due_after_ms;   // due_ms >= this
  std::optional<int64_t> due_before_ms;  // due_ms < this
  std::string error_contains;            // last_error contains these bytes; empty: any
  uint64_t after_id = 0;
  size_t limit = 100;
};

// Jobs sharing one last error (empty: none): how many, and the lowest id.
struct ErrorGroup {
  std::string error;
  uint64_t count = 0;
  uint64_t first_id = 0;
};

// Stored job writes are counted for `stats` (binlog-records-written).
struct StoreStats {
  uint64_t batches = 0;
  uint64_t mutations = 0;
  uint64_t syncs = 0;   // disk syncs of committed batches
  uint64_t queued = 0;  // submissions waiting for the writer
  // The last commit or sync failed (not by a client's conflict): the store
  // is not taking writes now, as far as anyone has seen.
  bool failing = false;
  HistogramSnapshot commit_seconds;  // a batch's transaction, from its first statement to commit
  HistogramSnapshot sync_seconds;    // a sync making commits survive a power cut
};

// A ScanSet made on another thread (Store::ScanSetAhead): the reading
// thread sets its rows once; the caller takes them, waiting if need be.
class SetRead {
 public:
  void Set(Result<std::vector<JobRecord>> rows) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      rows_.emplace(std::move(rows));
    }
    cv_.notify_all();
  }
  // The rows, once they are read; once.
  Result<std::vector<JobRecord>> Take() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return rows_.has_value(); });
    return std::move(*rows_);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Result<std::vector<JobRecord>>> rows_;
};

class Store {
 public:
  using Done = std::function<void(const Status&)>;
  virtual ~Store() = default;

  // Reads all state needed at start. Jobs due at or before minute
  // `horizon_minute` come back whole; later delayed jobs only as counts;
  // ready and buried jobs as counts when the store ScanSets, else whole.
  virtual Result<Recovered> Recover(int64_t horizon_minute) = 0;

  // Whether the store reads a tube's ready and buried jobs in their order
  // (ScanSet, Recovered::sets), so that the engine need not hold them all.
  virtual bool ScansSets() const { return false; }
  // Up to `limit` jobs of `set` in `tube` whose key comes after `after`, in
  // the set's order. Only a store that ScansSets answers.
  virtual Result<std::vector<JobRecord>> ScanSet(const std::string& tube, JobSet set, SetKey after,
                                                 size_t limit) {
    (void)tube, (void)set, (void)after, (void)limit;
    return Status::Internal("this store does not scan sets");
  }
  // ScanSet made ahead of need (a window refilling while its first jobs
  // still serve) on a thread of the store's own, with a connection of its
  // own, so that the caller goes on meanwhile: `ready` runs through the
  // completion executor once the rows are read, never before this returns,
  // and the read's Take() gives them, waiting while they are still being
  // read (for a caller that cannot go on without them). Null from a store
  // without such a thread: ReadAside is then the way.
  virtual std::shared_ptr<SetRead> ScanSetAhead(const std::string& tube, JobSet set, SetKey after,
                                                size_t limit, std::function<void()> ready) {
    (void)tube, (void)set, (void)after, (void)limit, (void)ready;
    return nullptr;
  }

  // Queues a mutation (thread-safe). `done` runs on the completion executor.
  virtual void Submit(Mutation m, Done done) = 0;
  // Queues mutations that commit together or not at all, in one transaction.
  virtual void SubmitAll(std::vector<Mutation> ms, Done done) = 0;

  // Runs `read`, which makes synchronous reads of this store, where it does
  // not hold up the caller, then `then` through the completion executor. A
  // store that reads over the network (PostgreSQL) runs `read` on a thread
  // of its own, one read after another in call order; by default both run at
  // once, before this returns (an embedded database answers in microseconds).
  // See ReadAsync below for a typed form.
  virtual void ReadAside(std::function<void()> read, std::function<void()> then) {
    read();
    then();
  }

  // Synchronous reads: from any one thread at a time, or inside ReadAside.
  virtual Result<std::optional<JobRecord>> Get(uint64_t id) = 0;
  // Whether the jobs table can be read and written now (for /readyz): by
  // default a read of it; a store whose writes can be refused for reasons a
  // read does not show (PostgreSQL's privileges) checks those too.
  virtual Status Probe() { return Get(0).status(); }
  // The job (any state, done included) holding `key` in `tube`.
  virtual Result<std::optional<JobRecord>> GetByKey(const std::string& tube,
                                                    const std::string& key) = 0;
  virtual Result<std::vector<JobRecord>> List(const ListQuery& q) = 0;
  // Dead letters (buried jobs, of `tube` or all) grouped by their last
  // error, the largest groups first, at most `limit` groups.
  virtual Result<std::vector<ErrorGroup>> BuriedByError(const std::optional<std::string>& tube,
                                                        size_t limit) = 0;
  // Delayed jobs (of `tube`, or all) due from `now_ms` on, per bucket of
  // `bucket_minutes` due minutes from minute `from_minute` (at most now's):
  // `buckets` counts, the first bucket first. (A job whose due time has
  // passed may still be stored as delayed on one node, where memory makes it
  // ready: not counted.)
  virtual Result<std::vector<uint64_t>> DueCounts(int64_t now_ms, int64_t from_minute,
                                                  int64_t bucket_minutes, size_t buckets,
                                                  const std::optional<std::string>& tube) = 0;
  // Delayed jobs of one due minute with id > after_id, in id order.
  virtual Result<std::vector<JobRecord>> LoadMinute(int64_t minute, uint64_t after_id,
                                                    size_t limit) = 0;
  // Delayed jobs of `tube` due after `after_minute`, earliest first.
  virtual Result<std::vector<JobRecord>> FarDelayed(const std::string& tube, int64_t after_minute,
                                                    size_t limit) = 0;

  // Timers, read like jobs.
  virtual Result<std::optional<TimerRecord>> GetTimer(uint64_t id) = 0;
  virtual Result<std::optional<TimerRecord>> GetTimerByName(const std::string& name) = 0;
  // A page of timers in id order, after `after_id`.
  virtual Result<std::vector<TimerRecord>> ListTimers(uint64_t after_id, size_t limit) = 0;
  // Timers whose next fire is before `before_ms` and whose (next fire, id)
  // comes after (`from_ms`, `after_id`), soonest first: a loader's page.
  virtual Result<std::vector<TimerRecord>> TimersDue(int64_t from_ms, uint64_t after_id,
                                                     int64_t before_ms, size_t limit) = 0;
  // Larger than every timer id ever handed out.
  virtual Result<uint64_t> NextTimerId() = 0;
  // The latest fires of a timer, newest first.
  virtual Result<std::vector<TimerFire>> TimerFires(uint64_t timer_id, size_t limit) = 0;

  virtual StoreStats stats() const = 0;

  // What a store shared by the nodes of a cluster offers beyond this
  // interface (store/shared_queue.h); null for a store of one node.
  virtual SharedQueue* shared() { return nullptr; }

  // Applies everything queued, runs its callbacks, and stops the writer.
  virtual void Close() = 0;
};

// store.ReadAside with a result: `done(read())`, `read` made where the
// store makes its reads aside and `done` run through its executor.
template <class Read, class Done>
void ReadAsync(Store& store, Read read, Done done) {
  using T = std::invoke_result_t<Read&>;
  auto out = std::make_shared<std::optional<T>>();
  store.ReadAside([out, read = std::move(read)]() mutable { out->emplace(read()); },
                  [out, done = std::move(done)]() mutable { done(std::move(**out)); });
}

}  // namespace delayd::store
