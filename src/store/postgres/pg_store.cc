#include "store/postgres/pg_store.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_set>
#include <utility>

#include "common/overloaded.h"
#include "store/postgres/pg_owner.h"
#include "store/postgres/pg_rows.h"
#include "store/postgres/pg_schema.h"
#include "store/postgres/pg_statements.h"

namespace delayd::store {

using pg::ArrayParam;
using pg::ChangeParams;
using pg::Columns;
using pg::First;
using pg::kBytea;
using pg::kInt8;
using pg::kJobColumns;
using pg::kText;
using pg::Params;
using pg::PgConn;
using pg::PgResult;
using pg::ReadJob;
using pg::ReadTimer;
using pg::Rows;
using pg::Select;
using pg::Statement;
using pg::Statements;

namespace {

// Due notices per notify (each at most 48 bytes; a notice holds 8000).
constexpr size_t kDuePerNotice = 150;
// Rows per "insert" statement at most.
constexpr size_t kInsertRows = 1024;
// Statements a pipeline holds before the writer reads their results, so that
// neither side blocks on a full socket buffer.
constexpr size_t kPipelineDepth = 512;

// The local port of socket `fd` (what the server sees as client_port), or
// -1 (a Unix socket, whose sessions show none).
int LocalPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (fd < 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return -1;
}

}  // namespace

// A connection, its statements prepared, reconnected with backoff after it
// broke; each change of state is logged once.
class PgStore::Link {
 public:
  // The server shows the connection as application "delayd-<role>". A
  // pipelined link (the writer) sends batches without waiting for each
  // statement. Its commits, and those of a link without `durable_commits`,
  // are acknowledged once the server has them, not once on disk.
  // With `generic_plans`, its prepared statements are never planned again
  // for their parameters: PostgreSQL 15 planned each claim afresh (about
  // 0.35 ms of its CPU a claim, pg_stat_statements' total_plan_time), and
  // its generic plan is as quick; it kept planning the writer's statements
  // over arrays (a custom plan knows their length, so looks cheaper), a
  // tenth of the writer's CPU under a due load (perf). Every statement's
  // generic plan finds jobs through an index (PgStoreTest).
  Link(std::string conninfo, const char* role, bool pipelined, bool durable_commits,
       bool generic_plans = false)
      : conninfo_(std::move(conninfo)),
        role_(role),
        name_(std::string("delayd-") + role),
        pipelined_(pipelined),
        durable_commits_(durable_commits),
        generic_plans_(generic_plans) {}

  // The connection, connected and prepared, or why it is not.
  Result<PgConn*> Get() {
    if (conn_ && conn_->ok()) {
      if (conn_->StillOpen()) return conn_.get();
      spdlog::info("postgres: the server closed the idle {} connection; connecting again", role_);
    }
    const auto now = std::chrono::steady_clock::now();
    if (now < retry_at_) return Status::IoError(last_error_);
    Status s = Connect();
    if (!s.ok()) {
      if (!down_) spdlog::warn("postgres: {} connection lost: {}", role_, s.message());
      down_ = true;
      backoff_ = std::clamp(backoff_ * 2, kFirstBackoff, kMaxBackoff);
      retry_at_ = now + backoff_;
      last_error_ = "postgres unavailable (reconnecting): " + s.message();
      return Status::IoError(last_error_);
    }
    if (down_) spdlog::info("postgres: {} connection restored", role_);
    down_ = false;
    backoff_ = {};
    ++connects_;
    return conn_.get();
  }
  // How many times this link connected.
  uint64_t connects() const { return connects_; }
  // Its connection of now (of the last, when it is down).
  Session session() const { return {connects_, pid_, start_us_}; }

 private:
  static constexpr std::chrono::milliseconds kFirstBackoff{50};
  static constexpr std::chrono::milliseconds kMaxBackoff{2000};

  Status Connect() {
    conn_.reset();
    auto c = PgConn::Connect(conninfo_, name_.c_str());
    if (!c.ok()) return c.status();
    // The writer's commits are acknowledged once the server has them; the
    // syncer's commit makes them durable (store/commit_queue.h).
    Status s = (*c)->Exec(durable_commits_ ? "SET synchronous_commit = on"
                                           : "SET synchronous_commit = off");
    if (s.ok() && generic_plans_) s = (*c)->Exec("SET plan_cache_mode = force_generic_plan");
    if (s.ok()) {
      auto me = (*c)->Query(
          "SELECT pid::int8, (extract(epoch FROM backend_start) * 1000000)::int8 FROM "
          "pg_stat_activity WHERE pid = pg_backend_pid()");
      if (!me.ok()) return me.status();
      if (PQntuples(me->get()) != 1) return Status::IoError("postgres: no session of our own");
      pid_ = static_cast<int>(pg::GetInt(me->get(), 0, 0));
      start_us_ = pg::GetInt(me->get(), 0, 1);
    }
    for (const Statement& st : Statements()) {
      if (!s.ok()) break;
      s = (*c)->Prepare(st.name, st.sql, st.types);
    }
    if (s.ok() && pipelined_) s = (*c)->EnterPipeline();
    if (!s.ok()) return s;
    conn_ = std::move(c).value();
    return Status::Ok();
  }

  const std::string conninfo_;
  const char* const role_;
  const std::string name_;
  const bool pipelined_;
  const bool durable_commits_;
  const bool generic_plans_;
  std::unique_ptr<PgConn> conn_;
  bool down_ = false;
  std::chrono::milliseconds backoff_{};
  std::chrono::steady_clock::time_point retry_at_{};
  std::string last_error_;
  uint64_t connects_ = 0;
  int pid_ = 0;
  int64_t start_us_ = 0;
};

// The statements of one batch in a pipeline: results are read at each
// Flush (and every kPipelineDepth statements), in order. Consecutive
// inserts become one statement of up to kInsertRows rows, and consecutive
// deletes one of as many: every statement that changes jobs also runs the
// job_counts trigger (pg_schema.cc), so fewer and larger ones cost the
// server less.
class PgStore::Batcher {
 public:
  explicit Batcher(PgConn& conn) : conn_(conn) {}

  // Queues a job row to insert.
  void Insert(const JobRecord& j, int shard) {
    if (!status_.ok()) return;
    SendDeletes();
    if (!inserts_) inserts_.emplace();
    inserts_->Add(j, shard);
    if (inserts_->rows() >= kInsertRows) SendInserts();
  }
  // What a statement's rows are handed to, when it succeeds.
  using Rows = std::function<void(const PGresult*)>;
  // Queues the delete of job `id`, only on its `version` when given. A
  // guarded delete that finds no such row is refused into `*own` (as Send
  // does), so the rest commit; with `own` null it fails the batch, and goes
  // in a statement of its own so that its rows say which.
  void Delete(uint64_t id, std::optional<uint64_t> version, const char* if_none, Status* own) {
    if (!status_.ok()) return;
    SendInserts();
    if (version && own == nullptr) {
      SendDeletes();
      Deletes one;
      one.Add(id, version, nullptr, nullptr);
      Track(conn_.Send("delete", one.ToParams()),
            {if_none, nullptr, StatusCode::kConflict, nullptr});
      return;
    }
    if (deletes_ && deletes_->Has(id)) SendDeletes();  // each id once a statement
    if (!deletes_) deletes_.emplace();
    deletes_->Add(id, version, version ? if_none : nullptr, own);
    if (deletes_->size() >= kInsertRows) SendDeletes();
  }
  // Queues a statement. With `if_none`, changing (or returning) no row is a
  // `refused` status saying `if_none`: the submission's own failure when
  // `own` is given (the statement changed nothing, so the rest may commit),
  // else the batch's. The rows it returns go to `rows`.
  void Send(const char* name, const Params& p, const char* if_none = nullptr, Status* own = nullptr,
            StatusCode refused = StatusCode::kConflict, Rows rows = nullptr) {
    SendInserts();
    SendDeletes();
    if (!status_.ok()) return;
    Track(conn_.Send(name, p), {if_none, own, refused, std::move(rows)});
  }
  void Sql(const char* sql) {
    SendInserts();
    SendDeletes();
    if (!status_.ok()) return;
    Track(conn_.SendSql(sql), {nullptr, nullptr, StatusCode::kConflict, nullptr});
  }
  // Whether a statement sent since the last Flush may fail the batch by
  // changing no row: its result must be read before the transaction commits.
  bool checks_pending() const {
    return std::any_of(sent_.begin(), sent_.end(),
                       [](const Sent& st) { return st.if_none != nullptr && st.own == nullptr; });
  }
  // Reads every result sent: the first failure since the last Flush.
  Status Flush() {
    SendInserts();
    SendDeletes();
    Status first = status_;
    status_ = Status::Ok();
    if (sent_.empty()) return first;
    Status s = conn_.Sync();
    for (const Sent& st : sent_) {
      uint64_t changed = 0;
      Status one = s.ok() ? conn_.Next(&changed, st.rows) : s;
      if (one.ok() && st.if_none != nullptr && changed == 0) {
        if (st.own != nullptr) {
          *st.own = Status(st.refused, st.if_none);
          continue;
        }
        one = Status(st.refused, st.if_none);
      }
      if (first.ok() && !one.ok()) first = one;
    }
    sent_.clear();
    if (s.ok()) s = ReadSync();
    return first.ok() ? s : first;
  }

 private:
  struct Sent {
    const char* if_none;  // Send's
    Status* own;
    StatusCode refused;
    Rows rows;
  };

  // Deletes queued for one statement, and whom each one's refusal goes to.
  class Deletes {
   public:
    // Written out: clang does not construct a nested class by its member
    // initializers before the enclosing class is complete.
    Deletes() : ids_(kInt8), versions_(kInt8) {}
    void Add(uint64_t id, std::optional<uint64_t> version, const char* if_none, Status* own) {
      ids_.Int(static_cast<int64_t>(id));
      version ? versions_.Int(static_cast<int64_t>(*version)) : versions_.Null();
      entries_.push_back({static_cast<int64_t>(id), if_none, own});
      seen_.insert(id);
    }
    bool Has(uint64_t id) const { return seen_.count(id) != 0; }
    size_t size() const { return entries_.size(); }
    Params ToParams() const {
      Params p;
      p.Array(ids_).Array(versions_);
      return p;
    }
    // The statement's rows are the ids it deleted: a guarded delete whose id
    // is not among them is refused.
    Rows Refusals() const {
      return [entries = entries_](const PGresult* r) {
        std::set<int64_t> deleted;
        for (int i = 0; i < PQntuples(r); ++i) deleted.insert(pg::GetInt(r, i, 0));
        for (const Entry& e : entries) {
          if (e.if_none != nullptr && deleted.count(e.id) == 0) {
            *e.own = Status(StatusCode::kConflict, e.if_none);
          }
        }
      };
    }

   private:
    struct Entry {
      int64_t id;
      const char* if_none;  // guarded: the refusal's message
      Status* own;
    };
    ArrayParam ids_;
    ArrayParam versions_;
    std::vector<Entry> entries_;
    std::unordered_set<uint64_t> seen_;
  };

  void SendInserts() {
    if (!inserts_) return;
    Params p = inserts_->ToParams();
    inserts_.reset();
    if (!status_.ok()) return;
    Track(conn_.Send("insert", p), {nullptr, nullptr, StatusCode::kConflict, nullptr});
  }
  void SendDeletes() {
    if (!deletes_) return;
    Deletes d = std::move(*deletes_);
    deletes_.reset();
    if (!status_.ok()) return;
    Track(conn_.Send("delete", d.ToParams()),
          {nullptr, nullptr, StatusCode::kConflict, d.Refusals()});
  }
  void Track(Status s, Sent sent) {
    if (!s.ok()) {
      status_ = s;
      return;
    }
    sent_.push_back(sent);
    if (sent_.size() >= kPipelineDepth) status_ = Flush();
  }
  Status ReadSync() {
    for (;;) {
      PgResult r(PQgetResult(conn_.get()));
      if (!r) {
        if (!conn_.ok()) return conn_.Error(nullptr, "pipeline");
        continue;
      }
      if (PQresultStatus(r.get()) == PGRES_PIPELINE_SYNC) return Status::Ok();
    }
  }

  PgConn& conn_;
  std::optional<Columns> inserts_;  // rows not sent yet
  std::optional<Deletes> deletes_;  // deletes not sent yet
  std::vector<Sent> sent_;
  Status status_;
};

namespace {
// The lane whose thread this is, if it is one.
thread_local const void* current_lane = nullptr;
}  // namespace

class PgStore::Lane {
 public:
  Lane(const std::string& conninfo, const char* role, bool durable_commits,
       bool generic_plans = false)
      : link_(conninfo, role, false, durable_commits, generic_plans) {}
  ~Lane() { Stop(); }

  Link& link() { return link_; }
  // Runs `tick` on the lane's thread about every `period`, between its
  // work, from Start to Stop. Called before Start.
  void Every(std::chrono::milliseconds period, std::function<void()> tick) {
    period_ = period;
    tick_ = std::move(tick);
  }
  void Start() {
    thread_ = std::thread([this] {
      current_lane = this;
      Loop();
    });
  }
  // Queues `work`; false before Start or after Stop, when the caller runs it
  // itself.
  bool Queue(std::function<void()> work) {
    std::lock_guard lock(mu_);
    if (stopped_ || !thread_.joinable()) return false;
    work_.push_back(std::move(work));
    cv_.notify_all();
    return true;
  }
  // Runs `fn` on the lane's thread: at once when called there, else queued
  // and waited for (at once, too, while the thread does not run).
  void Run(const std::function<void()>& fn) {
    if (current_lane == this) return fn();
    bool done = false;
    const bool queued = Queue([&] {
      fn();
      std::lock_guard lock(mu_);
      done = true;
      done_cv_.notify_all();
    });
    if (!queued) return fn();
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return done; });
  }
  // Runs `run` on the lane's connection, from the lane's thread (or while it
  // does not run). An idle connection finds out at its next use that the
  // server restarted: `run` is made once more on a new connection, so it
  // must be a statement that may be repeated (a read, a claim). `run`
  // returns a Result.
  template <class Run>
  auto Use(const Run& run) -> decltype(run(std::declval<PgConn&>())) {
    auto c = link_.Get();
    if (!c.ok()) return c.status();
    auto r = run(**c);
    if (!r.ok() && !(*c)->ok()) {
      c = link_.Get();
      if (!c.ok()) return c.status();
      r = run(**c);
    }
    return r;
  }
  // Runs the work still queued, then stops the thread.
  void Stop() {
    {
      std::lock_guard lock(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    auto tick_at = std::chrono::steady_clock::now() + period_;
    for (;;) {
      std::function<void()> work;
      {
        std::unique_lock lock(mu_);
        auto ready = [&] { return stopped_ || !work_.empty(); };
        if (tick_) {
          cv_.wait_until(lock, tick_at, ready);
        } else {
          cv_.wait(lock, ready);
        }
        if (!work_.empty()) {
          work = std::move(work_.front());
          work_.pop_front();
        } else if (stopped_) {
          return;
        }
      }
      if (work) work();
      if (tick_ && std::chrono::steady_clock::now() >= tick_at) {
        tick_();
        tick_at = std::chrono::steady_clock::now() + period_;
      }
    }
  }

  Link link_;
  std::mutex mu_;
  std::condition_variable cv_;       // work queued, or stop
  std::condition_variable done_cv_;  // work Run waits for is done
  std::deque<std::function<void()>> work_;
  bool stopped_ = false;
  std::chrono::milliseconds period_{0};
  std::function<void()> tick_;
  std::thread thread_;
};

PgStore::PgStore(PgOptions options, Executor executor)
    : options_(std::move(options)),
      writer_(std::make_unique<Link>(options_.conninfo, "writer", /*pipelined=*/true,
                                     /*durable_commits=*/false, /*generic_plans=*/true)),
      syncer_(std::make_unique<Link>(options_.conninfo, "syncer", false, true)),
      reads_(std::make_unique<Lane>(options_.conninfo, "reader", true)),
      // A claim lost to a crash of PostgreSQL leaves its jobs ready, to be
      // delivered again (at-least-once), so claims do not wait for the
      // disk; id blocks must not be handed out twice, and are taken on
      // the reader lane, whose commits are durable.
      claims_(std::make_unique<Lane>(options_.conninfo, "claimer", false, true)),
      executor_(executor),
      syncs_key_(options_.node_id.empty() ? "syncs" : "syncs:" + options_.node_id),
      queue_(*this,
             {.max_batch = options_.max_batch,
              .sync_delay_ms = options_.sync_delay_ms,
              .linger_us = options_.linger_us},
             std::move(executor)) {}

Result<std::unique_ptr<PgStore>> PgStore::Open(PgOptions options, Executor executor) {
  if (options.shards <= 0 || options.shards > 32767) {
    return Status::InvalidArgument("postgres: the shard count must be 1 to 32767");
  }
  // Checks the connection string before anything else uses it.
  char* err = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(options.conninfo.c_str(), &err);
  if (parsed == nullptr) {
    std::string why = err ? err : "out of memory";
    PQfreemem(err);
    while (!why.empty() && why.back() == '\n') why.pop_back();
    return Status::InvalidArgument("postgres: bad connection string: " + why);
  }
  PQconninfoFree(parsed);

  std::unique_ptr<PgStore> store(new PgStore(std::move(options), std::move(executor)));
  {
    // First, before anything is written: the database must be ours.
    auto owner = PgConn::Connect(store->options_.conninfo, "delayd-owner");
    if (!owner.ok()) return owner.status();
    Status s =
        pg::HoldDatabase(**owner, !store->options_.node_id.empty(), store->options_.owner_name);
    if (!s.ok()) return s;
    store->owner_ = std::move(owner).value();
  }
  {
    auto migrator = PgConn::Connect(store->options_.conninfo, "delayd-migrate");
    if (!migrator.ok()) return migrator.status();
    Status s = pg::Migrate(**migrator, store->options_.shards, &store->shards_);
    if (!s.ok()) return s;
  }
  std::vector<Link*> links = {store->writer_.get(), store->syncer_.get(), &store->reads_->link()};
  if (store->shared() != nullptr) links.push_back(&store->claims_->link());
  for (Link* link : links) {
    auto c = link->Get();
    if (!c.ok()) return c.status();
  }
  store->set_writer_session(store->writer_->session());
  store->synced_writer_connects_ = store->writer_->connects();
  store->owner_checked_connects_ = store->syncer_->connects();
  store->queue_.Start();
  store->reads_->Every(std::chrono::milliseconds(store->options_.fold_counts_ms),
                       [s = store.get()] { s->FoldCounts(); });
  store->reads_->Start();
  if (store->shared() != nullptr) store->claims_->Start();
  return store;
}

PgStore::~PgStore() { Close(); }

// Work still queued on the lanes is done, and answered, before they stop.
void PgStore::Close() {
  queue_.Close();
  listener_.reset();
  claims_->Stop();
  reads_->Stop();
}

void PgStore::Aside(Lane& lane, std::function<void()> work, std::function<void()> answer) {
  auto both = [this, work = std::move(work), answer = std::move(answer)]() mutable {
    work();
    executor_(std::move(answer));
  };
  if (!lane.Queue(both)) both();
}

void PgStore::ReadAside(std::function<void()> read, std::function<void()> then) {
  Aside(*reads_, std::move(read), std::move(then));
}

StoreStats PgStore::stats() const { return queue_.stats(); }

void PgStore::Submit(Mutation m, Done done) { queue_.Submit(std::move(m), std::move(done)); }

void PgStore::SubmitAll(std::vector<Mutation> ms, Done done) {
  queue_.SubmitAll(std::move(ms), std::move(done));
}

// A commit with synchronous_commit on that has a transaction id waits for
// the WAL to be flushed up to its commit record, and so up to every commit
// it saw. That covers the writer's commits so far only if none of them was
// lost meanwhile: a server that crashed before flushing them recovers
// without them, and a sync on a new connection would then vouch for commits
// that are gone. A crash ends every session, though; so the sync also asks
// whether the writer's session (its server process and that process's
// start) is still on the server it reached, and fails unless it is and the
// writer has stayed on that one connection since the last good sync (a new
// writer connection may mean a server that lost what the old one
// committed). A session that lives on the server the sync reached has seen
// no crash of it since it began, so it lost nothing. A failed sync fails the
// submissions it would have answered; the engine then reads their jobs back
// from the store. (Until 2026-11-26 each batch wrote its number to `meta`
// for the sync to read back: a statement and a row version a batch.)
Status PgStore::Sync() {
  const Session writer = writer_session();
  auto c = syncer_->Get();
  if (!c.ok()) return c.status();
  if (Status s = KeepDatabase(); !s.ok()) return s;
  auto r = (*c)->Run("sync", Params().Bytes(syncs_key_).Int(writer.pid).Int(writer.start_us));
  if (!r.ok()) return r.status();
  const bool writer_here = pg::GetInt(r->get(), 0, 0) != 0;
  const uint64_t connects_now = writer_session().connects;
  const bool same_writer =
      writer.connects == connects_now && writer.connects == synced_writer_connects_;
  synced_writer_connects_ = writer.connects;
  if (!writer_here || !same_writer) {
    return Status::IoError(fmt::format(
        "postgres: commits may have been lost by the server ({}); their writes are reported as "
        "failed",
        !writer_here ? fmt::format("the writer's session, process {}, is not on it", writer.pid)
                     : "the writer reconnected"));
  }
  return Status::Ok();
}

PgStore::Session PgStore::writer_session() const {
  std::lock_guard lock(writer_session_mu_);
  return writer_session_;
}

void PgStore::set_writer_session(const Session& w) {
  std::lock_guard lock(writer_session_mu_);
  writer_session_ = w;
}

// What the store kept of a batch whose commit or sync failed, learned on a
// connection of its own within kSettleMs (CommitQueue::Backend::Settle).
// Jobs are inserted with ids never used before, and a batch commits whole,
// so a submission's inserts are all present or all absent; a submission
// without inserts keeps its failure (its change is idempotent to retry).
// Before it looks, a writer session whose COMMIT was in flight must be gone,
// or that COMMIT could still land after the look. What it finds present is
// made durable by a commit of its own with synchronous_commit on.
void PgStore::Settle(CommitQueue::Batch& batch, bool commit_in_flight) {
  constexpr auto kSettleMs = std::chrono::milliseconds(5000);
  const int old_pid = commit_in_flight ? committing_pid_.load() : 0;
  const int old_port = committing_port_.load();
  pg::ArrayParam ids(pg::kInt8);
  std::vector<std::vector<uint64_t>> inserted(batch.size());  // each submission's new ids
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].status.ok()) continue;
    batch[i].ForEach([&](const Mutation& m) {
      if (const auto* ins = std::get_if<change::InsertJob>(&m.change)) {
        ids.Int(static_cast<int64_t>(ins->job.id));
        inserted[i].push_back(ins->job.id);
      }
    });
  }
  if (ids.size() == 0) return;
  const auto deadline = std::chrono::steady_clock::now() + kSettleMs;
  std::string why;
  for (auto backoff = std::chrono::milliseconds(50);;
       backoff = std::min(backoff * 2, std::chrono::milliseconds(500))) {
    auto present = [&]() -> Result<std::set<uint64_t>> {
      auto c = PgConn::Connect(options_.conninfo, "delayd-settle");
      if (!c.ok()) return c.status();
      PgConn& conn = **c;
      if (old_pid != 0) {
        // A backend that lost its client ends at its next read; make sure.
        auto gone = conn.Query(
            "SELECT count(pg_terminate_backend(pid))::int8 FROM pg_stat_activity WHERE pid = "
            "$1::int4 AND application_name = 'delayd-writer' AND "
            "coalesce(client_port, -1) = $2::int4",
            Params().Int(old_pid).Int(old_port), {pg::kInt8, pg::kInt8});
        if (!gone.ok()) return gone.status();
        if (pg::GetInt(gone->get(), 0, 0) != 0) {
          return Status::Unavailable("the writer's old session is still ending");
        }
      }
      Status s = conn.Exec("SET synchronous_commit = on");
      if (!s.ok()) return s;
      auto rows = conn.Query("SELECT id FROM jobs WHERE id = ANY($1)", Params().Array(ids),
                             {pg::kInt8Array});
      if (!rows.ok()) return rows.status();
      std::set<uint64_t> found;
      for (int r = 0; r < PQntuples(rows->get()); ++r) {
        found.insert(static_cast<uint64_t>(pg::GetInt(rows->get(), r, 0)));
      }
      // A transaction with an id commits durably, which flushes the WAL of
      // every commit this session could see: the rows found survive a crash.
      s = conn.Exec("BEGIN; SELECT txid_current(); COMMIT");
      if (!s.ok()) return s;
      return found;
    }();
    if (present.ok()) {
      // A batch commits whole: one id of a submission tells for all of them.
      for (size_t i = 0; i < batch.size(); ++i) {
        if (!inserted[i].empty() && present->count(inserted[i].front()) != 0) {
          batch[i].status = Status::Ok();
        }
      }
      spdlog::info("postgres: settled a batch in doubt: {} of its jobs were kept", present->size());
      return;
    }
    why = present.status().message();
    if (std::chrono::steady_clock::now() + backoff >= deadline) break;
    std::this_thread::sleep_for(backoff);
  }
  spdlog::error("postgres: could not learn whether a batch was kept: {}", why);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (inserted[i].empty()) continue;
    batch[i].status = Status::Unknown(
        "the store's connection broke while these jobs were being committed, and whether they "
        "were kept could not be learned in time: look them up by id before submitting again",
        fmt::format("{}", fmt::join(inserted[i], ",")));
  }
}

// After the syncer reconnected (the server restarted, or the network broke),
// the owner's session may have gone too, and the lock with it: take it
// again. Until this process holds the database, no sync vouches for a write.
Status PgStore::KeepDatabase() {
  if (syncer_->connects() == owner_checked_connects_ && owner_->ok()) return Status::Ok();
  if (!pg::HoldsDatabase(*owner_)) {
    auto again = PgConn::Connect(options_.conninfo, "delayd-owner");
    if (!again.ok()) return again.status();
    Status s = pg::HoldDatabase(**again, !options_.node_id.empty(), options_.owner_name);
    if (!s.ok()) {
      spdlog::error("{}", s.message());
      return Status::IoError(s.message());
    }
    owner_ = std::move(again).value();
    spdlog::info("postgres: holding the database again after a reconnection");
  }
  owner_checked_connects_ = syncer_->connects();
  return Status::Ok();
}

Status PgStore::Commit(CommitQueue::Batch& batch) {
  auto c = writer_->Get();
  if (!c.ok()) return c.status();
  if (writer_->connects() != writer_session().connects) set_writer_session(writer_->session());
  PgConn& conn = **c;
  Batcher b(conn);
  uint64_t max_id = 0;
  // Cluster mode: what the batch announces, sent in it (PgStore's header).
  const bool announce = shared() != nullptr;
  const int64_t due_before = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count() +
                             options_.due_notice_ms;
  std::set<std::string> ready_tubes;
  std::set<std::string> push_ready;     // "<shard> <tube>"
  std::set<std::string> changed_tubes;  // paused, resumed or given settings
  std::set<std::string> changed_timers;
  std::vector<DueEntry> due;
  auto notice = [&](const JobRecord& j, int shard) {
    if (!announce) return;
    if (j.state == StoredState::kReady) {
      if (j.push) {
        push_ready.insert(fmt::format("{} {}", shard, j.tube));
      } else {
        ready_tubes.insert(j.tube);
      }
    }
    if (j.state == StoredState::kDelayed && j.due_ms < due_before) {
      due.push_back({shard, j.id, j.due_ms});
    }
  };
  // A guarded change or a fenced write that fails its check changes nothing
  // and fails its submission only; `own` is that submission's status when
  // it is checked in its one statement, else null (a savepoint catches it).
  constexpr const char* kChanged = "the job was changed by another node, or is gone";
  constexpr const char* kFenced = "this node no longer holds the shard's lease";
  constexpr StatusCode kFencedCode = StatusCode::kFenced;
  auto guard = [](std::optional<uint64_t> v) { return v ? kChanged : nullptr; };
  // The parameters of kFence: the shards, this node, their epochs.
  auto fence_params = [&](const std::vector<change::Fence>& fences) {
    ArrayParam shards(kInt8);
    ArrayParam epochs(kInt8);
    for (const change::Fence& f : fences) {
      shards.Int(f.shard);
      epochs.Int(f.epoch);
    }
    Params p;
    p.Array(shards).Bytes(options_.node_id).Array(epochs);
    return p;
  };
  auto apply = [&](const Mutation& m, Status* own) {
    std::visit(
        Overloaded{
            [&](const change::InsertJob& x) {
              const int shard = ShardOf(x.job);
              b.Insert(x.job, shard);
              notice(x.job, shard);
              max_id = std::max(max_id, x.job.id);
            },
            [&](const change::ReplaceJob& x) {
              const int shard = ShardOf(x.job);
              b.Send("replace", ChangeParams(x.job, shard, x.if_version), guard(x.if_version), own);
              notice(x.job, shard);
            },
            [&](const change::UpdateJob& x) {
              b.Send("update", ChangeParams(x.job, 0, x.if_version), guard(x.if_version), own);
              notice(x.job, ShardOf(x.job));
            },
            [&](const change::DeleteJob& x) { b.Delete(x.id, x.if_version, kChanged, own); },
            [&](const change::PauseTube& x) {
              b.Send("pause", Params().Bytes(x.tube).Int(x.pause_ms).Int(x.unpause_ms));
              if (announce) changed_tubes.insert(x.tube);
            },
            [&](const change::SetTopicSettings& x) {
              b.Send("settings", Params().Bytes(x.tube).OptionalBytes(x.settings));
              if (announce) changed_tubes.insert(x.tube);
            },
            [&](const change::PurgeDone& x) { b.Send("purge", Params().Int(x.before_ms)); },
            [&](const change::PutTimer& x) {
              const TimerRecord& t = x.timer;
              const int64_t id = static_cast<int64_t>(t.id);
              b.Send("timer_put", Params()
                                      .Int(pg::TimerShard(t.id, shards_))
                                      .Int(id)
                                      .Bytes(t.name)
                                      .Bytes(t.definition)
                                      .Int(t.next_fire_ms)
                                      .Int(t.last_fire_ms)
                                      .Int(t.created_ms));
              // Like job ids, timer ids never repeat: a new timer's fire keys
              // (timer:<id>:<time>) must not meet a deleted one's finished jobs.
              b.Send("set_next", Params().Bytes("next_timer_id").Int(id + 1));
              if (announce) changed_timers.insert(std::to_string(t.id));
            },
            [&](const change::DeleteTimer& x) {
              Params p;
              p.Int(pg::TimerShard(x.id, shards_)).Int(static_cast<int64_t>(x.id));
              b.Send("timer_delete_fires", p);
              b.Send("timer_delete", p);
              if (announce) changed_timers.insert(std::to_string(x.id));
            },
            [&](const change::AdvanceTimer& x) {
              const int64_t shard = pg::TimerShard(x.id, shards_);
              const int64_t id = static_cast<int64_t>(x.id);
              if (x.fence) {
                // The fence's shard must be the timer's: another is refused.
                const int64_t fenced_shard = x.fence->shard == shard ? shard : -1;
                b.Send("fence",
                       Params().Int(fenced_shard).Bytes(options_.node_id).Int(x.fence->epoch),
                       kFenced, nullptr, kFencedCode);
              }
              b.Send("timer_advance",
                     Params().Int(shard).Int(id).Int(x.next_fire_ms).Int(x.last_fire_ms),
                     "advance timer: no such timer");
              for (const TimerFire& f : x.fires) {
                b.Send("fire_insert", Params()
                                          .Int(pg::TimerShard(f.timer_id, shards_))
                                          .Int(static_cast<int64_t>(f.timer_id))
                                          .Int(f.fire_ms)
                                          .Int(static_cast<int64_t>(f.job_id))
                                          .Bytes(f.outcome)
                                          .Int(f.at_ms));
              }
              b.Send("fire_prune", Params().Int(shard).Int(id));
            },
            [&](const change::PromoteDue& x) {
              ArrayParam shards(kInt8);
              ArrayParam ids(kInt8);
              for (const change::DueJob& d : x.jobs) {
                shards.Int(d.shard);
                ids.Int(static_cast<int64_t>(d.id));
              }
              ArrayParam tubes(kText);
              ArrayParam wanted(kInt8);
              for (const auto& [tube, n] : x.claim_for) {
                tubes.Bytes(tube);
                wanted.Int(n);
              }
              Batcher::Rows rows = nullptr;
              if (x.claimed) {
                rows = [claimed = x.claimed](const PGresult* r) {
                  // Read whole each time: a batch written again reads them again.
                  claimed->clear();
                  for (int i = 0; i < PQntuples(r); ++i) {
                    if (!PQgetisnull(r, i, 0)) claimed->push_back(ReadJob(r, i));
                  }
                };
              }
              b.Send(
                  "promote",
                  fence_params(x.fences).Array(shards).Array(ids).Int(x.now_ms).Array(tubes).Array(
                      wanted),
                  kFenced, own, kFencedCode, std::move(rows));
            },
            [&](const change::RequeueExpired& x) {
              b.Send("requeue", fence_params(x.fences).Int(x.before_ms), kFenced, own, kFencedCode);
            },
        },
        m.change);
  };

  b.Sql("BEGIN");
  if (announce) {
    std::set<int> fenced;
    for (auto& p : batch) {
      p.ForEach([&](const Mutation& m) {
        std::visit(Overloaded{[&](const change::PromoteDue& x) {
                                for (const change::Fence& f : x.fences) fenced.insert(f.shard);
                              },
                              [&](const change::RequeueExpired& x) {
                                for (const change::Fence& f : x.fences) fenced.insert(f.shard);
                              },
                              [&](const change::AdvanceTimer& x) {
                                if (x.fence) fenced.insert(x.fence->shard);
                              },
                              [](const auto&) {}},
                   m.change);
      });
    }
    if (!fenced.empty()) {
      ArrayParam shards(kInt8);
      for (int shard : fenced) shards.Int(shard);
      b.Send("lock_leases", Params().Array(shards));
    }
  }
  Status s;
  for (auto& p : batch) {
    if (p.CheckedInOneStatement()) {
      apply(p.mutation, &p.status);
      continue;
    }
    if (batch.size() == 1 || !p.MayConflict()) {
      p.ForEach([&](const Mutation& m) { apply(m, nullptr); });
      continue;
    }
    // Everything before it first, so that a failure is known to be its own.
    s = b.Flush();
    if (!s.ok()) break;
    const uint64_t max_id_before = max_id;
    b.Sql("SAVEPOINT one");
    p.ForEach([&](const Mutation& m) { apply(m, nullptr); });
    Status one = b.Flush();
    if (RefusedAlone(one)) {
      b.Sql("ROLLBACK TO SAVEPOINT one");
      p.status = one;  // this submission fails alone
      max_id = max_id_before;
    } else if (!one.ok()) {
      s = one;
      break;
    }
    b.Sql("RELEASE SAVEPOINT one");
  }
  // The id high-water mark survives even when the newest jobs are deleted, so
  // ids never repeat across restarts. In cluster mode ids come from blocks
  // (TakeIds), which raise it already: a row written by every batch of every
  // node would make their writers wait for each other.
  if (s.ok() && !announce && max_id >= next_id_floor_) {
    b.Send("set_next", Params().Bytes("next_id").Int(static_cast<int64_t>(max_id + 1)));
  }
  for (const auto& [channel, names] :
       {std::pair{kReadyChannel, &ready_tubes}, std::pair{kPushChannel, &push_ready},
        std::pair{kTubeChannel, &changed_tubes}, std::pair{kTimerChannel, &changed_timers}}) {
    if (!s.ok() || names->empty()) continue;
    ArrayParam tubes(kText);
    for (const std::string& t : *names) tubes.Bytes(t);
    b.Send("notify_tubes", Params().Bytes(channel).Array(tubes));
  }
  // A notice holds at most 8000 bytes: 150 entries of at most 48.
  for (size_t i = 0; s.ok() && i < due.size(); i += kDuePerNotice) {
    const std::string payload = FormatDue(std::vector<DueEntry>(
        due.begin() + static_cast<ptrdiff_t>(i),
        due.begin() + static_cast<ptrdiff_t>(std::min(due.size(), i + kDuePerNotice))));
    b.Send("notify_due", Params().Bytes(payload));
  }
  // A timer advanced that no longer exists fails its batch: known before COMMIT.
  if (s.ok() && b.checks_pending()) s = b.Flush();
  bool commit_sent = false;
  if (s.ok()) {
    committing_pid_ = PQbackendPID(conn.get());
    committing_port_ = LocalPort(PQsocket(conn.get()));
    b.Sql("COMMIT");
    commit_sent = true;
    s = b.Flush();
  }
  if (!s.ok()) {
    (void)b.Flush();  // what was sent after the failure
    if (conn.ok()) {
      b.Sql("ROLLBACK");
      (void)b.Flush();
    } else if (commit_sent) {
      // The COMMIT may have reached the server and been applied: only a
      // look at the store tells (Settle).
      return Status::Unknown("postgres: the connection broke with the batch's COMMIT in flight: " +
                             s.message());
    }
    return s;
  }
  if (max_id >= next_id_floor_) next_id_floor_ = max_id + 1;
  return Status::Ok();
}

Result<PgResult> PgStore::Read(const std::function<Result<PgResult>(PgConn&)>& run) {
  Result<PgResult> r = Status::Internal("postgres: read not made");
  reads_->Run([&] { r = reads_->Use(run); });
  return r;
}

Result<PgResult> PgStore::Read(const char* name, const Params& p) {
  return Read([&](PgConn& c) { return c.Run(name, p); });
}

Result<Recovered> PgStore::Recover(int64_t horizon_minute) {
  Result<Recovered> out = Status::Internal("postgres: recovery not made");
  reads_->Run([&] { out = RecoverNow(horizon_minute); });
  return out;
}

Result<Recovered> PgStore::RecoverNow(int64_t horizon_minute) {
  auto query = [&](const std::string& sql, const Params& p) {
    return reads_->Use([&](PgConn& c) { return c.Query(sql, p); });
  };
  Recovered out;
  // Ready, buried, and delayed through the horizon: read whole; so are jobs
  // reserved by the nodes of a cluster that used this database, ready again.
  auto jobs =
      Rows(query(Select(kJobColumns,
                        "FROM jobs WHERE state IN (0, 2, 4) OR (state=1 AND due_min<=$1::int8) "
                        "ORDER BY id"),
                 Params().Int(horizon_minute)),
           ReadJob);
  if (!jobs.ok()) return jobs.status();
  out.jobs = std::move(jobs).value();
  // Delayed beyond the horizon: they stay in the store, counted per tube
  // and due hour (floor: a minute before the epoch is in hour -1).
  auto far = query(
      "SELECT tube, floor(due_min / 60.0)::int8, count(*) FROM jobs WHERE state=1 AND "
      "due_min>$1::int8 GROUP BY 1, 2 ORDER BY 1, 2",
      Params().Int(horizon_minute));
  if (!far.ok()) return far.status();
  for (int i = 0; i < PQntuples(far->get()); ++i) {
    out.far.push_back({pg::GetBytes(far->get(), i, 0), pg::GetInt(far->get(), i, 1),
                       static_cast<uint64_t>(pg::GetInt(far->get(), i, 2))});
  }
  auto tubes = query("SELECT name, pause_ms, unpause_ms, settings FROM tubes", Params());
  if (!tubes.ok()) return tubes.status();
  for (int i = 0; i < PQntuples(tubes->get()); ++i) {
    std::string name = pg::GetBytes(tubes->get(), i, 0);
    if (int64_t pause = pg::GetInt(tubes->get(), i, 1); pause > 0) {
      out.pauses.push_back({name, pause, pg::GetInt(tubes->get(), i, 2)});
    }
    std::string settings = pg::GetBytes(tubes->get(), i, 3);
    if (!settings.empty()) out.settings.push_back({std::move(name), std::move(settings)});
  }
  auto next = query(
      "SELECT greatest(coalesce((SELECT value FROM meta WHERE key='next_id'), 1), "
      "coalesce((SELECT max(id) FROM jobs), 0) + 1)",
      Params());
  if (!next.ok()) return next.status();
  out.next_id = static_cast<uint64_t>(pg::GetInt(next->get(), 0, 0));
  auto next_timer = NextTimerId();
  if (!next_timer.ok()) return next_timer.status();
  out.next_timer_id = *next_timer;
  return out;
}

// A read of the jobs table, and an insert into it that is rolled back: what
// makes writes fail (a lost privilege, a constraint, a full disk, a lock held
// for long) fails the probe too, and nothing is written.
Status PgStore::Probe() {
  auto r = Read([](PgConn& c) -> Result<PgResult> {
    Status s = c.Exec(
        "BEGIN; SET LOCAL statement_timeout = 2000; SELECT 1 FROM jobs LIMIT 1; "
        "INSERT INTO jobs (shard, id, tube, pri, state, due_ms, due_min, delay_ms, ttr_ms, "
        "created_ms, run_at_ms, reserves, timeouts, releases, buries, kicks, body) VALUES "
        "(0, 0, 'delayd-probe', 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, ''::bytea)");
    Status rolled_back = c.Exec("ROLLBACK");
    if (!s.ok()) return s;
    if (!rolled_back.ok()) return rolled_back;
    return c.Query("SELECT 1::int8");
  });
  return r.status();
}

Result<std::optional<JobRecord>> PgStore::Get(uint64_t id) {
  return First(Rows(Read("get", Params().Int(static_cast<int64_t>(id))), ReadJob));
}

Result<std::optional<JobRecord>> PgStore::GetByKey(const std::string& tube,
                                                   const std::string& key) {
  if (key.empty()) return std::optional<JobRecord>();
  return First(Rows(
      Read("get_by_key", Params().Int(pg::JobShard(0, tube, key, shards_)).Bytes(tube).Bytes(key)),
      ReadJob));
}

Result<std::vector<JobRecord>> PgStore::List(const ListQuery& lq) {
  Params p;
  std::vector<Oid> types;
  std::string sql = Select(kJobColumns, "FROM jobs WHERE id>$1");
  p.Int(static_cast<int64_t>(lq.after_id));
  types.push_back(kInt8);
  auto add = [&](const char* cond, Oid type) {
    types.push_back(type);
    sql += fmt::format(fmt::runtime(cond), types.size());
  };
  if (lq.tube) {
    add(" AND tube=${}", kText);
    p.Bytes(*lq.tube);
  }
  if (lq.state) {  // a literal: the partial index of that state applies (jobs_buried)
    sql += " AND state=" + std::to_string(static_cast<int>(*lq.state));
  }
  if (!lq.key_prefix.empty()) {
    add(" AND substr(key, 1, length(${0})) = ${0}", kBytea);
    p.Bytes(lq.key_prefix);
  }
  if (lq.due_after_ms) {
    add(" AND due_ms>=${}", kInt8);
    p.Int(*lq.due_after_ms);
  }
  if (lq.due_before_ms) {
    add(" AND due_ms<${}", kInt8);
    p.Int(*lq.due_before_ms);
  }
  if (!lq.error_contains.empty()) {
    add(" AND last_error IS NOT NULL AND position(${} in last_error)>0", kBytea);
    p.Bytes(lq.error_contains);
  }
  add(" ORDER BY id LIMIT ${}", kInt8);
  p.Int(static_cast<int64_t>(lq.limit));
  return Rows(Read([&](PgConn& c) { return c.Query(sql, p, types); }), ReadJob);
}

Result<std::vector<ErrorGroup>> PgStore::BuriedByError(const std::optional<std::string>& tube,
                                                       size_t limit) {
  Params p;
  p.Int(static_cast<int64_t>(limit));
  std::vector<Oid> types = {kInt8};
  if (tube) {
    p.Bytes(*tube);
    types.push_back(kText);
  }
  const std::string sql = std::string(
                              "SELECT coalesce(last_error, ''::bytea), count(*), min(id) FROM jobs "
                              "WHERE state = 2") +
                          (tube ? " AND tube = $2" : "") +
                          " GROUP BY 1 ORDER BY 2 DESC, 3 LIMIT $1";
  return Rows(
      Read([&](PgConn& c) { return c.Query(sql, p, types); }), [](const PGresult* r, int row) {
        return ErrorGroup{pg::GetBytes(r, row, 0), static_cast<uint64_t>(pg::GetInt(r, row, 1)),
                          static_cast<uint64_t>(pg::GetInt(r, row, 2))};
      });
}

Result<std::vector<uint64_t>> PgStore::DueCounts(int64_t now_ms, int64_t from_minute,
                                                 int64_t bucket_minutes, size_t buckets,
                                                 const std::optional<std::string>& tube) {
  // As SqliteStore's: the minutes after now's from the index, now's from now on.
  Params p;
  p.Int(DueMinute(now_ms))
      .Int(bucket_minutes)
      .Int(from_minute + bucket_minutes * static_cast<int64_t>(buckets))
      .Int(now_ms)
      .Int(from_minute);
  std::vector<Oid> types = {kInt8, kInt8, kInt8, kInt8, kInt8};
  std::string where = "state = 1";
  if (tube) {
    where += " AND tube = $6";
    p.Bytes(*tube);
    types.push_back(kText);
  }
  const std::string sql =
      "SELECT ($1 - $5) / $2, count(*) FROM jobs WHERE " + where +
      " AND due_min = $1 AND due_ms >= $4 UNION ALL SELECT (due_min - $5) / $2, count(*) FROM jobs "
      "WHERE " +
      where + " AND due_min > $1 AND due_min < $3 GROUP BY 1";
  auto rows =
      Rows(Read([&](PgConn& c) { return c.Query(sql, p, types); }), [](const PGresult* r, int row) {
        return std::pair{pg::GetInt(r, row, 0), pg::GetInt(r, row, 1)};
      });
  if (!rows.ok()) return rows.status();
  std::vector<uint64_t> out(buckets);
  for (auto [b, n] : *rows) {
    if (b >= 0 && b < static_cast<int64_t>(buckets))
      out[static_cast<size_t>(b)] += static_cast<uint64_t>(n);
  }
  return out;
}

Result<std::vector<JobRecord>> PgStore::LoadMinute(int64_t minute, uint64_t after_id,
                                                   size_t limit) {
  return Rows(Read("load_minute", Params()
                                      .Int(minute)
                                      .Int(static_cast<int64_t>(after_id))
                                      .Int(static_cast<int64_t>(limit))),
              ReadJob);
}

Result<std::vector<JobRecord>> PgStore::FarDelayed(const std::string& tube, int64_t after_minute,
                                                   size_t limit) {
  return Rows(
      Read("far_delayed", Params().Int(after_minute).Bytes(tube).Int(static_cast<int64_t>(limit))),
      ReadJob);
}

Result<std::optional<JobRecord>> PgStore::BestReady(const std::string& tube) {
  return First(Rows(Read("best_ready", Params().Bytes(tube)), ReadJob));
}

namespace {
Params OptionalTube(const std::optional<std::string>& tube) {
  Params p;
  tube ? p.Bytes(*tube) : p.Null();
  return p;
}
}  // namespace

// The reads lane's: every node folds, so that the deltas stay about a
// second's worth while any node runs (the database runs one fold at a
// time). Every vacuum_deltas_every folds it made, the store also vacuums
// job_deltas: autovacuum looks at a table once a minute at most, and until
// then the rows folded stay in its pages for every fold and count to pass
// over (5-7 ms a fold after a minute at 2,000 jobs a second). A failure is
// tried again at the next tick; only the first of a run of them is logged.
void PgStore::FoldCounts() {
  auto folded = reads_->Use([](PgConn& c) { return c.Run("fold_counts", Params()); });
  Status s = folded.status();
  if (s.ok() && pg::GetInt(folded->get(), 0, 0) == 1 &&
      ++folds_ % options_.vacuum_deltas_every == 0) {
    s = reads_->Use([](PgConn& c) { return c.Exec("VACUUM job_deltas"); });
  }
  if (!s.ok() && !fold_failing_) {
    spdlog::warn("postgres: folding the job counts: {}", s.message());
  }
  fold_failing_ = !s.ok();
}

Result<std::vector<TubeCount>> PgStore::CountJobs(std::optional<std::string> tube) {
  return Rows(Read("count_jobs", OptionalTube(tube)), [](const PGresult* r, int row) {
    auto n = [&](int col) { return static_cast<uint64_t>(pg::GetInt(r, row, col)); };
    return TubeCount{pg::GetBytes(r, row, 0), n(1), n(2), n(3), n(4), n(5), pg::GetInt(r, row, 6)};
  });
}

Result<std::vector<TubeRow>> PgStore::Tubes(std::optional<std::string> tube) {
  return Rows(Read("tubes", OptionalTube(tube)), [](const PGresult* r, int row) {
    return TubeRow{pg::GetBytes(r, row, 0), pg::GetInt(r, row, 1), pg::GetInt(r, row, 2),
                   pg::GetBytes(r, row, 3)};
  });
}

Result<std::optional<TimerRecord>> PgStore::GetTimer(uint64_t id) {
  return First(Rows(Read("timer_get", Params().Int(static_cast<int64_t>(id))), ReadTimer));
}

Result<std::optional<TimerRecord>> PgStore::GetTimerByName(const std::string& name) {
  return First(Rows(Read("timer_by_name", Params().Bytes(name)), ReadTimer));
}

Result<std::vector<TimerRecord>> PgStore::ListTimers(uint64_t after_id, size_t limit) {
  return Rows(Read("timers_list",
                   Params().Int(static_cast<int64_t>(after_id)).Int(static_cast<int64_t>(limit))),
              ReadTimer);
}

Result<std::vector<TimerRecord>> PgStore::TimersDue(int64_t from_ms, uint64_t after_id,
                                                    int64_t before_ms, size_t limit) {
  return Rows(Read("timers_due", Params()
                                     .Int(from_ms)
                                     .Int(static_cast<int64_t>(after_id))
                                     .Int(before_ms)
                                     .Int(static_cast<int64_t>(limit))
                                     .Null()),
              ReadTimer);
}

Result<std::vector<TimerRecord>> PgStore::TimersDueOf(const std::vector<int>& shards,
                                                      int64_t from_ms, uint64_t after_id,
                                                      int64_t before_ms, size_t limit) {
  if (shards.empty()) return std::vector<TimerRecord>();
  ArrayParam owned(kInt8);
  for (int s : shards) owned.Int(s);
  return Rows(Read("timers_due", Params()
                                     .Int(from_ms)
                                     .Int(static_cast<int64_t>(after_id))
                                     .Int(before_ms)
                                     .Int(static_cast<int64_t>(limit))
                                     .Array(owned)),
              ReadTimer);
}

Result<std::vector<std::string>> PgStore::PushTubes(const std::vector<int>& shards) {
  if (shards.empty()) return std::vector<std::string>();
  ArrayParam owned(kInt8);
  for (int s : shards) owned.Int(s);
  return Rows(Read("push_tubes", Params().Array(owned)),
              [](const PGresult* r, int row) { return pg::GetBytes(r, row, 0); });
}

int PgStore::TimerShardOf(uint64_t id) const { return pg::TimerShard(id, shards_); }

void PgStore::TakeTimerId(std::function<void(Result<uint64_t>)> done) {
  Answer<uint64_t>(
      *reads_,
      [](PgConn& c) -> Result<uint64_t> {
        auto r = c.Run("take_timer_id", Params());
        if (!r.ok()) return r.status();
        return static_cast<uint64_t>(pg::GetInt(r->get(), 0, 0));
      },
      std::move(done));
}

Result<std::vector<TimerFire>> PgStore::TimerFires(uint64_t timer_id, size_t limit) {
  return Rows(Read("timer_fires", Params()
                                      .Int(pg::TimerShard(timer_id, shards_))
                                      .Int(static_cast<int64_t>(timer_id))
                                      .Int(static_cast<int64_t>(limit))),
              [](const PGresult* r, int row) {
                return TimerFire{static_cast<uint64_t>(pg::GetInt(r, row, 0)),
                                 pg::GetInt(r, row, 1),
                                 static_cast<uint64_t>(pg::GetInt(r, row, 2)),
                                 pg::GetBytes(r, row, 3), pg::GetInt(r, row, 4)};
              });
}

Result<uint64_t> PgStore::NextTimerId() {
  auto r = Read("next_timer_id", Params());
  if (!r.ok()) return r.status();
  return static_cast<uint64_t>(pg::GetInt(r->get(), 0, 0));
}

int PgStore::ShardOf(const JobRecord& j) const {
  return pg::JobShard(j.id, j.tube, j.key, shards_);
}

template <class T>
void PgStore::Answer(Lane& lane, std::function<Result<T>(PgConn&)> run,
                     std::function<void(Result<T>)> done) {
  auto out = std::make_shared<Result<T>>(Status::Internal("postgres: not run"));
  Aside(
      lane, [&lane, out, run = std::move(run)] { *out = lane.Use(run); },
      [out, done = std::move(done)] { done(std::move(*out)); });
}

void PgStore::Claim(ClaimQuery q, std::function<void(Result<std::vector<JobRecord>>)> done) {
  if (q.tubes.empty() || q.limit == 0) return executor_([done] { done(std::vector<JobRecord>()); });
  ArrayParam tubes(kText);
  for (const std::string& t : q.tubes) tubes.Bytes(t);
  // Params cannot be copied; the work must be.
  auto p = std::make_shared<Params>();
  p->Bytes(options_.node_id).Int(q.now_ms).Array(tubes).Int(static_cast<int64_t>(q.limit));
  if (q.shards.empty()) {
    p->Null();
  } else {
    ArrayParam shards(kInt8);
    for (int shard : q.shards) shards.Int(shard);
    p->Array(shards);
  }
  Answer<std::vector<JobRecord>>(
      *claims_,
      [p, name = q.push ? "claim_push" : "claim"](PgConn& c) -> Result<std::vector<JobRecord>> {
        auto out = Rows(c.Run(name, *p), ReadJob);
        if (out.ok()) {
          // RETURNING keeps no order: best first, as the claim chose them.
          std::sort(out->begin(), out->end(), [](const JobRecord& a, const JobRecord& b) {
            return std::tie(a.priority, a.id) < std::tie(b.priority, b.id);
          });
        }
        return out;
      },
      std::move(done));
}

void PgStore::Due(DueQuery q, std::function<void(Result<std::vector<DueEntry>>)> done) {
  if (q.shards.empty() || q.limit == 0) return executor_([done] { done(std::vector<DueEntry>()); });
  ArrayParam shards(kInt8);
  for (int s : q.shards) shards.Int(s);
  // Ids are below 2^63: the cursor after the last id of a minute.
  const int64_t after_id = static_cast<int64_t>(std::min<uint64_t>(q.after_id, INT64_MAX));
  auto p = std::make_shared<Params>();
  p->Array(shards)
      .Int(q.after_minute)
      .Int(after_id)
      .Int(q.through_minute)
      .Int(static_cast<int64_t>(q.limit));
  Answer<std::vector<DueEntry>>(
      *reads_,
      [p](PgConn& c) {
        return Rows(c.Run("due_of_shards", *p), [](const PGresult* r, int row) {
          return DueEntry{static_cast<int>(pg::GetInt(r, row, 0)),
                          static_cast<uint64_t>(pg::GetInt(r, row, 1)), pg::GetInt(r, row, 2)};
        });
      },
      std::move(done));
}

void PgStore::TakeIds(uint64_t n, std::function<void(Result<uint64_t>)> done) {
  Answer<uint64_t>(
      *reads_,
      [n](PgConn& c) -> Result<uint64_t> {
        auto r = c.Run("take_ids", Params().Int(static_cast<int64_t>(n)));
        if (!r.ok()) return r.status();
        return static_cast<uint64_t>(pg::GetInt(r->get(), 0, 0));
      },
      std::move(done));
}

Status PgStore::Listen(std::function<void(std::vector<Notice>)> fn) {
  if (shared() == nullptr) return Status::Internal("postgres: notices are for cluster mode");
  auto hear = [this, fn = std::move(fn)](std::vector<pg::PgListener::Heard> heard, bool listening) {
    std::vector<Notice> notices;
    auto add = [&](Notice::Kind kind) -> Notice& {
      notices.emplace_back();
      notices.back().kind = kind;
      return notices.back();
    };
    if (listening) add(Notice::Kind::kListening);
    for (pg::PgListener::Heard& h : heard) {
      if (h.channel == kReadyChannel) {
        add(Notice::Kind::kReady).tube = std::move(h.payload);
        continue;
      }
      if (h.channel == kTubeChannel) {
        add(Notice::Kind::kTube).tube = std::move(h.payload);
        continue;
      }
      if (h.channel == kPushChannel) {  // "<shard> <tube>"
        const size_t space = h.payload.find(' ');
        if (space == std::string::npos) continue;
        Notice& n = add(Notice::Kind::kPush);
        n.shard = std::atoi(h.payload.substr(0, space).c_str());
        n.tube = h.payload.substr(space + 1);
        continue;
      }
      if (h.channel == kTimerChannel) {
        add(Notice::Kind::kTimer).id = std::strtoull(h.payload.c_str(), nullptr, 10);
        continue;
      }
      for (const DueEntry& e : ParseDue(h.payload)) {
        Notice& n = add(Notice::Kind::kDue);
        n.shard = e.shard;
        n.id = e.id;
        n.due_ms = e.due_ms;
      }
    }
    executor_([fn, notices = std::move(notices)]() mutable { fn(std::move(notices)); });
  };
  auto l = pg::PgListener::Start(
      options_.conninfo, {kReadyChannel, kDueChannel, kTubeChannel, kPushChannel, kTimerChannel},
      hear);
  if (!l.ok()) return l.status();
  listener_ = std::move(l).value();
  return Status::Ok();
}

}  // namespace delayd::store
