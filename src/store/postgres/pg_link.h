// The connections PgStore works through (pg_store.h says which it has and
// what each one does):
//
//   Link  a connection with the store's statements prepared, connected again
//         with backoff after it broke, each change of state logged once;
//   Lane  a Link and the one thread that uses it, running queued work in
//         order (and a periodic tick between the work).
//
// Threading: a Link is used by one thread at a time; a Lane's Queue and Run
// may be called from any thread, its link only from its own thread (or
// before Start and after Stop).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "common/status.h"
#include "store/postgres/pg_conn.h"

namespace delayd::store::pg {

// A link's connection: its server process, and when that process started
// (µs since the epoch), which together name a session no restart of the
// server gives again; and how often the link had connected.
struct Session {
  uint64_t connects = 0;
  int pid = 0;
  int64_t start_us = 0;
};

// The settings of a link with `generic_plans` (Link). A generic plan is
// made at a statement's first use from the table's size then, and kept
// until its statistics change: the writer and the claimer connect when
// delayd starts, often to an empty table, and a plan that found a scan of
// an empty table cheapest went on scanning it whole for every claim,
// update and delete once it held a backlog (a claim read all 20,000 jobs,
// 3.3 ms), until autovacuum analyzed the table. These links run only
// statements that find jobs by a key (PgStoreTest), so a sequential scan
// is never their best plan; each statement names its keys as a condition
// on the index (`id=ANY(...)`), not only through a join, so that no join
// order walks a whole index either.
inline constexpr const char* kGenericPlans =
    "SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off";

class Link {
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
       bool generic_plans = false);

  // The connection, connected and prepared, or why it is not. A connection
  // the server closed while it was idle is replaced before it is handed out.
  Result<PgConn*> Get();
  // What it is for: "writer", "reader"... (its application name's tail).
  const char* role() const { return role_; }
  // How many times this link connected.
  uint64_t connects() const { return connects_; }
  // Its connection of now (of the last, when it is down).
  Session session() const { return {connects_, pid_, start_us_}; }

 private:
  static constexpr std::chrono::milliseconds kFirstBackoff{50};
  static constexpr std::chrono::milliseconds kMaxBackoff{2000};

  Status Connect();

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

class Lane {
 public:
  Lane(const std::string& conninfo, const char* role, bool durable_commits,
       bool generic_plans = false)
      : link_(conninfo, role, false, durable_commits, generic_plans) {}
  ~Lane() { Stop(); }
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  Link& link() { return link_; }
  // Runs `tick` on the lane's thread about every `period`, between its
  // work, from Start to Stop. Called before Start.
  void Every(std::chrono::milliseconds period, std::function<void()> tick);
  void Start();
  // Queues `work`; false before Start or after Stop, when the caller runs it
  // itself.
  bool Queue(std::function<void()> work);
  // Runs `fn` on the lane's thread: at once when called there, else queued
  // and waited for (at once, too, while the thread does not run).
  void Run(const std::function<void()>& fn);
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
  void Stop();

 private:
  void Loop();

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

}  // namespace delayd::store::pg
