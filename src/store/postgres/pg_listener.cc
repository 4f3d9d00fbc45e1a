#include "store/postgres/pg_listener.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "common/thread_name.h"
#include "store/postgres/pg_conn.h"

namespace delayd::store::pg {

PgListener::PgListener(std::string conninfo, std::vector<std::string> channels, Fn fn)
    : conninfo_(std::move(conninfo)), channels_(std::move(channels)), fn_(std::move(fn)) {}

Result<std::unique_ptr<PgListener>> PgListener::Start(const std::string& conninfo,
                                                      std::vector<std::string> channels, Fn fn) {
  std::unique_ptr<PgListener> l(new PgListener(conninfo, std::move(channels), std::move(fn)));
  std::string why;
  l->conn_ = l->Listen(&why);
  if (!l->conn_) return Status::IoError(why);
  l->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (l->wake_fd_ < 0) return Status::IoError("eventfd for the postgres listener failed");
  l->thread_ = StartNamedThread("pg-listener", [p = l.get()] { p->Loop(); });
  return l;
}

PgListener::~PgListener() {
  stopping_ = true;
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
  }
  if (thread_.joinable()) thread_.join();
  if (wake_fd_ >= 0) close(wake_fd_);
}

std::unique_ptr<PgConn> PgListener::Listen(std::string* why) {
  auto c = PgConn::Connect(conninfo_, "delayd-listener");
  if (!c.ok()) {
    *why = c.status().message();
    return nullptr;
  }
  for (const std::string& channel : channels_) {
    // Channels are delayd's own names, never a client's.
    Status s = (*c)->Exec("LISTEN " + channel);
    if (!s.ok()) {
      *why = s.message();
      return nullptr;
    }
  }
  return std::move(c).value();
}

void PgListener::Loop() {
  constexpr std::chrono::milliseconds kFirstBackoff{50};
  constexpr std::chrono::milliseconds kMaxBackoff{2000};
  bool listening = true;  // Start() just listened
  std::chrono::milliseconds backoff{};
  while (!stopping_) {
    if (!conn_) {
      // Waits out the backoff, unless told to stop.
      pollfd wake{wake_fd_, POLLIN, 0};
      if (backoff.count() > 0 && poll(&wake, 1, static_cast<int>(backoff.count())) > 0) break;
      std::string why;
      conn_ = Listen(&why);
      if (!conn_) {
        if (backoff.count() == 0) spdlog::warn("postgres: listener connection lost: {}", why);
        backoff = std::clamp(backoff * 2, kFirstBackoff, kMaxBackoff);
        continue;
      }
      if (backoff.count() > 0) spdlog::info("postgres: listener connection restored");
      backoff = {};
      listening = true;
    }
    std::vector<Heard> heard;
    // Everything already received, before waiting for more.
    bool broken = PQconsumeInput(conn_->get()) == 0;
    while (PGnotify* n = PQnotifies(conn_->get())) {
      heard.push_back({n->relname, n->extra});
      PQfreemem(n);
    }
    if (listening || !heard.empty()) fn_(std::move(heard), listening);
    listening = false;
    if (!broken) {
      pollfd fds[2] = {{PQsocket(conn_->get()), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      if (poll(fds, 2, -1) < 0 && errno != EINTR) broken = true;
      if (fds[1].revents != 0) break;
      broken = broken || (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) != 0;
    }
    if (broken) {
      spdlog::warn("postgres: listener connection lost: {}", PQerrorMessage(conn_->get()));
      conn_.reset();
      backoff = kFirstBackoff;
    }
  }
}

}  // namespace delayd::store::pg
