// The behaviours that take time or several connections, against the real
// delayd binary: blocking reserves, ttr expiry, DEADLINE_SOON, pauses, kicks,
// unix sockets, restarts, signals and hostile input.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "support/client.h"
#include "support/process.h"

namespace delayd::testing {
namespace {

using namespace std::chrono_literals;

class BehaviourTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("delayd-behaviour");
    server_ = std::make_unique<DelaydServer>(dir_ + "/data", Extra());
  }
  virtual std::vector<std::string> Extra() { return {}; }
  void TearDown() override {
    server_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::string dir_;
  std::unique_ptr<DelaydServer> server_;
};

TEST_F(BehaviourTest, BlockingReserveIsWokenByAPutFromAnotherConnection) {
  Client consumer(server_->port());
  Client producer(server_->port());
  consumer.Send("reserve\r\n");
  EXPECT_TRUE(consumer.Silent(200ms)) << "reserve must block while nothing is ready";
  uint64_t id = producer.Put("wake up");
  EXPECT_EQ(consumer.Reply(), "RESERVED " + std::to_string(id) + " 7\r\nwake up\r\n");
}

TEST_F(BehaviourTest, ReserveWithTimeoutTimesOut) {
  Client c(server_->port());
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(c.Cmd("reserve-with-timeout 1", 5s), "TIMED_OUT\r\n");
  EXPECT_GE(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_EQ(c.Cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
}

TEST_F(BehaviourTest, DelayedJobBecomesReadyAfterItsDelay) {
  Client c(server_->port());
  uint64_t id = c.Put("soon", 0, 1);
  EXPECT_EQ(Field(c.Cmd("stats-job " + std::to_string(id)), "state"), "delayed");
  EXPECT_EQ(c.Cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(c.Cmd("reserve-with-timeout 5", 10s),
            "RESERVED " + std::to_string(id) + " 4\r\nsoon\r\n");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

TEST_F(BehaviourTest, TtrExpiryReturnsTheJobToReady) {
  Client worker(server_->port());
  Client other(server_->port());
  uint64_t id = worker.Put("slow work", 0, 0, 1);
  EXPECT_EQ(Number(worker.Cmd("reserve")), id);
  // The job comes back after its 1 s ttr; another worker then gets it.
  EXPECT_EQ(Number(other.Cmd("reserve-with-timeout 5", 10s)), id);
  std::string stats = other.Cmd("stats-job " + std::to_string(id));
  EXPECT_EQ(Field(stats, "timeouts"), "1");
  EXPECT_EQ(Field(stats, "reserves"), "2");
  EXPECT_EQ(worker.Cmd("delete " + std::to_string(id)), "NOT_FOUND\r\n")
      << "the first worker lost its reservation";
}

TEST_F(BehaviourTest, DeadlineSoonInterruptsABlockedReserve) {
  Client c(server_->port());
  c.Put("x", 0, 0, 2);
  c.Cmd("reserve");
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(c.Cmd("reserve", 5s), "DEADLINE_SOON\r\n");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1500ms);
}

TEST_F(BehaviourTest, TouchExtendsTheReservation) {
  Client c(server_->port());
  uint64_t id = c.Put("x", 0, 0, 2);
  c.Cmd("reserve");
  std::this_thread::sleep_for(1500ms);  // part of the ttr passes on purpose
  EXPECT_EQ(c.Cmd("touch " + std::to_string(id)), "TOUCHED\r\n");
  EXPECT_EQ(Field(c.Cmd("stats-job " + std::to_string(id)), "time-left"), "1");
}

TEST_F(BehaviourTest, PausedTubeHoldsItsJobsUntilThePauseEnds) {
  Client c(server_->port());
  Client admin(server_->port());
  uint64_t id = c.Put("held");
  EXPECT_EQ(admin.Cmd("pause-tube default 1"), "PAUSED\r\n");
  EXPECT_EQ(Field(admin.Cmd("stats-tube default"), "pause"), "1");
  auto start = std::chrono::steady_clock::now();
  c.Send("reserve\r\n");
  EXPECT_TRUE(c.Silent(300ms));
  EXPECT_EQ(Number(c.Reply(5s)), id);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 900ms);
}

TEST_F(BehaviourTest, KickMovesBuriedThenDelayedJobs) {
  Client c(server_->port());
  uint64_t buried = c.Put("b");
  c.Cmd("reserve");
  EXPECT_EQ(c.Cmd("bury " + std::to_string(buried) + " 1"), "BURIED\r\n");
  uint64_t d1 = c.Put("d1", 0, 100);
  uint64_t d2 = c.Put("d2", 0, 50);
  EXPECT_EQ(c.Cmd("kick 10"), "KICKED 1\r\n") << "buried jobs first, and only them";
  EXPECT_EQ(Field(c.Cmd("stats-job " + std::to_string(buried)), "state"), "ready");
  EXPECT_EQ(c.Cmd("kick 1"), "KICKED 1\r\n");
  EXPECT_EQ(Field(c.Cmd("stats-job " + std::to_string(d2)), "state"), "ready")
      << "earliest due first";
  EXPECT_EQ(Field(c.Cmd("stats-job " + std::to_string(d1)), "state"), "delayed");
  EXPECT_EQ(c.Cmd("kick-job " + std::to_string(d1)), "KICKED\r\n");
}

TEST_F(BehaviourTest, JobsFarBeyondTheHorizonAreKeptAndManageable) {
  Client c(server_->port());
  uint64_t far = c.Put("next week", 0, 7 * 86400);
  EXPECT_EQ(c.Cmd("peek " + std::to_string(far)),
            "FOUND " + std::to_string(far) + " 9\r\nnext week\r\n");
  EXPECT_EQ(Field(c.Cmd("stats"), "current-jobs-delayed"), "1");
  server_->Restart();
  Client c2(server_->port());
  std::string st = c2.Cmd("stats-job " + std::to_string(far));
  EXPECT_EQ(Field(st, "state"), "delayed");
  EXPECT_GT(std::stol(Field(st, "time-left")), 7 * 86400 - 60);
  EXPECT_EQ(c2.Cmd("delete " + std::to_string(far)), "DELETED\r\n");
  EXPECT_EQ(c2.Cmd("peek " + std::to_string(far)), "NOT_FOUND\r\n");
}

TEST_F(BehaviourTest, StateSurvivesARestart) {
  uint64_t ready, buried, delayed, gone;
  {
    Client c(server_->port());
    c.Cmd("use keep");
    ready = c.Put("ready", 7);
    buried = c.Put("buried");
    delayed = c.Put("delayed", 0, 3600);
    gone = c.Put("gone");
    c.Cmd("watch keep");
    EXPECT_EQ(Number(c.Cmd("reserve-job " + std::to_string(buried))), buried);
    c.Cmd("bury " + std::to_string(buried) + " 3");
    c.Cmd("delete " + std::to_string(gone));
    c.Cmd("pause-tube keep 3600");
  }
  server_->Restart();
  Client c(server_->port());
  EXPECT_EQ(Field(c.Cmd("stats-job " + std::to_string(ready)), "state"), "ready");
  EXPECT_EQ(Field(c.Cmd("stats-job " + std::to_string(ready)), "pri"), "7");
  EXPECT_EQ(Field(c.Cmd("stats-job " + std::to_string(buried)), "state"), "buried");
  EXPECT_EQ(Field(c.Cmd("stats-job " + std::to_string(delayed)), "state"), "delayed");
  EXPECT_EQ(c.Cmd("stats-job " + std::to_string(gone)), "NOT_FOUND\r\n");
  EXPECT_EQ(Field(c.Cmd("stats-tube keep"), "pause"), "3600");
  EXPECT_GT(c.Put("new"), gone) << "ids keep rising across restarts";
}

TEST_F(BehaviourTest, ReservedJobIsReadyAgainAfterACrash) {
  uint64_t id;
  {
    Client c(server_->port());
    id = c.Put("x");
    c.Cmd("reserve");
    server_->Kill9();
  }
  server_->Restart();
  Client c(server_->port());
  EXPECT_EQ(Field(c.Cmd("stats-job " + std::to_string(id)), "state"), "ready");
}

TEST_F(BehaviourTest, ClosingAConnectionReleasesItsReservations) {
  Client waiting(server_->port());
  uint64_t id;
  {
    Client c(server_->port());
    id = c.Put("x");
    c.Cmd("reserve");
    waiting.Send("reserve\r\n");
    EXPECT_TRUE(waiting.Silent(100ms));
  }
  EXPECT_EQ(Number(waiting.Reply()), id);
}

TEST_F(BehaviourTest, PipelinedWritesAnswerInOrderAndSeeEachOther) {
  Client c(server_->port());
  uint64_t a = c.Put("a");
  uint64_t b = c.Put("b");
  const std::string sa = std::to_string(a), sb = std::to_string(b);
  c.Send("delete " + sa + "\r\ndelete " + sa + "\r\nreserve-job " + sb + "\r\nbury " + sb +
         " 1\r\nkick-job " + sb + "\r\npeek-ready\r\nstats-job " + sa + "\r\n");
  EXPECT_EQ(c.Reply(), "DELETED\r\n");
  EXPECT_EQ(c.Reply(), "NOT_FOUND\r\n");
  EXPECT_EQ(c.Reply(), "RESERVED " + sb + " 1\r\nb\r\n");
  EXPECT_EQ(c.Reply(), "BURIED\r\n");
  EXPECT_EQ(c.Reply(), "KICKED\r\n");
  EXPECT_EQ(c.Reply(), "FOUND " + sb + " 1\r\nb\r\n");
  EXPECT_EQ(c.Reply(), "NOT_FOUND\r\n");
}

TEST_F(BehaviourTest, QuitClosesTheConnection) {
  Client c(server_->port());
  c.Send("quit\r\n");
  EXPECT_TRUE(c.Closed());
}

TEST_F(BehaviourTest, ConnectionCutMidBodyHarmsNothing) {
  {
    Client c(server_->port());
    c.Send("put 0 0 10 100\r\nonly part of the bo");
  }
  {
    Client c(server_->port());
    c.Send("put 0 0 10 70000\r\nxxxx");  // cut while a too-big body is discarded
  }
  Client c(server_->port());
  uint64_t id = c.Put("fine");
  std::string stats = c.Cmd("stats");
  EXPECT_EQ(Field(stats, "current-jobs-ready"), "1");
  EXPECT_EQ(Field(stats, "total-jobs"), "1");
  EXPECT_EQ(Number(c.Cmd("reserve")), id);
}

TEST_F(BehaviourTest, BodyLongerThanAnnouncedIsRejectedAndNotStored) {
  Client c(server_->port());
  EXPECT_EQ(c.Cmd("put 0 0 10 3\r\nabcdef"), "EXPECTED_CRLF\r\n");
  // What follows the announced body is read as the next command, as beanstalkd does.
  EXPECT_EQ(c.Reply(), "UNKNOWN_COMMAND\r\n");
  EXPECT_EQ(Field(c.Cmd("stats"), "total-jobs"), "0");
}

TEST_F(BehaviourTest, ByteByByteClientIsServed) {
  Client c(server_->port());
  for (char ch : std::string("put 1 0 10 2\r\nhi\r\n")) c.Send(std::string(1, ch));
  EXPECT_EQ(c.Reply(), "INSERTED 1\r\n");
}

TEST_F(BehaviourTest, HalfClosedClientStillGetsItsReplies) {
  Client c(server_->port());
  std::string burst;
  for (int i = 0; i < 20; ++i) burst += "put 0 0 10 1\r\nx\r\n";
  c.Send(burst + "stats-tube default\r\n");
  c.ShutdownWrite();
  for (int i = 1; i <= 20; ++i) EXPECT_EQ(c.Reply(), "INSERTED " + std::to_string(i) + "\r\n");
  EXPECT_EQ(Field(c.Reply(), "current-jobs-ready"), "20");
  EXPECT_TRUE(c.Closed());
}

TEST_F(BehaviourTest, SigtermExitsCleanly) {
  Client c(server_->port());
  c.Put("x");
  int status = server_->Terminate();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  server_->Restart();
  Client c2(server_->port());
  EXPECT_EQ(Field(c2.Cmd("stats"), "current-jobs-ready"), "1");
}

TEST_F(BehaviourTest, Sigusr1DrainsNewPutsButServesTheRest) {
  Client c(server_->port());
  uint64_t id = c.Put("before");
  ::kill(server_->pid(), SIGUSR1);
  // The signal arrives asynchronously: poll stats until it shows.
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (Field(c.Cmd("stats"), "draining") != "true") {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "drain mode never started";
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(c.Cmd("put 0 0 10 5\r\nafter"), "DRAINING\r\n");
  EXPECT_EQ(Number(c.Cmd("reserve")), id);
  EXPECT_EQ(c.Cmd("delete " + std::to_string(id)), "DELETED\r\n");
}

TEST_F(BehaviourTest, SigtermIsNotHeldUpByABlockedReserve) {
  Client idle_worker(server_->port());
  idle_worker.Send("reserve\r\n");
  EXPECT_TRUE(idle_worker.Silent(100ms));
  auto start = std::chrono::steady_clock::now();
  int status = server_->Terminate();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

TEST_F(BehaviourTest, SigtermAnswersInFlightPutsAndLosesNoneItAcknowledged) {
  Client c(server_->port());
  std::string burst;
  for (int i = 0; i < 2000; ++i) burst += "put 0 0 10 4\r\njob!\r\n";
  c.Send(burst);
  ::kill(server_->pid(), SIGTERM);
  std::vector<uint64_t> acked;
  int draining = 0;
  try {
    for (int i = 0; i < 2000; ++i) {
      std::string r = c.Reply(5s);
      if (r.rfind("INSERTED ", 0) == 0) {
        acked.push_back(Number(r));
      } else {
        ASSERT_EQ(r, "DRAINING\r\n");
        ++draining;
      }
    }
  } catch (const std::exception&) {
    // The connection may close once the server stops reading new commands.
  }
  int status = server_->Terminate();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  server_->Restart();
  Client check(server_->port());
  for (uint64_t id : acked) {
    ASSERT_EQ(Field(check.Cmd("stats-job " + std::to_string(id)), "state"), "ready") << id;
  }
  std::printf("sigterm: %zu puts acknowledged and kept, %d refused as draining\n", acked.size(),
              draining);
}

class SmallJobsTest : public BehaviourTest {
  std::vector<std::string> Extra() override { return {"--max-job-size", "10"}; }
};

TEST_F(SmallJobsTest, MaxJobSizeIsEnforcedAndReported) {
  Client c(server_->port());
  EXPECT_EQ(c.Cmd("put 0 0 10 11\r\n01234567890"), "JOB_TOO_BIG\r\n");
  EXPECT_EQ(c.Cmd("put 0 0 10 10\r\n0123456789"), "INSERTED 1\r\n");
  EXPECT_EQ(Field(c.Cmd("stats"), "max-job-size"), "10");
}

class SmallWindowTest : public BehaviourTest {
  std::vector<std::string> Extra() override { return {"--ready-window", "8"}; }
};

// Delayed jobs whose time comes while nobody reserves: far more than the
// window, they go cold as ready jobs (a fire writes nothing, so each is
// stored as ready first) and come back in beanstalkd's order, across a
// kill -9 too. Once, only the window's 8 came back: the rest were counted
// ready but stayed delayed in their rows, where no refill looks.
TEST_F(SmallWindowTest, DelayedJobsThatComeDueBeyondTheWindowAreAllReserved) {
  constexpr int kJobs = 300;
  std::set<std::pair<uint32_t, uint64_t>> order;  // (priority, id): beanstalkd's
  {
    Client c(server_->port());
    for (int i = 0; i < kJobs; ++i) {
      const uint32_t pri = static_cast<uint32_t>(i % 3);
      order.insert({pri, c.Put("due-" + std::to_string(i), pri, 1)});
    }
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (Field(c.Cmd("stats"), "current-jobs-ready") != std::to_string(kJobs) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(20ms);
    }
    ASSERT_EQ(Field(c.Cmd("stats"), "current-jobs-ready"), std::to_string(kJobs));
    // The first half reserved before the crash, the rest after it.
    for (int i = 0; i < kJobs / 2; ++i) {
      const std::string r = c.Cmd("reserve-with-timeout 5", 10s);
      ASSERT_EQ(Number(r), order.begin()->second) << i << ": " << r;
      order.erase(order.begin());
      ASSERT_EQ(c.Cmd("delete " + std::to_string(Number(r))), "DELETED\r\n");
    }
  }
  server_->Kill9();
  server_->Restart();
  Client c(server_->port());
  EXPECT_EQ(Field(c.Cmd("stats"), "current-jobs-ready"), std::to_string(order.size()));
  while (!order.empty()) {
    const std::string r = c.Cmd("reserve-with-timeout 5", 10s);
    ASSERT_EQ(Number(r), order.begin()->second) << order.size() << " left: " << r;
    order.erase(order.begin());
    ASSERT_EQ(c.Cmd("delete " + std::to_string(Number(r))), "DELETED\r\n");
  }
  EXPECT_EQ(c.Cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
}

class ConnectionLimitTest : public BehaviourTest {
  std::vector<std::string> Extra() override { return {"--max-connections", "2"}; }
};

TEST_F(ConnectionLimitTest, ConnectionsBeyondTheLimitAreClosedOthersKeepWorking) {
  Client a(server_->port());
  Client b(server_->port());
  EXPECT_EQ(a.Cmd("list-tube-used"), "USING default\r\n");
  EXPECT_EQ(b.Cmd("list-tube-used"), "USING default\r\n");
  Client refused(server_->port());
  EXPECT_TRUE(refused.Closed());
  EXPECT_EQ(a.Put("still served"), 1u);
  EXPECT_EQ(Field(b.Cmd("stats"), "current-connections"), "2");
}

class UnixSocketTest : public BehaviourTest {
  std::vector<std::string> Extra() override { return {"--beanstalk", "unix:" + dir_ + "/d.sock"}; }
};

TEST_F(UnixSocketTest, ServesOnBothTcpAndUnixSocket) {
  // Extra() replaced the TCP address; the log line still names the socket.
  EXPECT_NE(server_->log().find("beanstalk=unix:" + dir_ + "/d.sock"), std::string::npos);
  Client over_unix(dir_ + "/d.sock");
  uint64_t id = over_unix.Put("via unix");
  Client over_tcp(server_->port());
  EXPECT_EQ(Number(over_tcp.Cmd("peek " + std::to_string(id))), id);
}

// Reads a process's CPU seconds (user + system) from /proc.
double CpuSeconds(pid_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  long ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stol(field);
  }
  return static_cast<double>(ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

TEST(FdLimitTest, RunningOutOfDescriptorsNeitherSpinsNorStopsService) {
  std::string dir = MakeTempDir("delayd-fdlimit");
  Process p;
  p.Start({"/bin/sh", "-c",
           std::string("ulimit -n 48 && exec ") + DELAYD_BIN + " --data-dir " + dir +
               "/data --beanstalk 127.0.0.1:0 --max-connections 1000"},
          dir + "/log");
  int port = 0;
  for (int i = 0; i < 500 && port == 0; ++i) {
    std::smatch m;
    std::string log = ReadFile(dir + "/log");
    if (std::regex_search(log, m, std::regex(R"(beanstalk=127\.0\.0\.1:(\d+))")))
      port = std::stoi(m[1]);
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_NE(port, 0) << ReadFile(dir + "/log");
  {
    std::vector<std::unique_ptr<Client>> flood;
    for (int i = 0; i < 80; ++i) flood.push_back(std::make_unique<Client>(port));
    const double before = CpuSeconds(p.pid());
    std::this_thread::sleep_for(1s);  // a window to measure CPU in, not a wait for a condition
    EXPECT_LT(CpuSeconds(p.pid()) - before, 0.3) << "accept errors must not spin the event loop";
  }
  // With the flood gone, service resumes.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  std::string reply;
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      Client c(port);
      reply = c.Cmd("list-tube-used", 2s);
      break;
    } catch (const std::exception&) {
      std::this_thread::sleep_for(50ms);
    }
  }
  EXPECT_EQ(reply, "USING default\r\n");
  p.Stop(SIGTERM);
  std::filesystem::remove_all(dir);
}

TEST(ServerStartTest, UnusableAddressFailsLoudly) {
  std::string dir = MakeTempDir("delayd-start");
  Process p;
  p.Start({DELAYD_BIN, "--data-dir", dir + "/data", "--beanstalk", "256.1.1.1:80"}, dir + "/log");
  int status = p.Stop(0, 10s);  // signal 0: just wait for it to exit by itself
  (void)status;
  std::string log = ReadFile(dir + "/log");
  EXPECT_NE(log.find("cannot start"), std::string::npos) << log;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace delayd::testing
