#include "support/http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>

namespace delayd::testing {

namespace {

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Reads until `buf` holds a whole message (headers and Content-Length body)
// or the peer closes; false on close or timeout before a whole message.
bool ReadMessage(int fd, std::string& buf, std::string* head, std::string* body, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    size_t end = buf.find("\r\n\r\n");
    if (end != std::string::npos) {
      std::string h = buf.substr(0, end);
      size_t len = 0;
      std::string lh = Lower(h);
      size_t cl = lh.find("content-length:");
      if (cl != std::string::npos) len = std::stoul(h.substr(cl + 15));
      if (buf.size() >= end + 4 + len) {
        *head = h;
        *body = buf.substr(end + 4, len);
        buf.erase(0, end + 4 + len);
        return true;
      }
    }
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now())
                                    .count());
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, std::min(left, 100)) <= 0) continue;
    char tmp[65536];
    ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf.append(tmp, static_cast<size_t>(n));
  }
}

std::map<std::string, std::string> ParseHeaders(const std::string& head, std::string* first) {
  std::map<std::string, std::string> out;
  size_t pos = head.find("\r\n");
  *first = head.substr(0, pos);
  while (pos != std::string::npos) {
    size_t next = head.find("\r\n", pos + 2);
    std::string line = head.substr(pos + 2, next == std::string::npos ? next : next - pos - 2);
    size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string v = line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(' '));
      out[Lower(line.substr(0, colon))] = v;
    }
    pos = next;
  }
  return out;
}

void SendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

}  // namespace

HttpReply HttpCall(int port, const std::string& method, const std::string& target,
                   const std::string& body, const std::vector<std::string>& headers) {
  int fd = ConnectLoopback(port);
  if (fd < 0) throw std::runtime_error("connect to delayd failed");
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const auto& h : headers) req += h + "\r\n";
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
    req +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n" + body;
  SendAll(fd, req);
  std::string buf, head, rbody;
  HttpReply r;
  // Long polls may take a while; the server closes after the reply.
  if (ReadMessage(fd, buf, &head, &rbody, 70'000)) {
    std::string first;
    r.headers = ParseHeaders(head, &first);
    r.status = std::stoi(first.substr(9, 3));
    r.body = rbody;
  }
  ::close(fd);
  return r;
}

int ConnectLoopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int ListenLoopback(int* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::listen(fd, 1024);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

Receiver::Receiver(std::function<Answer(const Received&, int)> answer)
    : answer_(std::move(answer)) {
  listen_fd_ = ListenLoopback(&port_);
  acceptor_ = std::thread([this] {
    while (!stopping_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      std::lock_guard lock(mu_);
      conns_.push_back(fd);
      workers_.emplace_back([this, fd] { Serve(fd); });
    }
  });
}

Receiver::~Receiver() {
  stopping_ = true;
  acceptor_.join();
  {
    std::lock_guard lock(mu_);
    for (int fd : conns_) ::shutdown(fd, SHUT_RDWR);
  }
  for (auto& t : workers_) t.join();
  for (int fd : conns_) ::close(fd);
  ::close(listen_fd_);
}

std::string Receiver::url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

void Receiver::Serve(int fd) {
  std::string buf, head, body;
  while (!stopping_) {
    if (!ReadMessage(fd, buf, &head, &body, 200)) {
      if (stopping_) return;
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 0) > 0) {
        char c;
        if (::recv(fd, &c, 1, MSG_PEEK) <= 0) return;  // closed
      }
      continue;
    }
    Received r;
    r.at = std::chrono::system_clock::now();
    std::string first;
    r.headers = ParseHeaders(head, &first);
    r.method = first.substr(0, first.find(' '));
    size_t sp = first.find(' ');
    r.path = first.substr(sp + 1, first.find(' ', sp + 1) - sp - 1);
    r.body = body;
    int n;
    {
      std::lock_guard lock(mu_);
      n = per_path_[r.path]++;
    }
    Answer a = answer_ ? answer_(r, n) : Answer{};
    {
      std::lock_guard lock(mu_);
      received_.push_back(r);
    }
    cv_.notify_all();
    if (a.hang) {
      while (!stopping_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return;
    }
    if (a.delay.count() > 0) std::this_thread::sleep_for(a.delay);
    std::string resp = "HTTP/1.1 " + std::to_string(a.status) +
                       " X\r\nContent-Length: " + std::to_string(a.body.size()) + "\r\n";
    for (const auto& h : a.headers) resp += h + "\r\n";
    resp += "\r\n" + a.body;
    SendAll(fd, resp);
  }
}

std::vector<Received> Receiver::received() const {
  std::lock_guard lock(mu_);
  return received_;
}

size_t Receiver::count() const {
  std::lock_guard lock(mu_);
  return received_.size();
}

bool Receiver::WaitFor(const std::function<bool(const std::vector<Received>&)>& pred,
                       std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return pred(received_); });
}

bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

}  // namespace delayd::testing
