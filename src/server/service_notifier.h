// Tells systemd how the service is doing (sd_notify(3), Type=notify units):
// READY=1 once recovery is over and every listener is up, RELOADING=1 and
// READY=1 around a SIGHUP reload, STOPPING=1 when a stop signal arrives,
// and WATCHDOG=1 every half of WatchdogSec from the event loop, so that a
// loop stuck for longer is restarted. Outside systemd (no NOTIFY_SOCKET)
// every call does nothing.
//
// Threading: the loop thread only.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <string>

namespace delayd::server {

class ServiceNotifier {
 public:
  explicit ServiceNotifier(boost::asio::io_context& io);
  ~ServiceNotifier();

  // `status`: one line for `systemctl status`.
  void Ready(const std::string& status);
  void Reloading();
  void Reloaded();
  void Stopping();

 private:
  void Ping();

  boost::asio::steady_timer timer_;
  uint64_t watchdog_us_ = 0;  // 0: no watchdog asked for
};

}  // namespace delayd::server
