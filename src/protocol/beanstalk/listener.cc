#include "protocol/beanstalk/listener.h"

#include <arpa/inet.h>
#include <spdlog/spdlog.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>

namespace delayd::beanstalk {

namespace asio = boost::asio;
using asio::generic::stream_protocol;

Listener::Listener(asio::io_context& io, SessionContext ctx, size_t max_connections)
    : io_(io), ctx_(std::move(ctx)), max_connections_(max_connections) {
  ctx_.on_closed = [this](Session* s) {
    // Erasing may drop the last reference; let the caller's frame finish
    // first. The listener may be gone by then (shutdown closes every
    // session and then destroys it), hence the liveness token.
    asio::post(io_, [this, s, alive = std::weak_ptr<bool>(alive_)] {
      if (alive.lock()) sessions_.erase(s);
    });
  };
}

Listener::~Listener() {
  StopAccepting();
  CloseAll();
}

Result<std::string> Listener::Listen(const Endpoint& endpoint) {
  boost::system::error_code ec;
  auto port = std::make_unique<Port>(io_);
  auto* acceptor = &port->acceptor;
  const bool is_unix = endpoint.protocol().family() == AF_UNIX;
  std::string unix_path;
  if (is_unix) {
    unix_path = reinterpret_cast<const sockaddr_un*>(endpoint.data())->sun_path;
    ::unlink(unix_path.c_str());  // a stale socket file from an earlier run
  }
  acceptor->open(endpoint.protocol(), ec);
  if (!ec && !is_unix) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::IoError("listen on " + EndpointToString(endpoint) + ": " + ec.message());
  if (is_unix) unix_paths_.push_back(unix_path);
  std::string bound = EndpointToString(acceptor->local_endpoint(ec));
  Accept(port.get());
  ports_.push_back(std::move(port));
  return bound;
}

void Listener::Accept(Port* port) {
  // Handlers may run after the listener is gone, with operation_aborted; they
  // must not touch `port` then.
  port->acceptor.async_accept(
      [this, port](boost::system::error_code ec, stream_protocol::socket socket) {
        if (ec == asio::error::operation_aborted || !port->acceptor.is_open()) return;
        if (!ec) {
          if (sessions_.size() >= max_connections_) {
            spdlog::warn("beanstalk: connection limit {} reached; refusing a connection",
                         max_connections_);
            boost::system::error_code ignored;
            socket.close(ignored);
          } else {
            if (socket.local_endpoint(ec).protocol().family() != AF_UNIX) {
              socket.set_option(asio::ip::tcp::no_delay(true), ec);
            }
            auto session = std::make_shared<Session>(std::move(socket), ctx_);
            sessions_.emplace(session.get(), session);
            session->Start();
          }
        } else {
          // Out of descriptors (EMFILE) or memory: accepting again at once would
          // fail again at once and spin. Serve the open connections for a while.
          spdlog::warn("beanstalk: accept: {}; pausing accepts for 100 ms", ec.message());
          port->pause.expires_after(std::chrono::milliseconds(100));
          port->pause.async_wait([this, port](boost::system::error_code wait_ec) {
            if (!wait_ec && port->acceptor.is_open()) Accept(port);
          });
          return;
        }
        Accept(port);
      });
}

void Listener::StopAccepting() {
  for (auto& p : ports_) {
    boost::system::error_code ignored;
    p->acceptor.close(ignored);
    p->pause.cancel();
  }
  for (auto& p : unix_paths_) ::unlink(p.c_str());
  unix_paths_.clear();
}

void Listener::CloseAll() {
  auto all = sessions_;
  for (auto& [raw, s] : all) s->Close();
}

size_t Listener::BusySessions() const {
  size_t n = 0;
  for (auto& [raw, s] : sessions_) n += s->HasPendingReplies() ? 1 : 0;
  return n;
}

Result<Listener::Endpoint> ParseEndpoint(const std::string& spec) {
  if (spec.rfind("unix:", 0) == 0) {
    std::string path = spec.substr(5);
    if (path.empty() || path.size() >= sizeof(sockaddr_un::sun_path)) {
      return Status::InvalidArgument("bad unix socket path in '" + spec + "'");
    }
    return Listener::Endpoint(asio::local::stream_protocol::endpoint(path));
  }
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos)
    return Status::InvalidArgument("expected HOST:PORT, got '" + spec + "'");
  std::string host = spec.substr(0, colon);
  const std::string port = spec.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  char* end = nullptr;
  const unsigned long p = std::strtoul(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p > 65535) {
    return Status::InvalidArgument("bad port in '" + spec + "'");
  }
  asio::io_context io;
  asio::ip::tcp::resolver resolver(io);
  boost::system::error_code ec;
  auto results = resolver.resolve(host.empty() ? "0.0.0.0" : host, port,
                                  asio::ip::tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    return Status::InvalidArgument("cannot resolve '" + host + "': " + ec.message());
  }
  return Listener::Endpoint(results.begin()->endpoint());
}

std::string EndpointToString(const Listener::Endpoint& ep) {
  const sockaddr* sa = reinterpret_cast<const sockaddr*>(ep.data());
  char buf[INET6_ADDRSTRLEN] = {0};
  switch (sa->sa_family) {
    case AF_INET: {
      auto* in = reinterpret_cast<const sockaddr_in*>(sa);
      inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
      return std::string(buf) + ":" + std::to_string(ntohs(in->sin_port));
    }
    case AF_INET6: {
      auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
      inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf);
      return "[" + std::string(buf) + "]:" + std::to_string(ntohs(in6->sin6_port));
    }
    case AF_UNIX:
      return std::string("unix:") + reinterpret_cast<const sockaddr_un*>(sa)->sun_path;
    default:
      return "?";
  }
}

}  // namespace delayd::beanstalk
