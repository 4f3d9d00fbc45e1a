// PgListener: hears PostgreSQL's notifications (LISTEN/NOTIFY) on a
// connection and a thread of its own, and hands them on as they come.
//
// A notification is sent when, and only when, the transaction that sent it
// commits, so hearing one means its change is visible. Notifications sent
// while the connection was down are not heard: after every (re)connection
// the listener says so, so that the caller reads again whatever they would
// have told it.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace delayd::store::pg {

class PgConn;

class PgListener {
 public:
  struct Heard {
    std::string channel;
    std::string payload;
  };
  // Runs on the listener's thread. `listening` is true on the first call
  // after each (re)connection, once LISTEN is in place: anything sent
  // before may have been missed. `heard` is in the order sent (by commit).
  using Fn = std::function<void(std::vector<Heard> heard, bool listening)>;

  // Connects and listens on `channels` (or says why it cannot), then hears
  // on its thread until destroyed; a lost connection is made again with
  // backoff, logged once per loss.
  static Result<std::unique_ptr<PgListener>> Start(const std::string& conninfo,
                                                   std::vector<std::string> channels, Fn fn);
  ~PgListener();  // stops the thread, at once
  PgListener(const PgListener&) = delete;
  PgListener& operator=(const PgListener&) = delete;

 private:
  PgListener(std::string conninfo, std::vector<std::string> channels, Fn fn);
  void Loop();
  // Connects and LISTENs; null with the reason in `why` when it cannot.
  std::unique_ptr<PgConn> Listen(std::string* why);

  const std::string conninfo_;
  const std::vector<std::string> channels_;
  const Fn fn_;
  std::unique_ptr<PgConn> conn_;  // the thread's, once it runs
  int wake_fd_ = -1;              // an eventfd written to stop the thread
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace delayd::store::pg
