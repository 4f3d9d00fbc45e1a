// PgStore's write path: the writer's Commit of a batch, the syncer's Sync
// and KeepDatabase, and the Settle of a batch whose commit is in doubt
// (pg_store.h says which thread runs each).
#include <arpa/inet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/overloaded.h"
#include "store/postgres/pg_batcher.h"
#include "store/postgres/pg_owner.h"
#include "store/postgres/pg_rows.h"
#include "store/postgres/pg_schema.h"
#include "store/postgres/pg_store.h"

namespace delayd::store {

using pg::ArrayParam;
using pg::Batcher;
using pg::ChangeParams;
using pg::kInt8;
using pg::kText;
using pg::Params;
using pg::PgConn;
using pg::ReadJob;

namespace {

// Due notices per notify (each at most 48 bytes; a notice holds 8000).
constexpr size_t kDuePerNotice = 150;

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

// What a batch announces in cluster mode (pg_store.h), gathered as its
// changes are queued and notified at its end, inside its transaction, so
// that a notice is heard only once its change is committed.
class Notices {
 public:
  // With `on` false (a store of one node) nothing is gathered. Delayed jobs
  // due before `due_before_ms` (wall) are announced to their shard's owner.
  Notices(bool on, int64_t due_before_ms) : on_(on), due_before_ms_(due_before_ms) {}

  // A job row written: ready, or delayed and due within the window.
  void Job(const JobRecord& j, int shard) {
    if (!on_) return;
    if (j.state == StoredState::kReady) {
      if (j.push) {
        push_ready_.insert(fmt::format("{} {}", shard, j.tube));
      } else {
        ready_tubes_.insert(j.tube);
      }
    }
    if (j.state == StoredState::kDelayed && j.due_ms < due_before_ms_) {
      due_.push_back({shard, j.id, j.due_ms});
    }
  }
  // A tube paused, resumed or given settings.
  void Tube(const std::string& tube) {
    if (on_) changed_tubes_.insert(tube);
  }
  // A timer put or deleted.
  void Timer(uint64_t id) {
    if (on_) changed_timers_.insert(std::to_string(id));
  }
  // Queues the notifies on `b`.
  void Send(Batcher& b) const {
    for (const auto& [channel, names] :
         {std::pair{kReadyChannel, &ready_tubes_}, std::pair{kPushChannel, &push_ready_},
          std::pair{kTubeChannel, &changed_tubes_}, std::pair{kTimerChannel, &changed_timers_}}) {
      if (names->empty()) continue;
      ArrayParam tubes(kText);
      for (const std::string& t : *names) tubes.Bytes(t);
      b.Send("notify_tubes", Params().Bytes(channel).Array(tubes));
    }
    // A notice holds at most 8000 bytes: 150 entries of at most 48.
    for (size_t i = 0; i < due_.size(); i += kDuePerNotice) {
      const std::string payload = FormatDue(std::vector<DueEntry>(
          due_.begin() + static_cast<ptrdiff_t>(i),
          due_.begin() + static_cast<ptrdiff_t>(std::min(due_.size(), i + kDuePerNotice))));
      b.Send("notify_due", Params().Bytes(payload));
    }
  }

 private:
  const bool on_;
  const int64_t due_before_ms_;
  std::set<std::string> ready_tubes_;
  std::set<std::string> push_ready_;      // "<shard> <tube>"
  std::set<std::string> changed_tubes_;   // paused, resumed or given settings
  std::set<std::string> changed_timers_;  // timer ids
  std::vector<DueEntry> due_;
};

// The shards whose leases the writes of `batch` are fenced by.
std::set<int> FencedShards(CommitQueue::Batch& batch) {
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
  return fenced;
}

}  // namespace

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
  Notices notices(announce, clock_.WallMillis() + options_.due_notice_ms);
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
              notices.Job(x.job, shard);
              max_id = std::max(max_id, x.job.id);
            },
            [&](const change::ReplaceJob& x) {
              const int shard = ShardOf(x.job);
              b.Send("replace", ChangeParams(x.job, shard, x.if_version), guard(x.if_version), own);
              notices.Job(x.job, shard);
            },
            [&](const change::UpdateJob& x) {
              b.Send("update", ChangeParams(x.job, 0, x.if_version), guard(x.if_version), own);
              notices.Job(x.job, ShardOf(x.job));
            },
            [&](const change::DeleteJob& x) { b.Delete(x.id, x.if_version, kChanged, own); },
            [&](const change::PauseTube& x) {
              b.Send("pause", Params().Bytes(x.tube).Int(x.pause_ms).Int(x.unpause_ms));
              notices.Tube(x.tube);
            },
            [&](const change::SetTopicSettings& x) {
              b.Send("settings", Params().Bytes(x.tube).OptionalBytes(x.settings));
              notices.Tube(x.tube);
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
              notices.Timer(t.id);
            },
            [&](const change::DeleteTimer& x) {
              Params p;
              p.Int(pg::TimerShard(x.id, shards_)).Int(static_cast<int64_t>(x.id));
              b.Send("timer_delete_fires", p);
              b.Send("timer_delete", p);
              notices.Timer(x.id);
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
    // The fenced shards' lease rows first, in one order for every writer.
    if (std::set<int> fenced = FencedShards(batch); !fenced.empty()) {
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
  if (s.ok()) notices.Send(b);
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

}  // namespace delayd::store
