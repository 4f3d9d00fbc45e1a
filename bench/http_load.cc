// HTTP benchmarks of delayd, loopback only, each stopping by itself.
//
//   http_load fill    --port P [--jobs 1000000] [--from 0]
//       submits keyed jobs (order-<i>) due 2 h to 30 d ahead (bench/console)
//   http_load submit  --port P [--conns 4] [--batch 1000] [--jobs 200000]
//       submits jobs (delays spread over an hour) over keep-alive
//       connections; prints jobs/s.
//   http_load deliver --port P [--jobs 100000] [--lead-ms 2000]
//       runs a local receiver, submits push jobs due over one second
//       `lead-ms` from now, and prints delivery throughput and lateness
//       (receipt time minus Delayd-Due-At) p50/p99/max.
//
//   http_load timers --port P [--timers 100000] [--period hour|minute]
//                    [--minutes 5]
//       creates timers (hourly, spread over the seconds of the hour; or
//       every minute) whose jobs push to a local receiver, and prints the
//       fire lateness over whole minutes (receipt time minus Delayd-Due-At,
//       which is the fire time), with the machine's stalls meanwhile.
//
// The receiver here is one epoll thread that answers 200 at once, as a
// well-built target would; the tests' receiver (a thread per connection,
// programmable answers) cost more CPU than delayd on this 2-core machine
// and so measured itself.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/time_format.h"
#include "load_http.h"
#include "load_util.h"

using namespace std::chrono;
using namespace delayd::bench;

namespace {

// A push target on 127.0.0.1: records when each request arrived and its
// Delayd-Due-At, and answers 200 with an empty body.
class FastReceiver {
 public:
  using Hit = delayd::bench::Hit;

  FastReceiver() {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(listen_fd_, 4096);
    socklen_t len = sizeof a;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    epoll_fd_ = epoll_create1(0);
    Watch(listen_fd_);
    thread_ = std::thread([this] { Run(); });
  }
  ~FastReceiver() {
    stopping_ = true;
    thread_.join();
    for (auto& [fd, buf] : conns_) close(fd);
    close(listen_fd_);
    close(epoll_fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/hook"; }
  size_t count() const { return count_; }
  std::vector<Hit> hits() {
    std::lock_guard lock(mu_);
    return hits_;
  }

 private:
  void Watch(int fd) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
  void Run() {
    epoll_event events[256];
    while (!stopping_) {
      int n = epoll_wait(epoll_fd_, events, 256, 50);
      for (int i = 0; i < n; ++i) {
        int fd = events[i].data.fd;
        if (fd == listen_fd_) {
          for (int c; (c = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK)) >= 0;) {
            int one = 1;
            setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            conns_[c];
            Watch(c);
          }
          continue;
        }
        Read(fd);
      }
    }
  }
  void Read(int fd) {
    std::string& buf = conns_[fd];
    char tmp[65536];
    for (;;) {
      ssize_t got = recv(fd, tmp, sizeof tmp, 0);
      if (got == 0 || (got < 0 && errno != EAGAIN)) {
        close(fd);
        conns_.erase(fd);
        return;
      }
      if (got < 0) break;
      buf.append(tmp, static_cast<size_t>(got));
    }
    const int64_t at_us =
        duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
    std::string replies;
    size_t pos = 0;
    std::vector<Hit> got;
    for (;;) {
      size_t end = buf.find("\r\n\r\n", pos);
      if (end == std::string::npos) break;
      std::string_view head(buf.data() + pos, end - pos);
      size_t body = HeaderNumber(head, "content-length:");
      if (buf.size() < end + 4 + body) break;
      std::string_view due = Header(head, "delayd-due-at:");
      got.push_back({at_us, delayd::ParseRfc3339(due).value_or(0)});
      replies += "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
      pos = end + 4 + body;
    }
    buf.erase(0, pos);
    if (!replies.empty()) {
      // Replies are small; a full socket buffer here would be a bench bug.
      send(fd, replies.data(), replies.size(), MSG_NOSIGNAL);
      std::lock_guard lock(mu_);
      hits_.insert(hits_.end(), got.begin(), got.end());
      count_ += got.size();
    }
  }
  static std::string_view Header(std::string_view head, std::string_view name) {
    for (size_t at = 0; (at = head.find("\r\n", at)) != std::string_view::npos;) {
      at += 2;
      if (head.size() - at > name.size() &&
          strncasecmp(head.data() + at, name.data(), name.size()) == 0) {
        std::string_view v = head.substr(at + name.size());
        v = v.substr(0, v.find("\r\n"));
        while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
        return v;
      }
    }
    return {};
  }
  static size_t HeaderNumber(std::string_view head, std::string_view name) {
    std::string_view v = Header(head, name);
    return v.empty() ? 0 : std::stoul(std::string(v));
  }

  int listen_fd_ = -1, epoll_fd_ = -1, port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> count_{0};
  std::unordered_map<int, std::string> conns_;  // receiver thread only
  std::mutex mu_;
  std::vector<Hit> hits_;
  std::thread thread_;
};

// A thread that asks to wake at every millisecond and records each time it
// woke more than kStallUs late. While the timers benchmark waits, it and
// delayd use a few percent of one CPU, so such a stall means the probe's CPU
// was taken away (on this shared VM: by the hypervisor, seen as steal). Fires
// in flight during a stall are counted apart. A stall of the other CPU goes
// unseen, so this undercounts.
class StallProbe {
 public:
  static constexpr int64_t kStallUs = 5000;
  struct Stall {
    int64_t from_us, to_us;  // wall clock
  };

  StallProbe() : thread_([this] { Run(); }) {}
  ~StallProbe() {
    stopping_ = true;
    thread_.join();
  }
  std::vector<Stall> stalls() {
    std::lock_guard lock(mu_);
    return stalls_;
  }

 private:
  void Run() {
    timespec at;
    clock_gettime(CLOCK_MONOTONIC, &at);
    while (!stopping_) {
      at.tv_nsec += 1'000'000;
      if (at.tv_nsec >= 1'000'000'000) {
        at.tv_nsec -= 1'000'000'000;
        ++at.tv_sec;
      }
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, nullptr);
      timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      const int64_t late_us =
          (now.tv_sec - at.tv_sec) * 1'000'000 + (now.tv_nsec - at.tv_nsec) / 1000;
      if (late_us > kStallUs) {
        const int64_t wall_us =
            duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
        std::lock_guard lock(mu_);
        stalls_.push_back({wall_us - late_us, wall_us});
        at = now;  // no catching up on missed wake-ups
      }
    }
  }

  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::vector<Stall> stalls_;
  std::thread thread_;
};

// With --dump FILE: one line per delivery (due ms, arrival us), to look at
// lateness over time.
void Dump(const char* path, const std::vector<FastReceiver::Hit>& hits) {
  if (path == nullptr) return;
  if (FILE* f = fopen(path, "w")) {
    for (const auto& h : hits) fprintf(f, "%lld %lld\n", (long long)h.due_ms, (long long)h.at_us);
    fclose(f);
  }
}

int64_t NowMs() {
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: http_load fill|submit|deliver|timers --port P [...]\n");
    return 2;
  }
  std::string mode = argv[1];
  const int port = static_cast<int>(Arg(argc, argv, "--port", 8080));
  if (mode == "submit") {
    const long jobs = Arg(argc, argv, "--jobs", 200000);
    const long batch = Arg(argc, argv, "--batch", 1000);
    const long conns = Arg(argc, argv, "--conns", 4);
    double rate = Post(port, "/v1/topics/bench/jobs", jobs, batch, conns, [](long i) {
      // Delays spread over an hour, as design.md asks of store benchmarks.
      return "{\"delay\":" + std::to_string(1000 + (i * 7919) % 3'600'000) +
             ",\"body\":{\"order\":" + std::to_string(i) + "}}";
    });
    printf("submit jobs=%ld batch=%ld conns=%ld jobs_per_s=%.0f\n", jobs, batch, conns, rate);
    return 0;
  }
  if (mode == "fill") {
    // Keyed jobs ("order-<i>") due 2 hours to 30 days ahead: a large store
    // for bench/console's list and search latencies.
    const long jobs = Arg(argc, argv, "--jobs", 1'000'000);
    const long from = Arg(argc, argv, "--from", 0);
    double rate = Post(port, "/v1/topics/orders/jobs", jobs, 1000, 2, [from](long i) {
      const long n = from + i;
      return "{\"key\":\"order-" + std::to_string(n) +
             "\",\"delay\":" + std::to_string(7'200'000 + (n * 7919) % 2'584'800'000L) +
             ",\"body\":{\"order\":" + std::to_string(n) + "}}";
    });
    printf("fill jobs=%ld jobs_per_s=%.0f\n", jobs, rate);
    return 0;
  }
  if (mode == "deliver") {
    const long jobs = Arg(argc, argv, "--jobs", 100000);
    const long lead_ms = Arg(argc, argv, "--lead-ms", 3000);
    FastReceiver rx;
    const long concurrency = Arg(argc, argv, "--concurrency", 0);
    std::string settings =
        "{\"target\":{\"url\":\"" + rx.url() + "\"}" +
        (concurrency ? ",\"max_concurrency\":" + std::to_string(concurrency) : "") + "}";
    PutTopic(port, "push", settings);
    const int64_t base =
        duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count() + lead_ms;
    double submit_rate = Post(port, "/v1/topics/push/jobs", jobs, 1000, 4, [&](long i) {
      // Due times spread evenly over one second.
      return "{\"run_at\":\"" + delayd::FormatRfc3339Ms(base + i * 1000 / jobs) +
             "\",\"body\":" + std::to_string(i) + "}";
    });
    const double steal_pct = WaitForDeliveries([&] { return rx.count(); }, jobs, base);
    if (steal_pct < 0) return 1;
    std::vector<FastReceiver::Hit> got = rx.hits();
    Dump(ArgText(argc, argv, "--dump"), got);
    PrintDelivery(jobs, submit_rate, Measure(got), steal_pct);
    return 0;
  }
  if (mode == "timers") {
    // N timers whose jobs push to the receiver. With --period hour (the
    // default) timer i fires hourly at second i of the hour (mod 3600), so
    // fires spread over the hour; with minute, every minute at second i % 60
    // (N/60 fires at each whole second). Lateness is taken over one whole
    // minute of fires.
    const long timers = Arg(argc, argv, "--timers", 100000);
    const std::string period =
        ArgText(argc, argv, "--period") ? ArgText(argc, argv, "--period") : "hour";
    const bool hourly = period != "minute";
    FastReceiver rx;
    PutTopic(port, "tb", "{\"target\":{\"url\":\"" + rx.url() + "\"}}");
    double create_rate = Post(port, "/v1/timers", timers, 1, 4, [hourly](long i) {
      const std::string schedule =
          hourly ? std::to_string(i % 60) + " " + std::to_string(i / 60 % 60) + " * * * *"
                 : std::to_string(i % 60) + " * * * * *";
      return "{\"name\":\"bench-" + std::to_string(i) + "\",\"topic\":\"tb\",\"schedule\":\"" +
             schedule + "\",\"template\":{\"body\":" + std::to_string(i) + "}}";
    });
    // Measure whole minutes from the first that starts 5 s from now or later.
    const long minutes = Arg(argc, argv, "--minutes", 5);
    const int64_t from = (NowMs() + 5000 + 59'999) / 60'000 * 60'000;
    const int64_t to = from + minutes * 60'000;
    long want = timers * minutes;
    if (hourly) {
      want = 0;
      for (long m = 0; m < minutes; ++m) {
        const long minute = (from / 60'000 + m) % 60;
        for (long i = 0; i < timers; ++i) want += i / 60 % 60 == minute;
      }
    }
    std::this_thread::sleep_until(system_clock::time_point(milliseconds(from)));
    const auto steal0 = CpuSteal();
    std::vector<StallProbe::Stall> stalls;
    {
      StallProbe probe;
      std::this_thread::sleep_until(system_clock::time_point(milliseconds(to + 2000)));
      stalls = probe.stalls();
    }
    const double steal_pct = StealPct(steal0, CpuSteal());
    std::vector<FastReceiver::Hit> window, apart;
    int64_t longest_us = 0;
    for (const auto& s : stalls) longest_us = std::max(longest_us, s.to_us - s.from_us);
    for (const auto& h : rx.hits()) {
      if (h.due_ms < from || h.due_ms >= to) continue;
      window.push_back(h);
      // In flight from its due time to its arrival: did the machine stop meanwhile?
      const bool stalled = std::any_of(stalls.begin(), stalls.end(), [&](const auto& s) {
        return s.from_us < h.at_us && s.to_us > h.due_ms * 1000;
      });
      if (!stalled) apart.push_back(h);
    }
    Dump(ArgText(argc, argv, "--dump"), window);
    const Lateness l = Measure(window);
    const Lateness a = Measure(apart);
    printf(
        "timers=%ld period=%s create_per_s=%.0f minutes=%ld fires=%zu (want %ld) fire_lateness_ms "
        "p50=%.2f p99=%.2f max=%.2f early=%ld cpu_steal=%.1f%% machine_stalls=%zu (longest %.1f "
        "ms) p99_apart_from_stalls=%.2f (%zu fires in flight during one)\n",
        timers, hourly ? "hour" : "minute", create_rate, minutes, window.size(), want, l.p50_ms,
        l.p99_ms, l.max_ms, l.early, steal_pct, stalls.size(), longest_us / 1000.0, a.p99_ms,
        window.size() - apart.size());
    return window.size() == static_cast<size_t>(want) ? 0 : 1;
  }
  fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
