// The disk fills up: delayd's data dir is a 2 MiB tmpfs. Writes must fail
// with a clear error over both protocols while reads and reserves go on,
// nothing acknowledged may be lost or damaged, and once space returns
// (the tmpfs grows) writes must succeed again without a restart.
//
// Mounting needs root (as CI runs); elsewhere the test says it skipped.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "support/client.h"
#include "support/http.h"
#include "support/process.h"

namespace delayd::testing {
namespace {

using namespace std::chrono_literals;

class DiskFullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mnt_ = MakeTempDir("delayd-diskfull");
    if (::mount("tmpfs", mnt_.c_str(), "tmpfs", 0, "size=2m") != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno)
                   << "); the disk-full test needs root";
    }
    mounted_ = true;
  }
  void TearDown() override {
    server_.reset();
    if (mounted_) ::umount2(mnt_.c_str(), MNT_DETACH);
    std::error_code ignored;
    std::filesystem::remove_all(mnt_, ignored);
  }
  void Grow() {
    ASSERT_EQ(::mount("tmpfs", mnt_.c_str(), "tmpfs", MS_REMOUNT, "size=64m"), 0)
        << std::strerror(errno);
  }
  std::string mnt_;
  bool mounted_ = false;
  std::unique_ptr<DelaydServer> server_;
};

TEST_F(DiskFullTest, WritesFailClearlyReadsGoOnAndSpaceComingBackHeals) {
  server_ = std::make_unique<DelaydServer>(mnt_ + "/data");
  Client c(server_->port());
  const std::string body(32 * 1024, 'x');
  const std::string put = "put 0 0 60 " + std::to_string(body.size()) + "\r\n" + body;

  // Fill the disk with acknowledged jobs until a put is refused.
  std::vector<uint64_t> acked;
  std::string refusal;
  for (int i = 0; i < 1000 && refusal.empty(); ++i) {
    std::string r = c.Cmd(put);
    if (r.rfind("INSERTED ", 0) == 0) {
      acked.push_back(Number(r));
    } else {
      refusal = r;
    }
  }
  std::printf("disk full after %zu puts of %zu bytes\n", acked.size(), body.size());
  ASSERT_FALSE(refusal.empty()) << "2 MiB never filled up";
  ASSERT_GT(acked.size(), 5u);
  // beanstalkd's reply when its binlog cannot reserve space: try again later.
  EXPECT_EQ(refusal, "OUT_OF_MEMORY\r\n");
  EXPECT_NE(server_->log().find("disk is full"), std::string::npos) << server_->log();

  // HTTP says so too, as a problem naming the cause; the store's own words
  // stay in the log, under the request id the problem gives.
  HttpReply h =
      HttpCall(server_->http_port(), "POST", "/v1/topics/t/jobs", R"({"body":")" + body + R"("})");
  EXPECT_EQ(h.status, 503) << h.body;
  EXPECT_EQ(h.json().value("type", ""), "https://delayd.dev/problems/storage-full") << h.body;
  const std::string request = h.headers["delayd-request-id"];
  ASSERT_FALSE(request.empty()) << h.body;
  EXPECT_NE(h.json().value("detail", "").find(request), std::string::npos) << h.body;
  EXPECT_NE(server_->log().find("request " + request), std::string::npos);
  // A load balancer's readiness probe stops sending writers here meanwhile.
  HttpReply ready = HttpCall(server_->http_port(), "GET", "/readyz");
  EXPECT_EQ(ready.status, 503) << ready.body;
  EXPECT_NE(ready.json().value("detail", "").find("store"), std::string::npos) << ready.body;

  // Reads and reserves do not need the disk.
  EXPECT_EQ(c.Cmd("stats").rfind("OK ", 0), 0u);
  EXPECT_EQ(c.Cmd("peek " + std::to_string(acked.front())).rfind("FOUND ", 0), 0u);
  std::string reserved = c.Cmd("reserve-with-timeout 0");
  EXPECT_EQ(reserved.rfind("RESERVED ", 0), 0u) << reserved;
  EXPECT_EQ(
      HttpCall(server_->http_port(), "GET", "/v1/jobs/" + std::to_string(acked.back())).status,
      200);

  // Space comes back: the next put succeeds without a restart.
  Grow();
  std::string again;
  for (auto deadline = std::chrono::steady_clock::now() + 10s;
       std::chrono::steady_clock::now() < deadline;) {
    again = c.Cmd(put);
    if (again.rfind("INSERTED ", 0) == 0) break;
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(again.rfind("INSERTED ", 0), 0u) << again;
  acked.push_back(Number(again));
  EXPECT_EQ(HttpCall(server_->http_port(), "POST", "/v1/topics/t/jobs", R"({"body":"ok"})").status,
            201);
  EXPECT_EQ(HttpCall(server_->http_port(), "GET", "/readyz").status, 200);

  // Nothing acknowledged was lost or damaged: all there after a crash.
  server_->Kill9();
  server_->Restart();
  Client after(server_->port());
  for (uint64_t id : acked) {
    std::string r = after.Cmd("peek " + std::to_string(id));
    ASSERT_EQ(r, "FOUND " + std::to_string(id) + " " + std::to_string(body.size()) + "\r\n" + body +
                     "\r\n")
        << "job " << id;
  }
  std::printf("disk full: %zu acknowledged jobs all intact after space returned and a kill -9\n",
              acked.size());
}

}  // namespace
}  // namespace delayd::testing
