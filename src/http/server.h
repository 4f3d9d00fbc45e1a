// HTTP/1.1 server (Boost.Beast) with keep-alive, size limits and timeouts.
// It knows nothing of delayd: each request goes to a Handler, which answers
// through a callback, possibly later (long polls).
//
// Threading: event loop thread only. Beast stays inside server.cc.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace delayd::http {

// Tells a handler that answers later (a long poll) that its client closed
// the connection meanwhile. The server sets `on_hangup` to nothing; a
// handler may set it, and it then runs at most once, on the loop thread.
// The handler still replies (the reply is dropped).
struct Hangup {
  std::function<void()> on_hangup;
};

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string path;    // decoded? no: the raw path, without the query
  std::string query;   // after '?', raw
  std::string authorization;
  std::string content_type;
  std::string host;    // the Host header ("" when absent)
  std::string origin;  // the Origin header ("" when absent)
  // W3C trace context headers as sent (common/trace_context.h); several
  // headers of one name are joined with ',' (which makes two traceparents
  // invalid, as the spec says they are).
  std::string traceparent;
  std::string tracestate;
  bool local_loopback = false;  // the connection reached a loopback address of this host
  std::string body;
  std::shared_ptr<Hangup> hangup = std::make_shared<Hangup>();
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

class Handler {
 public:
  using Reply = std::function<void(Response)>;
  virtual ~Handler() = default;
  // Answers `req` by calling `reply` once, now or later, on the loop thread.
  virtual void Handle(Request req, Reply reply) = 0;
};

// Limits that keep a flood of connections from locking out the API. A
// connection is idle until it has sent a whole request's headers: first it
// waits for the request's first byte (idle_timeout_ms), then the headers
// must follow within header_timeout_ms. When all
// max_connections are open, or one client address has
// max_connections_per_client, a new connection closes the oldest idle one
// (of that address, for the latter) instead of being refused, so a client
// with a real request (a health probe) gets in while others only hold
// connections open; it is refused only when every connection is busy.
struct ServerOptions {
  size_t max_body_bytes = 16 << 20;
  size_t max_header_bytes = 16 << 10;
  int64_t idle_timeout_ms = 60'000;    // for a request's first byte, kept-alive or new
  int64_t header_timeout_ms = 10'000;  // from the first byte to the end of the headers
  int64_t body_timeout_ms = 60'000;    // from the end of the headers to the end of the body
  size_t max_connections = 10'000;
  size_t max_connections_per_client = 1'000;  // per client IP address
};

// The files of a TLS listener, PEM: its certificate chain and key, and the
// CA whose certificates clients must present (empty: none asked for).
struct TlsFiles {
  std::string cert;
  std::string key;
  std::string client_ca;
};

// A server TLS context of `files`: TLS 1.2 and newer, the key checked
// against the certificate; with a client CA, a client without a
// certificate that CA signed fails the handshake. Errors name the file.
Result<std::shared_ptr<boost::asio::ssl::context>> MakeTlsContext(const TlsFiles& files);

class Server {
 public:
  // `handler` must outlive the server.
  Server(boost::asio::io_context& io, Handler& handler, ServerOptions options);
  ~Server();

  // Serves TLS with `context` on connections accepted from now on (null:
  // plain HTTP); open connections keep the context they began with, so a
  // new certificate (SIGHUP) drops none of them. Before Listen, or any time.
  void SetTls(std::shared_ptr<boost::asio::ssl::context> context);

  // Binds "HOST:PORT" (port 0 picks one) and starts accepting; returns the
  // bound address.
  Result<std::string> Listen(const std::string& address);
  void StopAccepting();
  // Closes idle connections now; busy ones close after their reply.
  void CloseAll();
  size_t connections() const;
  // Connections with a request in progress: read, waiting for its reply, or
  // writing it.
  size_t busy_connections() const;
  // Connections closed to make room for a newer one, and connections
  // refused because every connection was busy.
  uint64_t evicted() const;
  uint64_t refused() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace delayd::http
