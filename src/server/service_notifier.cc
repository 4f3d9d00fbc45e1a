#include "server/service_notifier.h"

#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include <chrono>

namespace delayd::server {
namespace {

void Notify(const std::string& state) {
  // < 0: the socket named could not be written (logged; systemd then
  // decides by its timeouts); 0: not run by a service manager.
  if (int rc = sd_notify(0, state.c_str()); rc < 0) {
    spdlog::warn("sd_notify {}: {}", state.substr(0, state.find('\n')), rc);
  }
}

}  // namespace

ServiceNotifier::ServiceNotifier(boost::asio::io_context& io) : timer_(io) {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0) watchdog_us_ = usec;
}

ServiceNotifier::~ServiceNotifier() { timer_.cancel(); }

void ServiceNotifier::Ready(const std::string& status) {
  Notify("READY=1\nSTATUS=" + status);
  if (watchdog_us_ > 0) {
    spdlog::info("systemd watchdog: a ping every {} ms", watchdog_us_ / 2000);
    Ping();
  }
}

void ServiceNotifier::Reloading() {
  // RELOADING=1 wants the monotonic time of the reload from systemd 253 on;
  // 252 (Debian 12) ignores it.
  const auto now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  Notify("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(now_us));
}

void ServiceNotifier::Reloaded() { Notify("READY=1"); }

void ServiceNotifier::Stopping() {
  timer_.cancel();
  Notify("STOPPING=1\nSTATUS=shutting down");
}

void ServiceNotifier::Ping() {
  Notify("WATCHDOG=1");
  timer_.expires_after(std::chrono::microseconds(watchdog_us_ / 2));
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) Ping();
  });
}

}  // namespace delayd::server
