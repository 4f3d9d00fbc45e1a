// Runs the same command sequences against beanstalkd 1.12 (from Debian) and
// delayd, and requires byte-identical replies, except for values that must
// differ between two servers (pid, uptime, cpu time, version, instance id,
// binlog figures, connection totals).
#include <gtest/gtest.h>

#include <deque>
#include <filesystem>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "support/client.h"
#include "support/process.h"

namespace delayd::testing {
namespace {

std::string Normalize(std::string reply) {
  static const std::regex kVarying(
      R"(\n(pid|version|rusage-utime|rusage-stime|uptime|id|binlog-[a-z-]+|total-connections|age|time-left): [^\n]*)");
  if (reply.rfind("OK ", 0) == 0) {
    reply = std::regex_replace(reply, kVarying, "\n$1: *");
    reply = "OK *" + reply.substr(reply.find("\r\n"));
  }
  return reply;
}

struct Step {
  std::string send;
  int replies = 1;  // how many replies the bytes produce
};

class CompatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!BeanstalkdServer::available())
      GTEST_SKIP() << "beanstalkd is not installed (scripts/setup installs it)";
    dir_ = MakeTempDir("delayd-compat");
    delayd_ = std::make_unique<DelaydServer>(dir_ + "/data");
    beanstalkd_ = std::make_unique<BeanstalkdServer>();
  }
  // Sends each step to both servers over one connection each and compares.
  void Compare(const std::vector<Step>& steps) {
    Client a(beanstalkd_->port());
    Client b(delayd_->port());
    for (const Step& s : steps) {
      a.Send(s.send);
      b.Send(s.send);
      for (int i = 0; i < s.replies; ++i) {
        std::string ra, rb;
        try {
          ra = Normalize(a.Reply());
        } catch (const std::exception& e) {
          FAIL() << "beanstalkd: " << e.what() << "; after sending: " << s.send.substr(0, 80);
        }
        try {
          rb = Normalize(b.Reply());
        } catch (const std::exception& e) {
          FAIL() << "delayd: " << e.what() << "; after sending: " << s.send.substr(0, 80)
                 << "; beanstalkd said " << ra;
        }
        ASSERT_EQ(ra, rb) << "after sending: " << s.send.substr(0, 80);
      }
    }
  }
  void TearDown() override {
    delayd_.reset();
    beanstalkd_.reset();
    if (!dir_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
    }
  }
  std::string dir_;
  std::unique_ptr<DelaydServer> delayd_;
  std::unique_ptr<BeanstalkdServer> beanstalkd_;
};

std::string Put(int pri, int delay, int ttr, const std::string& body) {
  return "put " + std::to_string(pri) + " " + std::to_string(delay) + " " + std::to_string(ttr) +
         " " + std::to_string(body.size()) + "\r\n" + body + "\r\n";
}

TEST_F(CompatTest, EveryCommandAnswersAsBeanstalkdDoes) {
  Compare({
      {"list-tubes\r\n"},
      {"list-tube-used\r\n"},
      {"list-tubes-watched\r\n"},
      {"stats\r\n"},
      {Put(5, 0, 10, "hello")},
      {Put(1, 0, 10, "urgent")},
      {Put(2000, 0, 10, "")},
      {"peek-ready\r\n"},
      {"peek 1\r\n"},
      {"peek 2\r\n"},
      {"stats-job 1\r\n"},
      {"stats-tube default\r\n"},
      {"use work\r\n"},
      {"list-tube-used\r\n"},
      {Put(3, 0, 0, "ttr zero becomes one")},
      {"stats-job 4\r\n"},
      {"watch work\r\n"},
      {"watch work\r\n"},
      {"watch other\r\n"},
      {"list-tubes-watched\r\n"},
      {"ignore other\r\n"},
      {"ignore nothere\r\n"},
      {"list-tubes\r\n"},
      {"reserve\r\n"},
      {"stats-job 2\r\n"},
      {"touch 2\r\n"},
      {"release 2 7 0\r\n"},
      {"reserve-with-timeout 0\r\n"},
      {"bury 2 9\r\n"},
      {"peek-buried\r\n"},
      {"use default\r\n"},
      {"peek-buried\r\n"},
      {"stats-job 2\r\n"},
      {"kick 5\r\n"},
      {"stats-job 2\r\n"},
      {"reserve-job 3\r\n"},
      {"reserve-job 3\r\n"},
      {"delete 3\r\n"},
      {"delete 3\r\n"},
      {Put(0, 100, 10, "later")},
      {"peek-delayed\r\n"},
      {"stats-job 5\r\n"},
      {"kick-job 5\r\n"},
      {"kick-job 5\r\n"},
      {Put(0, 200, 10, "much later")},
      {"kick 1\r\n"},
      {"kick 1\r\n"},
      {"pause-tube default 0\r\n"},
      {"pause-tube nothere 10\r\n"},
      {"stats-tube default\r\n"},
      {"stats-tube nothere\r\n"},
      {"stats-tube work\r\n"},
      {"stats\r\n"},
      {"ignore default\r\n"},
      {"ignore work\r\n"},
  });
}

TEST_F(CompatTest, EveryErrorAnswersAsBeanstalkdDoes) {
  Compare({
      {"\r\n"},
      {"foo\r\n"},
      {"PUT 1 2 3 4\r\n"},
      {"reserve \r\n"},
      {"stats x\r\n"},
      {"put -1 0 1 1\r\nx\r\n", 2},
      {"put 1 0 1\r\n"},
      {"put 1 0 1 3 x\r\nabc\r\n", 2},
      {"put 4294967296 0 1 1\r\nx\r\n", 2},
      {"put 1 0 1 3\r\nabcd\r\n", 1},
      {"\nlist-tube-used\r\n"},
      {"put 1 0 1 3\r\nab\r\n\r\n", 1},
      {"put 0 0 1 65536\r\n" + std::string(65536, 'z') + "\r\nlist-tube-used\r\n", 2},
      {"put 0 0 1 99999999999\r\n"},
      {"peek\r\n"},
      {"peek x\r\n"},
      {"peek 1 \r\n"},
      {"peek -1\r\n"},
      {"peek 18446744073709551616\r\n"},
      {"peek 99\r\n"},
      {"delete\r\n"},
      {"delete 99\r\n"},
      {"delete 1 x\r\n"},
      {"release 99 1 1\r\n"},
      {"release 1 1\r\n"},
      {"bury 99 1\r\n"},
      {"touch 99\r\n"},
      {"kick\r\n"},
      {"kick x\r\n"},
      {"kick-job 99\r\n"},
      {"stats-job 99\r\n"},
      {"reserve-job 99\r\n"},
      {"use -bad\r\n"},
      {"use " + std::string(201, 'a') + "\r\n"},
      {"use " + std::string(200, 'a') + "\r\n"},
      {"use sp ace\r\n"},
      {"watch\r\n"},
      {"ignore default\r\n"},
      {"pause-tube\r\n"},
      {"pause-tube default\r\n"},
      {"pause-tube default x\r\n"},
      {"pause-tube -x 1\r\n"},
      {"stats-tube -x\r\n"},
      {std::string("a\0b\r\n", 5)},
      {std::string(222, 'x') + "\r\n"},
      {std::string(223, 'x') + "\r\nlist-tube-used\r\n"},
      {std::string(300, 'x') + "\r\nlist-tube-used\r\n", 2},
      {"ab\rcd" + std::string(230, 'y') + "\r\nlist-tube-used\r\n", 2},
      {"reserve-with-timeout x\r\n"},
      {"stats\r\n"},
  });
}

TEST_F(CompatTest, PipelinedCommandsAnswerInOrder) {
  std::string burst;
  for (int i = 0; i < 50; ++i) burst += Put(i % 3, 0, 10, "job-" + std::to_string(i));
  burst += "stats-tube default\r\npeek-ready\r\n";
  for (int i = 0; i < 10; ++i) burst += "reserve\r\n";
  burst += "stats\r\n";
  Compare({{burst, 50 + 2 + 10 + 1}});
}

// Issue 34: beyond a window of 8 ready or buried jobs per tube, delayd
// keeps them in the store and reads them back in order. 100,000 jobs of
// mixed priorities, reserved, released (to new priorities), buried and
// deleted, with kicks, peeks and counts: every reply as beanstalkd's. The
// script is pipelined, each reserve's id foretold by a model of beanstalkd's
// order that beanstalkd's own replies check.
TEST_F(CompatTest, ABacklogBeyondTheWindowsComesBackInBeanstalkdsOrder) {
  delayd_.reset();
  delayd_ = std::make_unique<DelaydServer>(dir_ + "/data",
                                           std::vector<std::string>{"--ready-window", "8"});
  Client a(beanstalkd_->port());
  Client b(delayd_->port());
  // Sends `bytes` to both and compares the `replies` replies; beanstalkd's
  // come back for the model to check.
  auto both = [&](const std::string& bytes, int replies) {
    a.Send(bytes);
    b.Send(bytes);
    std::vector<std::string> out;
    for (int i = 0; i < replies; ++i) {
      std::string ra = a.Reply(std::chrono::seconds(30));
      std::string rb = b.Reply(std::chrono::seconds(30));
      EXPECT_EQ(Normalize(ra), Normalize(rb)) << "reply " << i << " of a batch";
      out.push_back(std::move(ra));
    }
    return out;
  };
  constexpr int kJobs = 100'000;
  const uint32_t kPriorities[] = {0, 1, 7, 1023, 1024, 4294967295u};
  uint64_t seed = 34;
  auto next = [&seed] {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(seed >> 33);
  };
  std::set<std::pair<uint32_t, uint64_t>> ready;  // the model
  std::deque<std::pair<uint32_t, uint64_t>> buried;
  for (int start = 0; start < kJobs; start += 1000) {
    std::string batch;
    for (int i = start; i < start + 1000; ++i) {
      const uint32_t pri = kPriorities[next() % 6];
      const std::string body = "job-" + std::to_string(i);
      batch += "put " + std::to_string(pri) + " 0 60 " + std::to_string(body.size()) + "\r\n" +
               body + "\r\n";
      ready.insert({pri, static_cast<uint64_t>(i + 1)});
    }
    auto replies = both(batch, 1000);
    ASSERT_EQ(replies.back(), "INSERTED " + std::to_string(start + 1000) + "\r\n");
    if (HasFailure()) return;
  }
  int batches = 0;
  while (!ready.empty() || !buried.empty()) {
    std::string batch;
    int replies = 0;
    std::vector<uint64_t> foretold;  // each reserve's id, 0 for TIMED_OUT
    for (int i = 0; i < 200; ++i) {
      const uint32_t roll = next() % 100;
      if (roll < 8 || ready.empty()) {
        const uint32_t bound = 1 + next() % 20;
        batch += "kick " + std::to_string(bound) + "\r\n";
        ++replies;
        for (uint32_t k = 0; k < bound && !buried.empty(); ++k) {
          ready.insert(buried.front());
          buried.pop_front();
        }
        continue;
      }
      batch += "reserve-with-timeout 0\r\n";
      ++replies;
      auto [pri, id] = *ready.begin();
      ready.erase(ready.begin());
      foretold.push_back(id);
      const std::string ids = std::to_string(id);
      if (roll < 50) {
        batch += "delete " + ids + "\r\n";
      } else if (roll < 80) {
        const uint32_t to = kPriorities[next() % 6];
        batch += "release " + ids + " " + std::to_string(to) + " 0\r\n";
        ready.insert({to, id});
      } else {
        batch += "bury " + ids + " " + std::to_string(pri) + "\r\n";
        buried.push_back({pri, id});
      }
      ++replies;
    }
    batch += "peek-ready\r\npeek-buried\r\nstats-tube default\r\n";
    replies += 3;
    auto got = both(batch, replies);
    if (HasFailure()) return;
    size_t f = 0;
    for (const std::string& r : got) {
      if (r.rfind("RESERVED ", 0) != 0) continue;
      ASSERT_LT(f, foretold.size());
      ASSERT_EQ(r.substr(9, r.find(' ', 9) - 9), std::to_string(foretold[f++]))
          << "the model foretold another job than beanstalkd reserved";
    }
    ASSERT_EQ(f, foretold.size());
    ++batches;
  }
  EXPECT_GT(batches, 100);
}

}  // namespace
}  // namespace delayd::testing
