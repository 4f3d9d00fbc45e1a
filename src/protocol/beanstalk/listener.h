// Listener: accepts beanstalk protocol connections on one or more addresses
// (TCP or unix socket) and owns the sessions, enforcing the connection limit.
//
// Threading: event loop thread only.
#pragma once

#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "protocol/beanstalk/session.h"

namespace delayd::beanstalk {

class Listener {
 public:
  using Endpoint = boost::asio::generic::stream_protocol::endpoint;

  // `ctx` fields other than on_closed must outlive the listener.
  Listener(boost::asio::io_context& io, SessionContext ctx, size_t max_connections);
  ~Listener();

  // Binds and starts accepting; returns the address actually bound (the
  // port chosen when the endpoint asked for port 0).
  Result<std::string> Listen(const Endpoint& endpoint);
  // Stops accepting new connections; open ones keep going.
  void StopAccepting();
  // Closes every open connection.
  void CloseAll();
  // Connections with replies not yet ready (waiting for the store).
  size_t BusySessions() const;
  size_t sessions() const { return sessions_.size(); }

 private:
  // An acceptor and the timer that pauses it after an accept error.
  struct Port {
    Port(boost::asio::io_context& io) : acceptor(io), pause(io) {}
    boost::asio::basic_socket_acceptor<boost::asio::generic::stream_protocol> acceptor;
    boost::asio::steady_timer pause;
  };
  void Accept(Port* port);

  boost::asio::io_context& io_;
  SessionContext ctx_;
  size_t max_connections_;
  std::vector<std::unique_ptr<Port>> ports_;
  std::vector<std::string> unix_paths_;
  std::unordered_map<Session*, std::shared_ptr<Session>> sessions_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // see on_closed
};

// "127.0.0.1:11300", "[::1]:0", "localhost:11300" or "unix:/path/to.sock".
Result<Listener::Endpoint> ParseEndpoint(const std::string& spec);
// The printable form of a bound endpoint, as ParseEndpoint reads it.
std::string EndpointToString(const Listener::Endpoint& ep);

}  // namespace delayd::beanstalk
