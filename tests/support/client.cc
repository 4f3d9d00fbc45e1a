#include "support/client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

namespace delayd::testing {

Client::Client(int port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd_);
    throw std::runtime_error("connect to port " + std::to_string(port) + ": " + strerror(errno));
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Client::Client(const std::string& unix_path) {
  fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, unix_path.c_str(), sizeof addr.sun_path - 1);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd_);
    throw std::runtime_error("connect to " + unix_path + ": " + strerror(errno));
  }
}

Client::~Client() {
  if (fd_ >= 0) ::close(fd_);
}

void Client::Send(const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) throw std::runtime_error("send failed");
    off += static_cast<size_t>(n);
  }
}

void Client::ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }

bool Client::Fill(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return false;
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
  char tmp[65536];
  ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
  if (n <= 0) throw std::runtime_error("connection closed by server");
  buf_.append(tmp, static_cast<size_t>(n));
  return true;
}

std::string Client::Reply(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t eol;
  while ((eol = buf_.find("\r\n")) == std::string::npos) {
    if (!Fill(deadline)) throw std::runtime_error("no reply in time; have: " + buf_);
  }
  std::string line = buf_.substr(0, eol + 2);
  size_t body = 0;
  for (const char* word : {"FOUND ", "RESERVED "}) {
    if (line.rfind(word, 0) == 0) body = std::stoul(line.substr(line.rfind(' ') + 1)) + 2;
  }
  if (line.rfind("OK ", 0) == 0) body = std::stoul(line.substr(3)) + 2;
  while (buf_.size() < eol + 2 + body) {
    if (!Fill(deadline)) throw std::runtime_error("reply body incomplete");
  }
  std::string out = buf_.substr(0, eol + 2 + body);
  buf_.erase(0, eol + 2 + body);
  return out;
}

std::string Client::Cmd(const std::string& line, std::chrono::milliseconds timeout) {
  Send(line + "\r\n");
  return Reply(timeout);
}

uint64_t Client::Put(const std::string& body, uint32_t pri, uint32_t delay, uint32_t ttr) {
  std::string r = Cmd("put " + std::to_string(pri) + " " + std::to_string(delay) + " " +
                      std::to_string(ttr) + " " + std::to_string(body.size()) + "\r\n" + body);
  if (r.rfind("INSERTED ", 0) != 0) throw std::runtime_error("put failed: " + r);
  return Number(r);
}

bool Client::Silent(std::chrono::milliseconds wait) {
  if (!buf_.empty()) return false;
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(wait.count())) == 0;
}

bool Client::Closed(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  try {
    while (Fill(deadline)) {
    }
  } catch (const std::runtime_error&) {
    return true;
  }
  return false;
}

uint64_t Number(const std::string& reply) {
  size_t sp = reply.find(' ');
  if (sp == std::string::npos) throw std::runtime_error("no number in: " + reply);
  return std::stoull(reply.substr(sp + 1));
}

std::string Field(const std::string& yaml, const std::string& key) {
  size_t at = yaml.find("\n" + key + ": ");
  if (at == std::string::npos) return "";
  at += key.size() + 3;
  return yaml.substr(at, yaml.find('\n', at) - at);
}

}  // namespace delayd::testing
