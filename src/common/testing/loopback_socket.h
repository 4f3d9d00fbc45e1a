// Test support: a TCP socket bound to a loopback port of the kernel's
// choosing and held until destroyed, so that no other test can take the
// port meanwhile. Bound only, it refuses connections; after Listen() the
// kernel completes them into the backlog, and nobody ever answers.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace delayd::testing {

class LoopbackSocket {
 public:
  LoopbackSocket() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~LoopbackSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  LoopbackSocket(const LoopbackSocket&) = delete;
  LoopbackSocket& operator=(const LoopbackSocket&) = delete;

  // The bound port; 0 when binding failed.
  int port() const { return port_; }
  bool Listen() { return ::listen(fd_, 8) == 0; }

 private:
  int fd_;
  int port_ = 0;
};

}  // namespace delayd::testing
