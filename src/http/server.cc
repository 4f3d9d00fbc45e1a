#include "http/server.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <utility>  // before asio/awaitable.hpp: Boost 1.74 needs std::exchange

namespace delayd::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using asio::ip::tcp;

namespace {

// Waits for the handler's reply as an awaitable. The reply is always
// delivered through a post, so a handler that answers at once does not
// resume the coroutine inside its own call stack.
template <typename Token>
auto AsyncHandle(Handler& h, Request req, Token&& token) {
  return asio::async_initiate<Token, void(Response)>(
      [&h](auto handler, Request r) {
        auto shared = std::make_shared<decltype(handler)>(std::move(handler));
        h.Handle(std::move(r), [shared](Response res) {
          auto ex = asio::get_associated_executor(*shared);
          asio::post(ex, [shared, res = std::move(res)]() mutable { (*shared)(std::move(res)); });
        });
      },
      token, std::move(req));
}

const char* Reason(int status) {
  return bhttp::obsolete_reason(static_cast<bhttp::status>(status)).data();
}

}  // namespace

struct Server::Impl {
  Impl(asio::io_context& io_, Handler& handler_, ServerOptions options_)
      : io(io_), handler(handler_), options(options_) {}

  asio::awaitable<void> Accept(tcp::acceptor& acceptor) {
    for (;;) {
      boost::system::error_code ec;
      tcp::socket socket =
          co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      if (ec) {
        // Out of descriptors and the like: back off instead of spinning.
        spdlog::warn("http: accept: {}", ec.message());
        asio::steady_timer pause(io, std::chrono::milliseconds(100));
        co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        continue;
      }
      boost::system::error_code addr_ec;
      const tcp::endpoint peer = socket.remote_endpoint(addr_ec);
      if (addr_ec) continue;  // gone already
      const std::string client = peer.address().to_string();
      if (!MakeRoom(client)) {
        ++refused;
        continue;  // closes the socket
      }
      socket.set_option(tcp::no_delay(true), ec);
      asio::co_spawn(io, Session(std::move(socket), client), asio::detached);
    }
  }

  // What the server knows of each open connection.
  struct Conn {
    std::string client;  // the peer's IP address
    uint64_t seq = 0;    // accept order: lower is older
    bool idle = false;   // waiting for a request, or for the rest of its headers
    bool evicted = false;
  };

  // Whether a connection from `client` may open now, closing the oldest idle
  // connection (of `client` when that address is at its own limit) to make
  // room; false when every connection in the way is busy.
  bool MakeRoom(const std::string& client) {
    const size_t live = conns.size() - evicting;
    auto per_client = per_client_count.find(client);
    if (per_client != per_client_count.end() &&
        per_client->second >= options.max_connections_per_client) {
      if (!EvictOldestIdle(&client)) return false;
    }
    if (live >= options.max_connections && !EvictOldestIdle(nullptr)) return false;
    return true;
  }

  // Closes the oldest idle connection (of `client` when given).
  bool EvictOldestIdle(const std::string* client) {
    std::set<Aged>* pool = &idle_order;
    if (client != nullptr) {
      auto it = idle_of_client.find(*client);
      if (it == idle_of_client.end()) return false;
      pool = &it->second;
    }
    if (pool->empty()) return false;
    beast::tcp_stream* oldest = pool->begin()->second;
    Conn& conn = conns.at(oldest);
    SetIdle(oldest, conn, false);
    conn.evicted = true;
    ++evicting;
    ++evicted;
    --per_client_count[conn.client];
    oldest->cancel();  // its read ends with operation_aborted, and its session with it
    return true;
  }

  // Keeps the idle sets in step with `conn.idle`.
  void SetIdle(beast::tcp_stream* stream, Conn& conn, bool idle) {
    if (conn.idle == idle) return;
    conn.idle = idle;
    const Aged key{conn.seq, stream};
    if (idle) {
      idle_order.insert(key);
      idle_of_client[conn.client].insert(key);
      return;
    }
    idle_order.erase(key);
    auto it = idle_of_client.find(conn.client);
    it->second.erase(key);
    if (it->second.empty()) idle_of_client.erase(it);
  }

  static Response Problem(int status, const std::string& title) {
    Response r;
    r.status = status;
    r.content_type = "application/problem+json";
    r.body = std::string(R"({"type":"about:blank","title":")") + title + R"(","status":)" +
             std::to_string(status) + "}";
    return r;
  }

  // While a request waits for its reply, a readable socket means the client
  // hung up (EOF or reset) or sent its next request early (pipelining, which
  // ends the watch). Only the first case calls the handler's on_hangup.
  static void WatchForHangup(tcp::socket& socket, std::shared_ptr<Hangup> hangup,
                             std::shared_ptr<bool> replied) {
    const int fd = socket.native_handle();
    socket.async_wait(tcp::socket::wait_read, [fd, hangup, replied](boost::system::error_code ec) {
      if (ec || *replied) return;
      char c;
      ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))) return;
      if (auto f = std::exchange(hangup->on_hangup, nullptr)) f();
    });
  }

  // One connection: plain, or TLS with the context the server had when it
  // was accepted (a SIGHUP's new certificate is for connections after it).
  asio::awaitable<void> Session(tcp::socket socket, std::string client) {
    boost::system::error_code ec;
    const bool local_loopback = socket.local_endpoint(ec).address().is_loopback();
    if (std::shared_ptr<asio::ssl::context> context = tls) {
      beast::ssl_stream<beast::tcp_stream> stream(std::move(socket), *context);
      co_await Serve(stream, client, local_loopback);
      // close_notify, waiting at most a second for the client's.
      beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(1));
      co_await stream.async_shutdown(asio::redirect_error(asio::use_awaitable, ec));
    } else {
      beast::tcp_stream stream(std::move(socket));
      co_await Serve(stream, client, local_loopback);
    }
  }

  // Requests and replies on `stream` until either side ends the connection.
  template <typename Stream>
  asio::awaitable<void> Serve(Stream& stream, const std::string& client, bool local_loopback) {
    constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;
    beast::tcp_stream& tcp = beast::get_lowest_layer(stream);
    boost::system::error_code ec;
    Conn& conn = conns[&tcp];
    conn.client = client;
    conn.seq = ++accepted;
    ++per_client_count[client];
    beast::flat_buffer buffer;
    if constexpr (kTls) {
      // Idle (so it may make room for another) until its handshake is over,
      // which must end within the headers' deadline. A client that does not
      // speak TLS (plain HTTP) fails it and is closed without an answer.
      SetIdle(&tcp, conn, true);
      tcp.expires_after(std::chrono::milliseconds(options.header_timeout_ms));
      co_await stream.async_handshake(asio::ssl::stream_base::server,
                                      asio::redirect_error(asio::use_awaitable, ec));
      if (ec && !conn.evicted) {
        spdlog::debug("http: TLS handshake with {}: {}", client, ec.message());
      }
    }
    for (; !ec && !conn.evicted;) {
      bhttp::request_parser<bhttp::string_body> parser;
      parser.body_limit(options.max_body_bytes);
      parser.header_limit(static_cast<uint32_t>(options.max_header_bytes));
      // Idle until the request's first byte (one may be buffered already:
      // a pipelined request), then the headers within their own deadline.
      SetIdle(&tcp, conn, true);
      if (buffer.size() == 0) {
        tcp.expires_after(std::chrono::milliseconds(options.idle_timeout_ms));
        const size_t n = co_await stream.async_read_some(
            buffer.prepare(4096), asio::redirect_error(asio::use_awaitable, ec));
        buffer.commit(n);
      }
      if (ec || conn.evicted) break;
      tcp.expires_after(std::chrono::milliseconds(options.header_timeout_ms));
      co_await bhttp::async_read_header(stream, buffer, parser,
                                        asio::redirect_error(asio::use_awaitable, ec));
      // Only a connection that has sent a whole request's headers is busy:
      // until then, it may be closed to make room (MakeRoom).
      if (conn.evicted) break;
      SetIdle(&tcp, conn, false);
      if (!ec && !parser.is_done() && parser.get().version() >= 11 &&
          beast::iequals(parser.get()[bhttp::field::expect], "100-continue")) {
        // The client waits for this interim reply before it sends the body
        // (RFC 9110, 10.1.1). A body over the limit was refused above.
        bhttp::response<bhttp::empty_body> go_on{bhttp::status::continue_, parser.get().version()};
        co_await bhttp::async_write(stream, go_on, asio::redirect_error(asio::use_awaitable, ec));
      }
      if (!ec && !parser.is_done()) {
        tcp.expires_after(std::chrono::milliseconds(options.body_timeout_ms));
        co_await bhttp::async_read(stream, buffer, parser,
                                   asio::redirect_error(asio::use_awaitable, ec));
      }
      if (ec == bhttp::error::end_of_stream || ec == beast::error::timeout ||
          ec == asio::error::operation_aborted || ec == asio::error::connection_reset ||
          ec == asio::error::eof || closing) {
        break;
      }
      Response res;
      bool keep_alive = false;
      unsigned version = 11;
      if (ec) {
        // Malformed or oversized: answer and close, as the stream is lost.
        res = ec == bhttp::error::body_limit     ? Problem(413, "request body too large")
              : ec == bhttp::error::header_limit ? Problem(431, "request headers too large")
                                                 : Problem(400, "malformed HTTP request");
      } else {
        bhttp::request<bhttp::string_body> msg = parser.release();
        keep_alive = msg.keep_alive();
        version = msg.version();
        Request req;
        req.method = std::string(msg.method_string());
        std::string_view target(msg.target().data(), msg.target().size());
        size_t q = target.find('?');
        req.path = std::string(target.substr(0, q));
        if (q != target.npos) req.query = std::string(target.substr(q + 1));
        req.authorization = std::string(msg[bhttp::field::authorization]);
        req.content_type = std::string(msg[bhttp::field::content_type]);
        req.host = std::string(msg[bhttp::field::host]);
        req.origin = std::string(msg[bhttp::field::origin]);
        for (auto [name, out] : {std::pair{"traceparent", &req.traceparent},
                                 std::pair{"tracestate", &req.tracestate}}) {
          for (auto [it, end] = msg.equal_range(name); it != end; ++it) {
            if (!out->empty()) *out += ',';
            out->append(it->value().data(), it->value().size());
          }
        }
        req.local_loopback = local_loopback;
        req.body = std::move(msg.body());
        tcp.expires_never();
        auto replied = std::make_shared<bool>(false);
        WatchForHangup(tcp.socket(), req.hangup, replied);
        res = co_await AsyncHandle(handler, std::move(req), asio::use_awaitable);
        *replied = true;
        tcp.socket().cancel(ec);  // the hang-up watch
      }
      bhttp::response<bhttp::string_body> out;
      out.version(version);
      out.result(static_cast<unsigned>(res.status));
      out.reason(Reason(res.status));
      out.set(bhttp::field::server, "delayd");
      if (!res.body.empty() || res.status != 204)
        out.set(bhttp::field::content_type, res.content_type);
      for (auto& [k, v] : res.headers) out.set(k, v);
      out.body() = std::move(res.body);
      out.keep_alive(keep_alive && !closing);
      out.prepare_payload();
      tcp.expires_after(std::chrono::seconds(30));
      co_await bhttp::async_write(stream, out, asio::redirect_error(asio::use_awaitable, ec));
      if (ec || !keep_alive || closing) break;
    }
    SetIdle(&tcp, conn, false);
    if (conn.evicted) {
      --evicting;
    } else {
      --per_client_count[client];
    }
    if (per_client_count[client] == 0) per_client_count.erase(client);
    conns.erase(&tcp);
    if constexpr (!kTls) tcp.socket().shutdown(tcp::socket::shutdown_send, ec);
  }

  asio::io_context& io;
  Handler& handler;
  ServerOptions options;
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
  std::shared_ptr<asio::ssl::context> tls;   // null: plain HTTP
  std::map<beast::tcp_stream*, Conn> conns;  // every open connection
  // The idle connections, oldest first: all, and by client address.
  using Aged = std::pair<uint64_t, beast::tcp_stream*>;
  std::set<Aged> idle_order;
  std::map<std::string, std::set<Aged>> idle_of_client;
  std::map<std::string, size_t> per_client_count;  // open, not evicted, by client address
  size_t evicting = 0;                             // evicted, their sessions not ended yet
  uint64_t accepted = 0;
  uint64_t evicted = 0;
  uint64_t refused = 0;
  bool closing = false;
};

Server::Server(asio::io_context& io, Handler& handler, ServerOptions options)
    : impl_(std::make_unique<Impl>(io, handler, options)) {}

Server::~Server() {
  StopAccepting();
  CloseAll();
}

Result<std::string> Server::Listen(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) return Status::InvalidArgument("expected HOST:PORT: " + address);
  std::string host = address.substr(0, colon);
  std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  boost::system::error_code ec;
  tcp::resolver resolver(impl_->io);
  auto results =
      resolver.resolve(host, port, tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    return Status::InvalidArgument("cannot resolve " + address + ": " + ec.message());
  }
  tcp::endpoint ep = results.begin()->endpoint();
  auto acceptor = std::make_unique<tcp::acceptor>(impl_->io);
  acceptor->open(ep.protocol(), ec);
  if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor->bind(ep, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::IoError("http listen on " + address + ": " + ec.message());
  tcp::endpoint bound = acceptor->local_endpoint();
  std::string shown = bound.address().is_v6() ? "[" + bound.address().to_string() + "]"
                                              : bound.address().to_string();
  shown += ":" + std::to_string(bound.port());
  asio::co_spawn(impl_->io, impl_->Accept(*acceptor), asio::detached);
  impl_->acceptors.push_back(std::move(acceptor));
  return shown;
}

void Server::SetTls(std::shared_ptr<asio::ssl::context> context) {
  impl_->tls = std::move(context);
}

Result<std::shared_ptr<asio::ssl::context>> MakeTlsContext(const TlsFiles& files) {
  namespace ssl = asio::ssl;
  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                       ssl::context::single_dh_use);
  SSL_CTX_set_min_proto_version(context->native_handle(), TLS1_2_VERSION);
  boost::system::error_code ec;
  context->use_certificate_chain_file(files.cert, ec);
  if (ec) return Status::InvalidArgument("TLS certificate " + files.cert + ": " + ec.message());
  context->use_private_key_file(files.key, ssl::context::pem, ec);
  if (ec) return Status::InvalidArgument("TLS key " + files.key + ": " + ec.message());
  if (SSL_CTX_check_private_key(context->native_handle()) != 1) {
    return Status::InvalidArgument("TLS key " + files.key + " does not match the certificate " +
                                   files.cert);
  }
  if (!files.client_ca.empty()) {
    context->load_verify_file(files.client_ca, ec);
    if (ec) {
      return Status::InvalidArgument("TLS client CA " + files.client_ca + ": " + ec.message());
    }
    context->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  }
  return context;
}

void Server::StopAccepting() {
  for (auto& a : impl_->acceptors) {
    boost::system::error_code ec;
    a->close(ec);
  }
}

void Server::CloseAll() {
  impl_->closing = true;
  for (const auto& [seq, stream] : impl_->idle_order) stream->cancel();
}

size_t Server::connections() const { return impl_->conns.size(); }

size_t Server::busy_connections() const {
  return impl_->conns.size() - impl_->idle_order.size() - impl_->evicting;
}

uint64_t Server::evicted() const { return impl_->evicted; }
uint64_t Server::refused() const { return impl_->refused; }

}  // namespace delayd::http
