// A session over one end of a socket pair, an engine over MemoryStore, and
// the test on the other end: what a client sees, with the store's commits
// running on the same loop as the session (so a reply that waits for one is
// really waiting).
#include "protocol/beanstalk/session.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <chrono>

#include "store/testing/memory_store.h"

namespace delayd::beanstalk {
namespace {

namespace asio = boost::asio;

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(engine_.Recover().ok());
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    peer_ = fds[1];
    Session::Socket socket(io_, asio::generic::stream_protocol(AF_UNIX, 0), fds[0]);
    session_ = std::make_shared<Session>(std::move(socket), ctx_);
    session_->Start();
  }
  void TearDown() override {
    if (!closed_) session_->Close();
    io_.poll();
    ::close(peer_);
  }
  void Send(std::string_view bytes) {
    ASSERT_EQ(::write(peer_, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }
  // Runs the loop until `n` bytes have come back (10 s at most) or the
  // session closed the connection; returns what came.
  std::string Receive(size_t n) {
    std::string got;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
      io_.restart();
      io_.run_for(std::chrono::milliseconds(2));
      pollfd p{peer_, POLLIN, 0};
      while (::poll(&p, 1, 0) == 1) {
        char buf[4096];
        const ssize_t r = ::read(peer_, buf, sizeof buf);
        if (r <= 0) return got + (r == 0 ? "<EOF>" : "<ERROR>");
        got.append(buf, static_cast<size_t>(r));
      }
    }
    return got;
  }
  std::string Exchange(std::string_view send, const std::string& want) {
    Send(send);
    return Receive(want.size());
  }

  asio::io_context io_;
  store::testing::MemoryStore store_{
      [this](std::function<void()> f) { asio::post(io_, std::move(f)); }};
  ManualClock clock_;
  engine::Engine engine_{store_, clock_, engine::EngineOptions{}, [](int64_t) {}};
  ServerCounters counters_;
  ProcessInfo process_;
  bool closed_ = false;
  SessionContext ctx_{.engine = engine_,
                      .clock = clock_,
                      .counters = counters_,
                      .process = process_,
                      .max_job_size = 10,
                      .store_writes = [] { return uint64_t{0}; },
                      .on_closed = [this](Session*) { closed_ = true; }};
  int peer_ = -1;
  std::shared_ptr<Session> session_;
};

// peek-ready, parsed with the puts, runs only once they are committed: run
// at once it would answer NOT_FOUND.
TEST_F(SessionTest, PipelinedPutsAnswerInOrderAndTheNextCommandSeesThem) {
  const std::string want = "INSERTED 1\r\nINSERTED 2\r\nFOUND 1 1\r\na\r\n";
  EXPECT_EQ(Exchange("put 1 0 10 1\r\na\r\nput 2 0 10 1\r\nb\r\npeek-ready\r\n", want), want);
}

TEST_F(SessionTest, InputSplitAtEveryByteReadsTheSame) {
  const std::string input = "put 1 0 10 5\r\nhello\r\nreserve-with-timeout 0\r\ndelete 1\r\n";
  for (char c : input) {
    Send(std::string(1, c));
    io_.restart();
    io_.run_for(std::chrono::milliseconds(1));
  }
  const std::string want = "INSERTED 1\r\nRESERVED 1 5\r\nhello\r\nDELETED\r\n";
  EXPECT_EQ(Receive(want.size()), want);
}

TEST_F(SessionTest, FramingErrorsAreAnsweredAndTheConnectionGoesOn) {
  // A body longer than --max-job-size is read and thrown away first.
  std::string want = "JOB_TOO_BIG\r\n";
  EXPECT_EQ(Exchange("put 0 0 10 11\r\n0123456789X\r\n", want), want);
  // A body not followed by CRLF where its size says.
  want = "EXPECTED_CRLF\r\n";
  EXPECT_EQ(Exchange("put 0 0 10 3\r\nabcd\r\n", want), want);
  // A command line longer than 224 bytes.
  want = "BAD_FORMAT\r\n";
  EXPECT_EQ(Exchange(std::string(300, 'x') + "\r\n", want), want);
  want = "UNKNOWN_COMMAND\r\n";
  EXPECT_EQ(Exchange("frobnicate\r\n", want), want);
  want = "INSERTED 1\r\n";
  EXPECT_EQ(Exchange("put 0 0 10 2\r\nok\r\n", want), want) << "none of it stuck";
}

TEST_F(SessionTest, AFailedPutIsAnsweredAndLeavesNoJob) {
  store_.failing = true;
  std::string want = "INTERNAL_ERROR\r\n";
  EXPECT_EQ(Exchange("put 0 0 10 1\r\nx\r\n", want), want);
  store_.failing = false;
  want = "NOT_FOUND\r\n";
  EXPECT_EQ(Exchange("peek-ready\r\n", want), want);
}

TEST_F(SessionTest, QuitClosesOnceEarlierRepliesHaveLeft) {
  const std::string want = "INSERTED 1\r\n<EOF>";
  EXPECT_EQ(Exchange("put 0 0 10 1\r\nx\r\nquit\r\nput 0 0 10 1\r\ny\r\n", want), want);
  EXPECT_TRUE(closed_);
  EXPECT_EQ(engine_.Stats().total_jobs, 1u) << "nothing after quit runs";
}

}  // namespace
}  // namespace delayd::beanstalk
