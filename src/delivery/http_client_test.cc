// HttpClient against a small HTTP/1.1 server of the test's own on loopback:
// what goes out, what comes back, timeouts, refusals and connection reuse.
#include "delivery/http_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <thread>

#include "common/testing/loopback_socket.h"
#include "store/testing/posted_work.h"

namespace delayd::delivery {
namespace {

// Serves one connection at a time; each request gets `respond`'s answer
// (nullopt: no answer, the connection is held until the test ends).
class TestServer {
 public:
  struct Seen {
    std::string head;  // request line and headers
    std::string body;
  };
  explicit TestServer(std::function<std::optional<std::string>(const Seen&)> respond)
      : respond_(std::move(respond)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~TestServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::string url(const std::string& path = "/hook") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  int connections() const { return connections_; }
  // Answers the client closed the connection on before taking them whole.
  int answers_cut() const { return answers_cut_; }
  std::vector<Seen> seen() {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  // Waits for `fd` to be readable, in 10 ms steps, until the test ends.
  bool Readable(int fd) {
    while (!stop_) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 10) == 1) return true;
    }
    return false;
  }
  void Run() {
    while (Readable(fd_)) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      ++connections_;
      Serve(c);
      ::close(c);
    }
  }
  void Serve(int c) {
    std::string in;
    char buf[4096];
    for (;;) {
      size_t head_end;
      while ((head_end = in.find("\r\n\r\n")) == std::string::npos) {
        if (!Readable(c)) return;
        const ssize_t r = ::read(c, buf, sizeof buf);
        if (r <= 0) return;
        in.append(buf, static_cast<size_t>(r));
      }
      Seen s{in.substr(0, head_end + 2), ""};
      size_t length = 0;
      const size_t at = s.head.find("Content-Length: ");
      if (at != std::string::npos) length = std::stoul(s.head.substr(at + 16));
      while (in.size() < head_end + 4 + length) {
        if (!Readable(c)) return;
        const ssize_t r = ::read(c, buf, sizeof buf);
        if (r <= 0) return;
        in.append(buf, static_cast<size_t>(r));
      }
      s.body = in.substr(head_end + 4, length);
      in.erase(0, head_end + 4 + length);
      {
        std::lock_guard lock(mu_);
        seen_.push_back(s);
      }
      std::optional<std::string> answer = respond_(s);
      if (!answer) {
        while (Readable(c)) {
          if (::read(c, buf, sizeof buf) <= 0) return;
        }
        return;
      }
      const ssize_t sent = ::send(c, answer->data(), answer->size(), MSG_NOSIGNAL);
      if (sent < static_cast<ssize_t>(answer->size())) {
        ++answers_cut_;
        return;
      }
    }
  }

  std::function<std::optional<std::string>(const Seen&)> respond_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::atomic<int> answers_cut_{0};
  std::mutex mu_;
  std::vector<Seen> seen_;
  std::thread thread_;
};

std::string Response(const std::string& status_line, const std::string& body,
                     const std::string& extra_headers = "") {
  return "HTTP/1.1 " + status_line + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
         extra_headers + "\r\n" + body;
}

class HttpClientTest : public ::testing::Test {
 protected:
  OutResult Send(HttpClient& client, OutRequest req) {
    std::optional<OutResult> out;
    client.Send(std::move(req), [&](OutResult r) { out = std::move(r); });
    work_.RunUntil([&] { return out.has_value(); });
    return *out;
  }
  store::testing::PostedWork work_;
};

TEST_F(HttpClientTest, SendsTheRequestAsGivenAndReusesTheConnection) {
  TestServer server([](const TestServer::Seen&) { return Response("204 No Content", ""); });
  HttpClient client(work_.executor());
  OutRequest req;
  req.method = "PUT";
  req.url = server.url("/orders?id=8812");
  req.headers = {"Content-Type: application/json", "Delayd-Job-Id: 42"};
  req.body = R"({"order":8812})";
  OutResult r = Send(client, req);
  EXPECT_EQ(r.status, 204);
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_FALSE(r.timed_out);
  r = Send(client, req);
  EXPECT_EQ(r.status, 204);
  client.Stop();
  const std::vector<TestServer::Seen> seen = server.seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].head.substr(0, seen[0].head.find("\r\n")), "PUT /orders?id=8812 HTTP/1.1");
  EXPECT_NE(seen[0].head.find("\r\nDelayd-Job-Id: 42\r\n"), std::string::npos) << seen[0].head;
  EXPECT_NE(seen[0].head.find("\r\nContent-Type: application/json\r\n"), std::string::npos);
  EXPECT_EQ(seen[0].body, R"({"order":8812})");
  EXPECT_EQ(server.connections(), 1) << "the second request reused the connection";
}

TEST_F(HttpClientTest, AFailedResponseGivesItsStatusBodyExcerptAndRetryAfter) {
  TestServer server([](const TestServer::Seen&) {
    return Response("503 Service Unavailable", "busy, come back" + std::string(1000, '.'),
                    "Retry-After: 30\r\n");
  });
  HttpClient client(work_.executor());
  OutRequest req;
  req.url = server.url();
  const OutResult r = Send(client, req);
  client.Stop();
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.error.rfind("HTTP 503: busy, come back", 0), 0u) << r.error;
  EXPECT_LT(r.error.size(), 600u) << "an excerpt, not the whole body";
  EXPECT_NE(r.retry_after.find("30"), std::string::npos) << r.retry_after;
}

TEST_F(HttpClientTest, ALongBodyIsNotReadToItsEndAndTheStatusDecides) {
  // More than the socket buffers can hold (net.ipv4.tcp_rmem and tcp_wmem
  // allow 32 + 4 MiB here), so the server's send ends early only if the
  // client closes the connection.
  const std::string huge = Response("200 OK", std::string(48 << 20, 'x'));
  const std::string failed =
      Response("500 Internal Server Error", "broken" + std::string(48 << 20, '.'));
  const std::string small = Response("200 OK", "ok");
  std::atomic<int> calls{0};
  TestServer server([&](const TestServer::Seen&) -> std::optional<std::string> {
    switch (calls++) {
      case 0:
        return huge;
      case 1:
        return failed;
      default:
        return small;
    }
  });
  HttpClient client(work_.executor());
  OutRequest req;
  req.url = server.url();
  OutResult r = Send(client, req);
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.error.empty()) << r.error;
  r = Send(client, req);
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.error.rfind("HTTP 500: broken", 0), 0u) << r.error;
  r = Send(client, req);  // on a new connection: the others were closed
  EXPECT_EQ(r.status, 200);
  client.Stop();
  EXPECT_EQ(server.answers_cut(), 2);
  EXPECT_EQ(server.connections(), 3);
}

TEST_F(HttpClientTest, ATargetThatDoesNotAnswerTimesOut) {
  TestServer server([](const TestServer::Seen&) { return std::nullopt; });
  HttpClient client(work_.executor());
  OutRequest req;
  req.url = server.url();
  req.timeout_ms = 300;
  const OutResult r = Send(client, req);
  client.Stop();
  EXPECT_TRUE(r.timed_out) << r.error;
  EXPECT_EQ(r.status, 0);
  EXPECT_GE(r.duration_ms, 290);
}

TEST_F(HttpClientTest, ARefusedConnectionAndThePolicyAreErrorsWithoutAStatus) {
  // A port bound but not listening refuses connections, and stays ours, so
  // no other test's server can take it meanwhile (a closed one could be).
  delayd::testing::LoopbackSocket bound;
  const int port = bound.port();
  ASSERT_NE(port, 0);
  HttpClient client(work_.executor());
  OutRequest req;
  req.url = "http://127.0.0.1:" + std::to_string(port) + "/hook";
  OutResult r = Send(client, req);
  EXPECT_EQ(r.status, 0);
  EXPECT_FALSE(r.timed_out);
  EXPECT_FALSE(r.error.empty());

  TestServer server([](const TestServer::Seen&) { return Response("200 OK", ""); });
  Result<TargetPolicy> policy = TargetPolicy::Make({}, {"127.0.0.0/8"});
  ASSERT_TRUE(policy.ok());
  HttpClient guarded(work_.executor(), 16, *policy);
  req.url = server.url();
  r = Send(guarded, req);
  guarded.Stop();
  client.Stop();
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.error.rfind("refused by the target policy", 0), 0u) << r.error;
  EXPECT_EQ(server.connections(), 0) << "no connection was opened";
}

}  // namespace
}  // namespace delayd::delivery
