#include "store/postgres/pg_link.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/thread_name.h"
#include "store/postgres/pg_statements.h"

namespace delayd::store::pg {

Link::Link(std::string conninfo, const char* role, bool pipelined, bool durable_commits,
           bool generic_plans)
    : conninfo_(std::move(conninfo)),
      role_(role),
      name_(std::string("delayd-") + role),
      pipelined_(pipelined),
      durable_commits_(durable_commits),
      generic_plans_(generic_plans) {}

Result<PgConn*> Link::Get() {
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

Status Link::Connect() {
  conn_.reset();
  auto c = PgConn::Connect(conninfo_, name_.c_str());
  if (!c.ok()) return c.status();
  // The writer's commits are acknowledged once the server has them; the
  // syncer's commit makes them durable (store/commit_queue.h).
  Status s =
      (*c)->Exec(durable_commits_ ? "SET synchronous_commit = on" : "SET synchronous_commit = off");
  if (s.ok() && generic_plans_) s = (*c)->Exec(kGenericPlans);
  if (s.ok()) {
    auto me = (*c)->Query(
        "SELECT pid::int8, (extract(epoch FROM backend_start) * 1000000)::int8 FROM "
        "pg_stat_activity WHERE pid = pg_backend_pid()");
    if (!me.ok()) return me.status();
    if (PQntuples(me->get()) != 1) return Status::IoError("postgres: no session of our own");
    pid_ = static_cast<int>(GetInt(me->get(), 0, 0));
    start_us_ = GetInt(me->get(), 0, 1);
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

namespace {
// The lane whose thread this is, if it is one.
thread_local const void* current_lane = nullptr;
}  // namespace

void Lane::Every(std::chrono::milliseconds period, std::function<void()> tick) {
  period_ = period;
  tick_ = std::move(tick);
}

void Lane::Start() {
  thread_ = StartNamedThread(std::string("pg-") + link_.role(), [this] {
    current_lane = this;
    Loop();
  });
}

bool Lane::Queue(std::function<void()> work) {
  std::lock_guard lock(mu_);
  if (stopped_ || !thread_.joinable()) return false;
  work_.push_back(std::move(work));
  cv_.notify_all();
  return true;
}

void Lane::Run(const std::function<void()>& fn) {
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

void Lane::Stop() {
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Lane::Loop() {
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

}  // namespace delayd::store::pg
