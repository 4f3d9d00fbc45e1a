// Clients that misbehave: thousands of connections at once, and a client
// that pipelines requests for megabytes of replies without ever reading
// them. The server keeps serving well-behaved clients, enforces its
// connection limit, and its memory stays bounded. (Byte-by-byte clients,
// cuts mid-body and running out of descriptors are in
// beanstalk_behaviour_test.)
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "support/client.h"
#include "support/http.h"
#include "support/process.h"

namespace delayd::testing {
namespace {

using namespace std::chrono_literals;

// A raw non-blocking connection to 127.0.0.1:port; -1 if refused.
int RawConnect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True when the server has closed `fd` (EOF or reset) within `timeout`.
bool ClosedByServer(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char b;
  for (;;) {  // at least one look, even with no time to wait
    ssize_t n = ::recv(fd, &b, 1, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
}

TEST(HostileClientsTest, ThousandsOfConnectionsMeetTheLimitAndServiceGoesOn) {
  rlimit fds{};
  ::getrlimit(RLIMIT_NOFILE, &fds);
  fds.rlim_cur = std::min<rlim_t>(fds.rlim_max, 8192);
  ::setrlimit(RLIMIT_NOFILE, &fds);
  if (fds.rlim_cur < 3000) GTEST_SKIP() << "too few descriptors allowed: " << fds.rlim_cur;

  DelaydServer server(MakeTempDir("delayd-conns"), {"--max-connections", "1000"});
  Client good(server.port());  // connected before the flood: one of the 1000
  std::vector<int> flood;
  for (int i = 0; i < 2500; ++i) {
    int fd = RawConnect(server.port());
    if (fd >= 0) flood.push_back(fd);
  }
  // Beyond the limit the server closes at once; within it, it keeps them.
  size_t closed = 0;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (closed < flood.size() - 999 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
    closed = 0;
    for (int fd : flood) closed += ClosedByServer(fd, 0ms);
  }
  std::printf("connections: %zu opened at once, %zu closed by the server (limit 1000)\n",
              flood.size(), closed);
  EXPECT_GE(closed, flood.size() - 999);
  EXPECT_EQ(good.Put("still served"), 1u);
  EXPECT_EQ(Field(good.Cmd("stats"), "current-connections"), "1000");
  for (int fd : flood) ::close(fd);
  // Room again once they are gone.
  EXPECT_TRUE(
      WaitUntil([&] { return Field(good.Cmd("stats"), "current-connections") == "1"; }, 10s));
  Client later(server.port());
  EXPECT_EQ(later.Cmd("list-tube-used"), "USING default\r\n");
}

TEST(HostileClientsTest, AClientThatNeverReadsCannotGrowTheServer) {
  DelaydServer server(MakeTempDir("delayd-noread"), {}, {AsanSmallQuarantine()});
  Client good(server.port());
  const std::string body(60'000, 'b');
  const uint64_t id = good.Put(body);
  const long rss_before = RssKib(server.pid());

  // Ask for the 60 kB job over and over, 20 MB of requests, and never read a
  // byte: answered, that would be 150 GB of replies.
  int greedy = RawConnect(server.port());
  ASSERT_GE(greedy, 0);
  std::string requests;
  const std::string peek = "peek " + std::to_string(id) + "\r\n";
  while (requests.size() < (20u << 20)) requests += peek;
  size_t sent = 0;
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (sent < requests.size() && std::chrono::steady_clock::now() < deadline) {
    ssize_t n = ::send(greedy, requests.data() + sent, requests.size() - sent, MSG_NOSIGNAL);
    if (n > 0)
      sent += static_cast<size_t>(n);
    else
      std::this_thread::sleep_for(5ms);
  }
  // Everyone else is served meanwhile.
  const size_t reply = ("FOUND " + std::to_string(id) + " 60000\r\n").size() + body.size() + 2;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(good.Cmd("peek " + std::to_string(id)).size(), reply);
  const long rss_after = RssKib(server.pid());
  std::printf("never-reading client: sent %zu bytes of requests; server RSS %ld -> %ld KiB\n", sent,
              rss_before, rss_after);
  // It stops reading our requests once 4 MiB of replies wait (plus socket buffers).
  EXPECT_LT(sent, requests.size()) << "the server read every request anyway";
  EXPECT_LT(rss_after - rss_before, 32 * 1024) << "replies piled up in memory";
  ::close(greedy);
}

}  // namespace
}  // namespace delayd::testing
