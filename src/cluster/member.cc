#include "cluster/member.h"

#include <spdlog/spdlog.h>

#include <chrono>

namespace delayd::cluster {

using store::pg::GetBytes;
using store::pg::GetInt;
using store::pg::kInt8;
using store::pg::kText;
using store::pg::Params;
using store::pg::PgConn;

namespace {

int64_t SteadyUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Times as ms since the Unix epoch, by the database's clock.
constexpr const char* kMs = "(extract(epoch FROM {}) * 1000)::int8";

}  // namespace

Member::Member(MemberOptions options, Executor executor, LeasesFn on_leases)
    : options_(std::move(options)),
      executor_(std::move(executor)),
      on_leases_(std::move(on_leases)),
      leases_({.node_id = options_.node_id, .lease_ms = options_.lease_ms}) {}

Result<std::unique_ptr<Member>> Member::Start(MemberOptions options, Executor executor,
                                              LeasesFn on_leases) {
  if (options.node_id.empty()) return Status::InvalidArgument("cluster: a node id is required");
  if (options.lease_ms < 300) {
    return Status::InvalidArgument("cluster: the lease must be at least 300 ms");
  }
  std::unique_ptr<Member> m(
      new Member(std::move(options), std::move(executor), std::move(on_leases)));
  auto c = PgConn::Connect(m->options_.conninfo, "delayd-member");
  if (!c.ok()) return c.status();
  m->conn_ = std::move(c).value();
  m->thread_ = std::thread([p = m.get()] { p->Loop(); });
  return m;
}

Member::~Member() { Stop(); }

void Member::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Member::SetFigures(std::string json) {
  std::lock_guard lock(mu_);
  figures_ = std::move(json);
}

void Member::View(std::function<void(Result<ClusterView>)> done) {
  auto read = [this, done = std::move(done)] {
    auto view = std::make_shared<Result<ClusterView>>(ReadView());
    executor_([view, done] { done(std::move(*view)); });
  };
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      work_.push_back(std::move(read));
      cv_.notify_all();
      return;
    }
  }
  executor_([done] { done(Status::Unavailable("cluster: the member has stopped")); });
}

Status Member::Leave() {
  Stop();
  PgConn* c = Conn();
  if (c == nullptr) return Status::IoError("cluster: no connection to give the leases up");
  Status s = leases_.Leave(*c);
  if (s.ok()) spdlog::info("cluster: node {} left, its leases given up", options_.node_id);
  return s;
}

void Member::Loop() {
  const auto interval = std::chrono::microseconds(options_.lease_ms * 1000 / 3);
  auto next = std::chrono::steady_clock::now();
  for (;;) {
    std::function<void()> work;
    {
      std::unique_lock lock(mu_);
      cv_.wait_until(lock, next, [&] { return stopping_ || !work_.empty(); });
      if (stopping_) return;
      if (!work_.empty()) {
        work = std::move(work_.front());
        work_.pop_front();
      }
    }
    if (work) {
      work();
      continue;
    }
    if (std::chrono::steady_clock::now() < next) continue;
    next = std::chrono::steady_clock::now() + interval;
    RoundNow();
  }
}

PgConn* Member::Conn() {
  if (conn_ && conn_->ok()) return conn_.get();
  auto c = PgConn::Connect(options_.conninfo, "delayd-member");
  if (!c.ok()) return nullptr;
  conn_ = std::move(c).value();
  return conn_.get();
}

void Member::RoundNow() {
  const int64_t start_us = SteadyUs();
  PgConn* c = Conn();
  Result<std::vector<Lease>> held = Status::IoError("cluster: cannot connect to the database");
  if (c != nullptr) held = leases_.Round(*c);
  ++rounds_;
  std::vector<Lease> hand;
  if (held.ok()) {
    if (failing_) spdlog::info("cluster: lease rounds work again");
    failing_ = false;
    good_start_us_ = start_us;
    hand = std::move(held).value();
    std::string figures;
    {
      std::lock_guard lock(mu_);
      figures = figures_;
    }
    // The view's part of the row; a failure here costs only the view.
    Params p;
    p.Bytes(options_.node_id).Bytes(options_.beanstalk).Bytes(options_.http);
    p.OptionalBytes(figures);
    (void)c->Query(
        "UPDATE nodes SET beanstalk = nullif($2, ''), http = nullif($3, ''), "
        "figures = $4::jsonb WHERE id = $1",
        p, {kText, kText, kText, kText});
  } else {
    ++failed_rounds_;
    if (!failing_) {
      spdlog::warn("cluster: a lease round failed: {}", held.status().ToString());
    }
    failing_ = true;
    // Valid until the last good round's start plus a lease; if the next
    // round might not end before then, hold nothing from now on.
    const int64_t until_us = good_start_us_ + options_.lease_ms * 1000;
    if (good_start_us_ != 0 && SteadyUs() + options_.lease_ms * 1000 / 3 < until_us) return;
  }
  if (handed_any_ && hand == handed_) return;
  handed_ = hand;
  handed_any_ = true;
  executor_([fn = on_leases_, hand = std::move(hand)]() mutable { fn(std::move(hand)); });
}

Result<ClusterView> Member::ReadView() {
  PgConn* c = Conn();
  if (c == nullptr) return Status::IoError("cluster: cannot connect to the database");
  ClusterView view;
  Params lease;
  lease.Int(options_.lease_ms);
  auto now = c->Query(fmt::format("SELECT {}", fmt::format(kMs, "now()")));
  if (!now.ok()) return now.status();
  view.now_ms = GetInt(now->get(), 0, 0);
  auto nodes = c->Query(
      fmt::format("SELECT id, {}, {}, (seen_at > now() - $1::float8 * interval '1 millisecond')"
                  "::int::int8, coalesce(beanstalk, ''), coalesce(http, ''), "
                  "coalesce(figures::text, ''), (SELECT count(*) FROM shard_leases l WHERE "
                  "l.owner = n.id AND l.expires_at > now()) FROM nodes n ORDER BY id",
                  fmt::format(kMs, "started_at"), fmt::format(kMs, "seen_at")),
      lease, {kInt8});
  if (!nodes.ok()) return nodes.status();
  for (int i = 0; i < PQntuples(nodes->get()); ++i) {
    const PGresult* r = nodes->get();
    view.nodes.push_back({GetBytes(r, i, 0), GetInt(r, i, 1), GetInt(r, i, 2), GetInt(r, i, 3) != 0,
                          GetBytes(r, i, 4), GetBytes(r, i, 5), GetBytes(r, i, 6),
                          static_cast<size_t>(GetInt(r, i, 7))});
  }
  auto shards = c->Query(fmt::format(
      "SELECT shard::int8, coalesce(owner, ''), epoch, CASE WHEN owner IS NULL THEN 0::int8 "
      "ELSE {} END, (owner IS NOT NULL AND expires_at > now())::int::int8 FROM shard_leases "
      "ORDER BY shard",
      fmt::format(kMs, "expires_at")));
  if (!shards.ok()) return shards.status();
  for (int i = 0; i < PQntuples(shards->get()); ++i) {
    const PGresult* r = shards->get();
    view.shards.push_back({static_cast<int>(GetInt(r, i, 0)), GetBytes(r, i, 1), GetInt(r, i, 2),
                           GetInt(r, i, 3), GetInt(r, i, 4) != 0});
  }
  return view;
}

}  // namespace delayd::cluster
