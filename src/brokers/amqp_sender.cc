#include "brokers/amqp_sender.h"

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "brokers/limits.h"
#include "common/amqp_url.h"
#include "common/thread_name.h"
#include "delivery/header_line.h"

namespace delayd::brokers {

using delivery::OutRequest;
using delivery::OutResult;

namespace {

constexpr int64_t kFirstBackoffUs = 100'000;   // a failed connection is tried again after
constexpr int64_t kMaxBackoffUs = 10'000'000;  // ... doubling up to this
constexpr size_t kMaxUnconfirmed = 1000;       // publishes in flight per connection
constexpr amqp_channel_t kChannel = 1;
constexpr int kFrameMax = 131072;  // RabbitMQ's default

struct FreeAddrInfo {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};
using AddrInfo = std::unique_ptr<addrinfo, FreeAddrInfo>;

amqp_bytes_t Bytes(std::string_view s) {
  return amqp_bytes_t{s.size(), const_cast<char*>(s.data())};
}
std::string Text(amqp_bytes_t b) { return std::string(static_cast<const char*>(b.bytes), b.len); }

// Why an RPC (login, channel.open, confirm.select) failed; `refused` is set
// when the broker refused for a reason no retry cures (access, vhost).
std::string RpcError(const amqp_rpc_reply_t& r, bool* refused) {
  switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
      return "";
    case AMQP_RESPONSE_NONE:
      return "no reply from the broker";
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
      return amqp_error_string2(r.library_error);
    case AMQP_RESPONSE_SERVER_EXCEPTION:
      break;
  }
  uint16_t code = 0;
  std::string text;
  if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
    const auto* c = static_cast<const amqp_connection_close_t*>(r.reply.decoded);
    code = c->reply_code;
    text = Text(c->reply_text);
  } else if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
    const auto* c = static_cast<const amqp_channel_close_t*>(r.reply.decoded);
    code = c->reply_code;
    text = Text(c->reply_text);
  }
  // 403 ACCESS_REFUSED (user, password, permissions), 530 NOT_ALLOWED (vhost).
  if (refused != nullptr) *refused = code == 403 || code == 530;
  return std::to_string(code) + " " + text;
}

}  // namespace

// One publish, from Send() until its outcome.
struct Publish {
  delivery::HttpSender::Callback done;
  std::string exchange;
  std::string routing_key;
  std::string message_id;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  int64_t started_us = 0;
  int64_t deadline_us = 0;
  std::string returned;  // the broker's basic.return, when it could not route it
};

struct AmqpSender::Connection {
  AmqpSender* sender = nullptr;
  std::string key;
  AmqpUrl url;
  std::thread thread;
  int wake_fd = -1;
  int64_t used_us = 0;   // on the loop
  size_t in_flight = 0;  // on the loop: publishes handed over and not reported back

  std::mutex mu;
  std::deque<Publish> incoming;  // guarded by mu
  std::atomic<bool> stopping{false};

  // The thread's own:
  amqp_connection_state_t conn = nullptr;
  std::deque<Publish> waiting;              // for the connection, or for room to publish
  std::map<uint64_t, Publish> unconfirmed;  // by delivery tag
  uint64_t next_tag = 1;
  int64_t retry_at_us = 0;
  int64_t backoff_us = kFirstBackoffUs;
  std::string down_reason;  // why there is no connection
  bool refused = false;     // ... and whether the broker refused it for good
  int64_t heard_us = 0;     // when the broker last sent anything
  std::vector<std::pair<Callback, OutResult>> finished;

  void Run();
  void Wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd, &one, sizeof one);
  }
  int64_t Now() const { return sender->clock_.SteadyMicros(); }
  void Finish(Publish& p, OutResult::Broker outcome, std::string error, bool timed_out = false);
  void Report();
  bool Connect();
  AddrInfo Resolve(std::string& why) const;
  int OpenChecked(std::string& why);
  bool OpenTls(std::string& why);
  bool OpenChannel();
  void Disconnect(const std::string& reason);
  bool PublishOne(Publish& p);
  void ReadFrames();
  void OnFrame(const amqp_frame_t& f);
  void Settle(uint64_t tag, bool multiple, bool acked);
  void Expire(int64_t now_us);
  void SetCork(bool on) {
    const int v = on ? 1 : 0;
    setsockopt(amqp_get_sockfd(conn), IPPROTO_TCP, TCP_CORK, &v, sizeof v);
  }
};

void AmqpSender::Connection::Finish(Publish& p, OutResult::Broker outcome, std::string error,
                                    bool timed_out) {
  OutResult r;
  r.broker = outcome;
  r.error = std::move(error);
  r.timed_out = timed_out;
  r.duration_ms = (Now() - p.started_us) / 1000;
  finished.emplace_back(std::move(p.done), std::move(r));
}

// Hands the outcomes gathered since the last report to the loop, in one go.
void AmqpSender::Connection::Report() {
  if (finished.empty() || stopping) return;
  AmqpSender* s = sender;
  auto batch = std::make_shared<std::vector<std::pair<Callback, OutResult>>>(std::move(finished));
  finished.clear();
  s->executor_([s, key = key, batch] {
    if (s->stopped_) return;
    auto it = s->connections_.find(key);
    for (auto& [done, r] : *batch) {
      if (it != s->connections_.end()) --it->second->in_flight;
      done(std::move(r));
    }
  });
}

// The host's addresses, or none and why not.
AddrInfo AmqpSender::Connection::Resolve(std::string& why) const {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int e = getaddrinfo(url.host.c_str(), std::to_string(url.port).c_str(), &hints, &found);
      e != 0) {
    why = "cannot resolve " + url.host + ": " + gai_strerror(e);
    return nullptr;
  }
  return AddrInfo(found);
}

// A socket connected to the first of the host's addresses the target
// policy allows, or -1 and why not.
int AmqpSender::Connection::OpenChecked(std::string& why) {
  AddrInfo found = Resolve(why);
  if (!found) return -1;
  int fd = -1;
  why = "no address for " + url.host;
  for (addrinfo* a = found.get(); a != nullptr && fd < 0; a = a->ai_next) {
    if (Status s = sender->policy_.CheckAddress(url.host, a->ai_addr); !s.ok()) {
      why = "refused by the target policy: " + s.message();
      continue;
    }
    fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      why = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    int err = 0;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd pfd{.fd = fd, .events = POLLOUT, .revents = 0};
        int n;
        do {
          n = poll(&pfd, 1, kConnectWaitMs);
        } while (n == -1 && errno == EINTR);
        socklen_t len = sizeof err;
        if (n == 0) {
          err = ETIMEDOUT;
        } else if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
          err = errno;
        }
      }
    }
    if (err != 0) {
      why = "cannot connect to " + url.host + ":" + std::to_string(url.port) + ": " +
            std::strerror(err);
      close(fd);
      fd = -1;
    }
  }
  return fd;
}

// amqps: rabbitmq-c opens its TLS sockets itself, by name, so the policy
// sees every address the name has before, and the address connected to
// after the handshake and before anything of ours (the login, a message) is
// sent. The broker's certificate must chain to the system's trust store
// (OpenSSL's SSL_CERT_FILE and SSL_CERT_DIR point elsewhere) and name the
// host; TLS 1.2 at least.
bool AmqpSender::Connection::OpenTls(std::string& why) {
  AddrInfo found = Resolve(why);
  if (!found) return false;
  Status allowed;
  for (addrinfo* a = found.get(); a != nullptr && allowed.ok(); a = a->ai_next) {
    allowed = sender->policy_.CheckAddress(url.host, a->ai_addr);
  }
  if (!allowed.ok()) {
    why = "refused by the target policy: " + allowed.message();
    return false;
  }
  conn = amqp_new_connection();
  amqp_socket_t* socket = amqp_ssl_socket_new(conn);
  if (socket == nullptr) {
    why = "cannot make a TLS socket";
    return false;
  }
  SSL_CTX_set_default_verify_paths(static_cast<SSL_CTX*>(amqp_ssl_socket_get_context(socket)));
  amqp_ssl_socket_set_verify_peer(socket, 1);
  amqp_ssl_socket_set_verify_hostname(socket, 1);
  amqp_ssl_socket_set_ssl_versions(socket, AMQP_TLSv1_2, AMQP_TLSvLATEST);
  timeval wait{.tv_sec = kConnectWaitMs / 1000, .tv_usec = 0};
  ERR_clear_error();
  if (int e = amqp_socket_open_noblock(socket, url.host.c_str(), url.port, &wait);
      e != AMQP_STATUS_OK) {
    why = "cannot connect over TLS to " + url.host + ":" + std::to_string(url.port) + ": " +
          amqp_error_string2(e);
    if (unsigned long ssl = ERR_peek_last_error(); ssl != 0) {
      char text[256];
      ERR_error_string_n(ssl, text, sizeof text);
      why += std::string(" (") + text + ")";
    }
    return false;
  }
  sockaddr_storage peer{};
  socklen_t len = sizeof peer;
  if (getpeername(amqp_get_sockfd(conn), reinterpret_cast<sockaddr*>(&peer), &len) != 0) {
    why = std::string("getpeername: ") + std::strerror(errno);
    return false;
  }
  if (Status s = sender->policy_.CheckAddress(url.host, reinterpret_cast<sockaddr*>(&peer));
      !s.ok()) {
    why = "refused by the target policy: " + s.message();
    return false;
  }
  return true;
}

bool AmqpSender::Connection::Connect() {
  const int64_t started = Now();
  // Only the broker's own refusal (login, vhost) is for good; an address
  // the target policy refuses follows the retry policy, as for HTTP.
  refused = false;
  std::string why;
  if (url.tls) {
    if (!OpenTls(why)) {
      Disconnect(why);
      return false;
    }
  } else {
    const int fd = OpenChecked(why);
    if (fd < 0) {
      Disconnect(why);
      return false;
    }
    conn = amqp_new_connection();
    amqp_socket_t* socket = amqp_tcp_socket_new(conn);
    amqp_tcp_socket_set_sockfd(socket, fd);  // the connection's from now on
  }
  const int one = 1;
  setsockopt(amqp_get_sockfd(conn), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  timeval handshake{.tv_sec = kConnectWaitMs / 1000, .tv_usec = 0};
  amqp_set_handshake_timeout(conn, &handshake);
  amqp_set_rpc_timeout(conn, &handshake);
  bool refusal = false;
  std::string error =
      RpcError(amqp_login(conn, url.vhost.c_str(), 0, kFrameMax, 0, AMQP_SASL_METHOD_PLAIN,
                          url.user.c_str(), url.password.c_str()),
               &refusal);
  if (!error.empty()) {
    refused = refusal;
    Disconnect("login to vhost " + url.vhost + " as " + url.user + " failed: " + error);
    return false;
  }
  if (!OpenChannel()) return false;
  backoff_us = kFirstBackoffUs;
  heard_us = Now();
  spdlog::info("amqp: connected to {}:{}{} vhost {} in {} ms", url.host, url.port,
               url.tls ? " over TLS" : "", url.vhost, (heard_us - started) / 1000);
  return true;
}

bool AmqpSender::Connection::OpenChannel() {
  amqp_channel_open(conn, kChannel);
  std::string error = RpcError(amqp_get_rpc_reply(conn), nullptr);
  if (error.empty()) {
    amqp_confirm_select(conn, kChannel);
    error = RpcError(amqp_get_rpc_reply(conn), nullptr);
  }
  if (!error.empty()) {
    Disconnect("cannot open a channel in confirm mode: " + error);
    return false;
  }
  next_tag = 1;
  return true;
}

// Drops the connection: every publish not yet confirmed failed (the broker
// may or may not have it; the job's retry sends it again: at least once).
void AmqpSender::Connection::Disconnect(const std::string& reason) {
  if (conn != nullptr) {
    amqp_destroy_connection(conn);  // closes the socket
    conn = nullptr;
    spdlog::warn("amqp: connection to {}:{} lost: {}", url.host, url.port, reason);
  }
  for (auto& [tag, p] : unconfirmed) {
    Finish(p, OutResult::Broker::kFailed, "not confirmed: " + reason);
  }
  unconfirmed.clear();
  down_reason = reason;
  retry_at_us = Now() + backoff_us;
  backoff_us = std::min(backoff_us * 2, kMaxBackoffUs);
}

bool AmqpSender::Connection::PublishOne(Publish& p) {
  std::vector<amqp_table_entry_t> entries;
  entries.reserve(p.headers.size());
  for (const auto& [name, value] : p.headers) {
    amqp_table_entry_t e{};
    e.key = Bytes(name);
    e.value.kind = AMQP_FIELD_KIND_UTF8;
    e.value.value.bytes = Bytes(value);
    entries.push_back(e);
  }
  amqp_basic_properties_t props{};
  props._flags = AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
                 AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TIMESTAMP_FLAG;
  props.headers.num_entries = static_cast<int>(entries.size());
  props.headers.entries = entries.data();
  props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
  props.message_id = Bytes(p.message_id);
  props.timestamp = static_cast<uint64_t>(sender->clock_.WallMillis() / 1000);
  if (!p.content_type.empty()) {
    props._flags |= AMQP_BASIC_CONTENT_TYPE_FLAG;
    props.content_type = Bytes(p.content_type);
  }
  const int status = amqp_basic_publish(conn, kChannel, Bytes(p.exchange), Bytes(p.routing_key),
                                        /*mandatory=*/1, /*immediate=*/0, &props, Bytes(p.body));
  if (status != AMQP_STATUS_OK) {
    Finish(p, OutResult::Broker::kFailed,
           std::string("publish failed: ") + amqp_error_string2(status));
    Disconnect(std::string("publish failed: ") + amqp_error_string2(status));
    return false;
  }
  unconfirmed.emplace(next_tag++, std::move(p));
  return true;
}

void AmqpSender::Connection::Settle(uint64_t tag, bool multiple, bool acked) {
  auto end = multiple ? unconfirmed.upper_bound(tag) : unconfirmed.find(tag);
  auto begin = multiple ? unconfirmed.begin() : end;
  if (!multiple) {
    if (end == unconfirmed.end()) return;  // timed out already
    ++end;
  }
  for (auto it = begin; it != end; ++it) {
    Publish& p = it->second;
    if (!acked) {
      Finish(p, OutResult::Broker::kFailed, "nacked by the broker (it could not take the message)");
    } else if (!p.returned.empty()) {
      // Unroutable is a failed attempt, retried by the job's policy (issue
      // 32): a node that has just come back may route nothing for a moment,
      // and a consumer may bind its queue later. A routing key that never
      // matches is a dead letter once the attempts run out, with these words.
      Finish(p, OutResult::Broker::kFailed, p.returned);
    } else {
      Finish(p, OutResult::Broker::kAcknowledged, "");
    }
  }
  unconfirmed.erase(begin, end);
}

void AmqpSender::Connection::OnFrame(const amqp_frame_t& f) {
  if (f.frame_type != AMQP_FRAME_METHOD) return;  // heartbeats; content read with its method
  const amqp_method_t& m = f.payload.method;
  switch (m.id) {
    case AMQP_BASIC_ACK_METHOD: {
      const auto* ack = static_cast<const amqp_basic_ack_t*>(m.decoded);
      Settle(ack->delivery_tag, ack->multiple != 0, true);
      break;
    }
    case AMQP_BASIC_NACK_METHOD: {
      const auto* nack = static_cast<const amqp_basic_nack_t*>(m.decoded);
      Settle(nack->delivery_tag, nack->multiple != 0, false);
      break;
    }
    case AMQP_BASIC_RETURN_METHOD: {
      // An unroutable mandatory message comes back before its ack; it names
      // no delivery tag, so it is matched by its message id: the oldest
      // unconfirmed publish of that job.
      const auto* ret = static_cast<const amqp_basic_return_t*>(m.decoded);
      const std::string why = std::to_string(ret->reply_code) + " " + Text(ret->reply_text) +
                              ": no queue is bound to exchange '" + Text(ret->exchange) +
                              "' for routing key '" + Text(ret->routing_key) + "'";
      amqp_message_t msg;
      amqp_rpc_reply_t r = amqp_read_message(conn, f.channel, &msg, 0);
      if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        Disconnect("reading a returned message: " + RpcError(r, nullptr));
        return;
      }
      const std::string id = (msg.properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG) != 0
                                 ? Text(msg.properties.message_id)
                                 : std::string();
      amqp_destroy_message(&msg);
      for (auto& [tag, p] : unconfirmed) {
        if (p.message_id == id && p.returned.empty()) {
          p.returned = why;
          break;
        }
      }
      break;
    }
    case AMQP_CHANNEL_CLOSE_METHOD: {
      // The broker closed the channel over one publish (an exchange missing
      // or not this user's): that one is rejected; the others published
      // after it on the channel are lost with it and retried.
      const auto* c = static_cast<const amqp_channel_close_t*>(m.decoded);
      const std::string why = "channel closed by the broker: " + std::to_string(c->reply_code) +
                              " " + Text(c->reply_text);
      const bool refusal = c->reply_code == 403 || c->reply_code == 404;
      amqp_channel_close_ok_t ok{};
      amqp_send_method(conn, kChannel, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
      for (auto& [tag, p] : unconfirmed) {
        const bool named = why.find("exchange '" + p.exchange + "'") != std::string::npos;
        Finish(p, refusal && named ? OutResult::Broker::kRejected : OutResult::Broker::kFailed,
               why);
      }
      unconfirmed.clear();
      OpenChannel();
      break;
    }
    case AMQP_CONNECTION_CLOSE_METHOD: {
      const auto* c = static_cast<const amqp_connection_close_t*>(m.decoded);
      const std::string why = "connection closed by the broker: " + std::to_string(c->reply_code) +
                              " " + Text(c->reply_text);
      amqp_connection_close_ok_t ok{};
      amqp_send_method(conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
      Disconnect(why);
      break;
    }
    default:
      break;
  }
}

void AmqpSender::Connection::ReadFrames() {
  while (conn != nullptr) {
    amqp_frame_t f;
    timeval zero{.tv_sec = 0, .tv_usec = 0};
    const int status = amqp_simple_wait_frame_noblock(conn, &f, &zero);
    if (status == AMQP_STATUS_TIMEOUT) break;
    if (status != AMQP_STATUS_OK) {
      Disconnect(std::string("reading from the broker: ") + amqp_error_string2(status));
      return;
    }
    heard_us = Now();
    OnFrame(f);
  }
  if (conn != nullptr) amqp_maybe_release_buffers(conn);
}

// Publishes past their deadline: waiting ones never reached the broker;
// unconfirmed ones may have. A connection that said nothing for as long as a
// publish waited for its confirm is taken for dead.
void AmqpSender::Connection::Expire(int64_t now_us) {
  while (!waiting.empty() && waiting.front().deadline_us <= now_us) {
    Publish& p = waiting.front();
    const bool never = conn == nullptr;
    Finish(p, never && refused ? OutResult::Broker::kRejected : OutResult::Broker::kFailed,
           never ? "no connection to the broker: " + down_reason
                 : "timed out waiting for room to publish",
           !(never && refused));
    waiting.pop_front();
  }
  bool silent = false;
  for (auto it = unconfirmed.begin(); it != unconfirmed.end();) {
    if (it->second.deadline_us > now_us) {
      ++it;
      continue;
    }
    silent = silent || heard_us < it->second.started_us;
    Finish(it->second, OutResult::Broker::kFailed, "timed out waiting for the broker's confirm",
           true);
    it = unconfirmed.erase(it);
  }
  if (silent && conn != nullptr) Disconnect("the broker sent nothing while a confirm was due");
}

void AmqpSender::Connection::Run() {
  while (!stopping) {
    {
      std::lock_guard lock(mu);
      while (!incoming.empty()) {
        waiting.push_back(std::move(incoming.front()));
        incoming.pop_front();
      }
    }
    int64_t now = Now();
    if (conn == nullptr && !waiting.empty() && now >= retry_at_us) Connect();
    // Several publishes at once go out corked: rabbitmq-c sends each frame
    // with a syscall of its own, and the kernel then makes a few segments
    // of them instead of one (and one wake-up of the broker) per frame.
    const bool cork = conn != nullptr && waiting.size() > 1;
    if (cork) SetCork(true);
    while (conn != nullptr && !waiting.empty() && unconfirmed.size() < kMaxUnconfirmed) {
      Publish p = std::move(waiting.front());
      waiting.pop_front();
      PublishOne(p);
    }
    if (cork && conn != nullptr) SetCork(false);
    now = Now();
    Expire(now);
    Report();

    // Sleep until the broker says something, a publish comes, a deadline
    // passes or a reconnect is due.
    int64_t wake_us = now + 1'000'000;
    if (!waiting.empty()) wake_us = std::min(wake_us, waiting.front().deadline_us);
    for (const auto& [tag, p] : unconfirmed) wake_us = std::min(wake_us, p.deadline_us);
    if (conn == nullptr && !waiting.empty()) wake_us = std::min(wake_us, retry_at_us);
    int timeout_ms = static_cast<int>(std::max<int64_t>(0, (wake_us - now + 999) / 1000));
    if (conn != nullptr && (amqp_frames_enqueued(conn) || amqp_data_in_buffer(conn))) {
      timeout_ms = 0;
    }
    pollfd fds[2] = {
        {.fd = wake_fd, .events = POLLIN, .revents = 0},
        {.fd = conn != nullptr ? amqp_get_sockfd(conn) : -1, .events = POLLIN, .revents = 0}};
    if (poll(fds, 2, timeout_ms) > 0 && (fds[0].revents & POLLIN) != 0) {
      uint64_t n;
      [[maybe_unused]] ssize_t r = read(wake_fd, &n, sizeof n);
    }
    if (conn != nullptr) ReadFrames();
    Report();
  }
  if (conn != nullptr) {
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(conn);
    conn = nullptr;
  }
}

AmqpSender::AmqpSender(Executor executor, const delivery::TargetPolicy& policy, const Clock& clock)
    : executor_(std::move(executor)), policy_(policy), clock_(clock) {}

AmqpSender::~AmqpSender() { Stop(); }

void AmqpSender::Stop() {
  if (stopped_) return;
  stopped_ = true;
  for (auto& [key, c] : connections_) {
    c->stopping = true;
    c->Wake();
  }
  for (auto& [key, c] : connections_) {
    if (c->thread.joinable()) c->thread.join();
    close(c->wake_fd);
  }
  connections_.clear();
}

void AmqpSender::Send(OutRequest req, Callback done) {
  if (stopped_) return;
  const int64_t now_us = clock_.SteadyMicros();
  DropIdle(now_us);
  std::string why;
  std::optional<AmqpUrl> url = ParseAmqpUrl(req.url, &why);
  if (!url) {
    OutResult r;
    r.not_sent = true;
    r.error = "not sent: " + req.url.substr(0, 200) + " " + why;
    return Fail(std::move(done), std::move(r));
  }
  std::string key = std::string(url->tls ? "amqps|" : "amqp|") + url->host + "|" +
                    std::to_string(url->port) + "|" + url->vhost + "|" + url->user + "|" +
                    url->password;
  std::unique_ptr<Connection>& slot = connections_[key];
  if (!slot) {
    auto c = std::make_unique<Connection>();
    c->sender = this;
    c->key = key;
    c->url = *url;
    c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    Connection* raw = c.get();
    c->thread = StartNamedThread("amqp-conn", [raw] { raw->Run(); });
    slot = std::move(c);
  }
  Connection& c = *slot;
  c.used_us = now_us;
  Publish p;
  p.done = std::move(done);
  p.exchange = std::move(url->exchange);
  p.routing_key = std::move(url->routing_key);
  p.message_id = std::to_string(req.job.id);
  p.body = std::move(req.body);
  p.started_us = now_us;
  p.deadline_us = now_us + req.timeout_ms * 1000;
  p.headers.reserve(req.headers.size());
  for (const std::string& h : req.headers) {
    std::optional<std::pair<std::string_view, std::string_view>> nv = delivery::SplitHeaderLine(h);
    if (!nv) continue;
    if (strcasecmp(std::string(nv->first).c_str(), "Content-Type") == 0) {
      p.content_type = nv->second;  // a property of its own in AMQP
      continue;
    }
    p.headers.emplace_back(nv->first, nv->second);
  }
  ++c.in_flight;
  {
    std::lock_guard lock(c.mu);
    c.incoming.push_back(std::move(p));
  }
  c.Wake();
}

void AmqpSender::Fail(Callback done, OutResult r) {
  executor_([this, done = std::move(done), r = std::move(r)]() mutable {
    if (!stopped_) done(std::move(r));
  });
}

void AmqpSender::DropIdle(int64_t now_us) {
  if (now_us - swept_us_ < kSweepUs) return;
  swept_us_ = now_us;
  for (auto it = connections_.begin(); it != connections_.end();) {
    Connection& c = *it->second;
    if (c.in_flight == 0 && now_us - c.used_us > kIdleUs) {
      c.stopping = true;
      c.Wake();
      c.thread.join();
      close(c.wake_fd);
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace delayd::brokers
