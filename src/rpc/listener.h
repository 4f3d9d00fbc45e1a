// The gRPC front door (doc/grpc.md, "The listener"): the delayd.v1 Jobs,
// Topics and Timers services, gRPC's health service and server reflection on
// one port. Each call is the HTTP API request it stands for (transcode.h),
// handed to the HTTP API's handler on the event loop; its answer finishes
// the call. A Reserve stream holds at most one HTTP long-poll reserve at a
// time, for as long as its worker has credit.
//
// Threading: gRPC's own threads parse requests and write answers; everything
// that touches the API runs on the event loop. Listen, BeginShutdown, busy()
// and Stop are called on the loop thread (Stop once the loop has stopped).
#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>
#include <string>

#include "common/status.h"
#include "http/server.h"

namespace delayd::rpc {

struct ListenerOptions {
  size_t max_message_bytes = 16 << 20;  // a request's largest message (as --max-request-bytes)
  int max_streams_per_connection = 100;
  int64_t max_reserve_wait_ms = 60'000;  // a Reserve stream's long polls wait at most this long
  uint32_t max_credit = 1000;            // jobs a Reserve stream may be owed at once
  // TLS (a cert and key; a client CA: every client must present a
  // certificate it signed). Read once, at Listen.
  http::TlsFiles tls = {};
};

class Listener {
 public:
  // `api` (the HTTP API) must outlive the listener.
  Listener(boost::asio::io_context& io, http::Handler& api, ListenerOptions options);
  ~Listener();

  // Binds "HOST:PORT" (port 0 picks one; no host: 127.0.0.1) and starts
  // serving; returns the bound address.
  Result<std::string> Listen(const std::string& address);
  // Shutting down: new calls are refused (UNAVAILABLE), Reserve streams end
  // (UNAVAILABLE), the health service says NOT_SERVING.
  void BeginShutdown();
  // Calls waiting for the API's answer.
  size_t busy() const;
  // Finishes the calls still waiting (UNAVAILABLE) and stops the server.
  void Stop();

  // The services, the calls in progress and the Reserve streams (listener.cc).
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace delayd::rpc
