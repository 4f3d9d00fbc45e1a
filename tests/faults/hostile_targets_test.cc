// Push targets that misbehave: they reset the connection, answer garbage,
// redirect to themselves forever, send a 10 MiB body, or drip a body a byte
// at a time. Each failure is recorded and retried until the job is a dead
// letter; meanwhile a healthy topic's jobs go out on time and delayd's
// memory stays bounded.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "common/time_format.h"
#include "support/http.h"
#include "support/process.h"

namespace delayd::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

enum class Misbehaviour { kReset, kGarbage, kRedirectLoop, kHugeBody, kDrip };

// A loopback HTTP "server" that reads each request and then misbehaves.
class HostileTarget {
 public:
  explicit HostileTarget(Misbehaviour how) : how_(how) {
    fd_ = ListenLoopback(&port_);
    acceptor_ = std::thread([this] {
      for (;;) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;  // closed
        timeval tv{10, 0};  // no connection outlives the test by much
        ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ::setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        workers_.emplace_back([this, c] { Serve(c); });
      }
    });
  }
  ~HostileTarget() {
    stopping_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    acceptor_.join();
    for (auto& w : workers_) w.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/hook"; }
  int requests() const { return requests_; }

 private:
  // Reads one request (head and Content-Length body); false on EOF.
  static bool ReadRequest(int c, std::string& buf) {
    char tmp[8192];
    for (;;) {
      size_t end = buf.find("\r\n\r\n");
      if (end != std::string::npos) {
        size_t len = 0;
        size_t cl = buf.find("Content-Length: ");
        if (cl != std::string::npos && cl < end) len = std::stoul(buf.substr(cl + 16));
        if (buf.size() >= end + 4 + len) {
          buf.erase(0, end + 4 + len);
          return true;
        }
      }
      ssize_t n = ::recv(c, tmp, sizeof tmp, 0);
      if (n <= 0) return false;
      buf.append(tmp, static_cast<size_t>(n));
    }
  }
  static void SendAll(int c, const std::string& s) {
    for (size_t off = 0; off < s.size();) {
      ssize_t n = ::send(c, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  void Serve(int c) {
    std::string buf;
    while (!stopping_ && ReadRequest(c, buf)) {
      ++requests_;
      switch (how_) {
        case Misbehaviour::kReset: {
          linger l{1, 0};  // close with RST
          ::setsockopt(c, SOL_SOCKET, SO_LINGER, &l, sizeof l);
          ::close(c);
          return;
        }
        case Misbehaviour::kGarbage:
          SendAll(c, std::string("SPEAK FRIEND\x01\xff\r\n\r\n", 18));
          ::close(c);
          return;
        case Misbehaviour::kRedirectLoop:
          SendAll(c, "HTTP/1.1 302 Found\r\nLocation: " + url() + "\r\nContent-Length: 0\r\n\r\n");
          break;
        case Misbehaviour::kHugeBody: {
          const size_t size = 10 << 20;
          SendAll(c, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(size) + "\r\n\r\n");
          const std::string chunk(64 << 10, 'x');
          for (size_t sent = 0; sent < size && !stopping_; sent += chunk.size()) SendAll(c, chunk);
          break;
        }
        case Misbehaviour::kDrip:
          SendAll(c, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n");
          for (int i = 0; i < 100 && !stopping_; ++i) {
            SendAll(c, "x");
            std::this_thread::sleep_for(50ms);
          }
          ::close(c);
          return;
      }
    }
    ::close(c);
  }

  Misbehaviour how_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> requests_{0};
  std::thread acceptor_;
  std::vector<std::thread> workers_;  // acceptor thread only, joined after it
};

TEST(HostileTargetsTest, FailuresAreRecordedOthersStayOnTimeMemoryStaysBounded) {
  DelaydServer server(MakeTempDir("delayd-hostile"), {}, {AsanSmallQuarantine()});
  const int port = server.http_port();
  const long rss_start = RssKib(server.pid());
  struct Case {
    const char* topic;
    Misbehaviour how;
    const char* error;  // in each dead letter's last_error; "": a transport error
    int attempts;       // before it became one
  };
  // A redirect is not followed and, like other 3xx and 4xx, not retried.
  const Case cases[] = {{"reset", Misbehaviour::kReset, "", 3},
                        {"garbage", Misbehaviour::kGarbage, "", 3},
                        {"redirect", Misbehaviour::kRedirectLoop, "302 is not retried", 1},
                        {"huge", Misbehaviour::kHugeBody, "", 1},
                        {"drip", Misbehaviour::kDrip, "timed out", 3}};
  std::vector<std::unique_ptr<HostileTarget>> targets;
  const int kJobs = 40;
  for (const Case& c : cases) {
    targets.push_back(std::make_unique<HostileTarget>(c.how));
    // The huge body is a success (200: delayd reads 64 KiB of it and closes
    // the connection); the rest fail until dead.
    json topic = {{"target", {{"url", targets.back()->url()}, {"timeout_ms", 3000}}},
                  {"retry", {{"max_attempts", 3}, {"initial_backoff_ms", 50}, {"jitter", false}}}};
    ASSERT_EQ(HttpCall(port, "PUT", std::string("/v1/topics/") + c.topic, topic.dump()).status,
              200);
    json jobs = json::array();
    for (int i = 0; i < kJobs; ++i) jobs.push_back({{"body", i}});
    ASSERT_EQ(
        HttpCall(port, "POST", std::string("/v1/topics/") + c.topic + "/jobs", jobs.dump()).status,
        201);
  }
  // A healthy topic, due while the hostile ones are being tried.
  Receiver live;
  ASSERT_EQ(HttpCall(port, "PUT", "/v1/topics/fine", json{{"target", {{"url", live.url()}}}}.dump())
                .status,
            200);
  json fine = json::array();
  for (int i = 0; i < 20; ++i) fine.push_back({{"body", i}, {"delay", 300 + 50 * i}});
  HttpReply posted = HttpCall(port, "POST", "/v1/topics/fine/jobs", fine.dump());
  ASSERT_EQ(posted.status, 201);

  // Every hostile job ends: a dead letter (buried), or done for the huge body.
  auto counts = [&](const char* topic) {
    return HttpCall(port, "GET", std::string("/v1/topics/") + topic).json()["counts"];
  };
  long peak_rss = 0;
  std::string unsettled;
  ASSERT_TRUE(WaitUntil(
      [&] {
        peak_rss = std::max(peak_rss, RssKib(server.pid()));
        for (const Case& c : cases) {
          json n = counts(c.topic);
          unsettled = std::string(c.topic) + ": " + n.dump();
          // Settled: neither waiting nor in flight (buried or done).
          if (n.value("delayed", 0) + n.value("ready", 0) + n.value("reserved", 0) > 0) {
            return false;
          }
        }
        return true;
      },
      60s))
      << "hostile jobs not settled; " << unsettled;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.topic);
    json n = counts(c.topic);
    if (c.how == Misbehaviour::kHugeBody) {
      EXPECT_EQ(n.value("buried", 0), 0) << n;  // 200: delivered
      continue;
    }
    EXPECT_EQ(n.value("buried", 0), kJobs) << n;
    json list = HttpCall(port, "GET", std::string("/v1/jobs?topic=") + c.topic + "&limit=1").json();
    ASSERT_FALSE(list["jobs"].empty()) << list;
    const json job = list["jobs"][0];
    EXPECT_EQ(job["attempts"], c.attempts) << job;
    const std::string last_error = job["last_error"].get<std::string>();
    if (*c.error != '\0') {
      EXPECT_NE(last_error.find(c.error), std::string::npos) << job;
    } else {
      // No usable response: curl's reason, not an HTTP status.
      EXPECT_FALSE(last_error.empty()) << job;
      EXPECT_NE(last_error.rfind("HTTP ", 0), 0u) << job;
    }
  }
  // The healthy topic went out on time.
  ASSERT_TRUE(live.WaitFor([](auto& v) { return v.size() == 20; }, 10s));
  const json due_at = posted.json();
  int64_t latest = 0;
  for (const Received& r : live.received()) {
    const int i = json::parse(r.body).get<int>();
    const int64_t due = ParseRfc3339(due_at[i]["due_at"].get<std::string>()).value();
    const int64_t at =
        std::chrono::duration_cast<std::chrono::milliseconds>(r.at.time_since_epoch()).count();
    // Stuck behind a hostile delivery, it would be 3 s late (the timeout);
    // the margin is for sanitizer builds, where delayd runs 5-15x slower.
    EXPECT_LT(at - due, 1000) << "fine job " << i << " late";
    latest = std::max(latest, at - due);
  }
  int tried = 0;
  for (const auto& t : targets) tried += t->requests();
  std::printf(
      "hostile targets: %d requests to 5 misbehaving targets (10 MiB bodies included), %d jobs "
      "settled; RSS %ld KiB at start, %ld KiB at peak; the healthy topic's jobs at most %lld ms "
      "late\n",
      tried, kJobs * 5, rss_start, peak_rss, static_cast<long long>(latest));
  // Holding the 10 MiB bodies of 40 concurrent deliveries would be 400 MiB.
  EXPECT_LT(peak_rss - rss_start, 96 * 1024) << "memory grew with hostile replies";
}

}  // namespace
}  // namespace delayd::testing
