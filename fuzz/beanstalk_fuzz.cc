// libFuzzer target: a beanstalk protocol connection. The input is what a
// client sends, in one stream (command lines, bodies, pipelining, garbage);
// a session on a fresh engine serves it over a socket pair until the client
// side has sent everything and hung up. Any input must be answered or
// refused without a crash, a leak or undefined behaviour.
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/harness.h"
#include "protocol/beanstalk/session.h"

using namespace delayd;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::ResetScratch();
  fuzz::Core core;
  if (!core.Open().ok()) abort();
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0) abort();
  beanstalk::ServerCounters counters;
  beanstalk::ProcessInfo process{.version = "fuzz", .instance_id = "0000000000000000"};
  bool closed = false;
  beanstalk::SessionContext ctx{*core.engine,
                                core.clock,
                                counters,
                                process,
                                65535,
                                [] { return uint64_t{0}; },
                                [&](beanstalk::Session*) { closed = true; }};
  auto session = std::make_shared<beanstalk::Session>(
      beanstalk::Session::Socket(core.io, boost::asio::generic::stream_protocol(AF_UNIX, 0),
                                 fds[0]),
      ctx);
  session->Start();
  // Feed the input as the socket takes it, read every reply, then hang up.
  size_t sent = 0;
  bool hung_up = false;
  char sink[65536];
  core.RunUntil([&] {
    if (sent < size) {
      ssize_t n = send(fds[1], data + sent, size - sent, MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<size_t>(n);
    } else if (!hung_up) {
      shutdown(fds[1], SHUT_WR);
      hung_up = true;
    }
    while (recv(fds[1], sink, sizeof sink, 0) > 0) {
    }
    return closed;
  });
  // A reserve that waits for a job never comes back by itself: close it.
  if (!closed) session->Close();
  core.RunUntil([&] { return closed; });
  session.reset();
  close(fds[1]);
  return 0;
}
