// beanstalk_load: a load generator for any beanstalk protocol server
// (delayd or beanstalkd), used by bench/run. It talks only to 127.0.0.1 and
// stops by itself after a fixed number of jobs or a deadline.
//
// --port takes a comma-separated list (the nodes of a delayd cluster) for put,
// drain and lateness: connection i goes to port i mod n, and the lateness
// producer to the first.
//
//   beanstalk_load put      --port P [--conns 4] [--jobs N] [--pipeline 100] [--size 64]
//                           [--delay-min S] [--delay-max S]
//   beanstalk_load drain    --port P [--conns 4] [--jobs N] [--pipeline 100]
//   beanstalk_load bury     --port P [--conns 4] [--jobs N] [--pipeline 100]
//   beanstalk_load lateness --port P [--jobs 100000] [--spread 10] [--consumers 4]
//                           [--pid PID[,PID...]] [--serial 1]
//   beanstalk_load rss      --pid PID
//   beanstalk_load freeport
//   beanstalk_load wait     --port P [--timeout-s 10]
//
// Each prints one line of key=value figures.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int64_t WallMicros() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

// A blocking connection that reads whole replies.
class Conn {
 public:
  explicit Conn(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      throw std::runtime_error("connect failed");
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Conn() { ::close(fd_); }
  // Ends a Reply() blocked in another thread: it throws.
  void Shutdown() { ::shutdown(fd_, SHUT_RDWR); }
  void Send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send failed");
      off += static_cast<size_t>(n);
    }
  }
  // One reply line (without CRLF); for RESERVED/FOUND also its body.
  std::string Reply(std::string* body = nullptr) {
    size_t eol;
    while ((eol = buf_.find("\r\n", pos_)) == std::string::npos) Fill();
    std::string line = buf_.substr(pos_, eol - pos_);
    pos_ = eol + 2;
    if (line.rfind("RESERVED ", 0) == 0 || line.rfind("FOUND ", 0) == 0) {
      size_t n = std::stoul(line.substr(line.rfind(' ') + 1));
      while (buf_.size() - pos_ < n + 2) Fill();
      if (body) *body = buf_.substr(pos_, n);
      pos_ += n + 2;
    }
    if (pos_ > (1 << 20)) {
      buf_.erase(0, pos_);
      pos_ = 0;
    }
    return line;
  }

 private:
  void Fill() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 60'000) <= 0) throw std::runtime_error("no reply within 60 s");
    char tmp[65536];
    ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) throw std::runtime_error("connection closed");
    buf_.append(tmp, static_cast<size_t>(n));
  }
  int fd_;
  std::string buf_;
  size_t pos_ = 0;
};

std::map<std::string, std::string> ParseFlags(int argc, char** argv) {
  std::map<std::string, std::string> f;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0) throw std::runtime_error("bad flag " + k);
    f[k.substr(2)] = argv[i + 1];
  }
  return f;
}

int64_t Get(const std::map<std::string, std::string>& f, const std::string& k, int64_t def) {
  auto it = f.find(k);
  return it == f.end() ? def : std::stoll(it->second);
}

// The ports of --port: "P" or "P1,P2,...".
std::vector<int> Ports(const std::map<std::string, std::string>& f) {
  std::vector<int> out;
  auto it = f.find("port");
  std::istringstream in(it == f.end() ? "11300" : it->second);
  for (std::string p; std::getline(in, p, ',');) out.push_back(std::stoi(p));
  if (out.empty()) throw std::runtime_error("--port names no port");
  return out;
}

// Server CPU seconds (user + system) from /proc/PID/stat.
double CpuSeconds(int64_t pid) {
  if (pid <= 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(in)), {});
  std::istringstream rest(s.substr(s.rfind(')') + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stol(field);
    if (i == 15) stime = std::stol(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The CPU seconds of every server in --pid (a list like --port: the nodes
// of a cluster), summed; 0 without one.
double ServersCpuSeconds(const std::map<std::string, std::string>& f) {
  auto it = f.find("pid");
  if (it == f.end()) return 0;
  double sum = 0;
  std::istringstream in(it->second);
  for (std::string p; std::getline(in, p, ',');) sum += CpuSeconds(std::stoll(p));
  return sum;
}

long RssKib(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// The p-th quantile of sorted `v`, 0 when empty.
double Quantile(const std::vector<double>& v, double p) {
  if (v.empty()) return 0.0;
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// Runs `batch(conn, n, failures)` on `conns` connections in parallel until
// `jobs` jobs are done, `pipeline` at a time per call; `batch` returns how
// many of its n succeeded. Prints "<name> jobs= seconds= rate= failures="
// and the round trip of a call (send to last reply: with --pipeline 1, one
// command's latency) as p50_ms= p99_ms= max_ms=.
template <typename Batch>
int OnConnections(const char* name, const std::map<std::string, std::string>& f,
                  int64_t default_jobs, Batch batch) {
  const std::vector<int> ports = Ports(f);
  const int conns = static_cast<int>(Get(f, "conns", 4));
  const int64_t jobs = Get(f, "jobs", default_jobs);
  const int pipeline = static_cast<int>(Get(f, "pipeline", 100));
  std::atomic<int64_t> done{0};
  std::atomic<int> failures{0};
  std::vector<std::vector<double>> trip_ms(static_cast<size_t>(conns));
  auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < conns; ++c) {
    threads.emplace_back([&, c] {
      try {
        Conn conn(ports[static_cast<size_t>(c) % ports.size()]);
        std::mt19937_64 rng(static_cast<uint64_t>(c) + 1);
        std::vector<double>& trips = trip_ms[static_cast<size_t>(c)];
        for (int64_t mine = jobs / conns + (c < jobs % conns ? 1 : 0); mine > 0;) {
          const int n = static_cast<int>(std::min<int64_t>(pipeline, mine));
          const auto sent = Clock::now();
          done += batch(conn, n, rng, failures);
          trips.push_back(std::chrono::duration<double, std::milli>(Clock::now() - sent).count());
          mine -= n;
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", name, e.what());
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> trips;
  for (const auto& t : trip_ms) trips.insert(trips.end(), t.begin(), t.end());
  std::sort(trips.begin(), trips.end());
  std::printf(
      "%s jobs=%lld seconds=%.3f rate=%.0f failures=%d p50_ms=%.3f p99_ms=%.3f max_ms=%.3f\n", name,
      static_cast<long long>(done.load()), secs, static_cast<double>(done.load()) / secs,
      failures.load(), Quantile(trips, 0.50), Quantile(trips, 0.99),
      trips.empty() ? 0.0 : trips.back());
  return failures ? 1 : 0;
}

// Puts jobs with delays uniform in [delay-min, delay-max] seconds.
int Put(const std::map<std::string, std::string>& f) {
  const size_t size = static_cast<size_t>(Get(f, "size", 64));
  const int64_t dmin = Get(f, "delay-min", 0), dmax = Get(f, "delay-max", 0);
  const std::string body(size, 'x');
  return OnConnections(
      "put", f, 200'000, [&](Conn& conn, int n, std::mt19937_64& rng, std::atomic<int>& failures) {
        std::string batch;
        for (int i = 0; i < n; ++i) {
          const int64_t delay =
              dmax > dmin
                  ? dmin + static_cast<int64_t>(rng() % static_cast<uint64_t>(dmax - dmin + 1))
                  : dmin;
          batch += "put 100 " + std::to_string(delay) + " 60 " + std::to_string(size) + "\r\n" +
                   body + "\r\n";
        }
        conn.Send(batch);
        int ok = 0;
        for (int i = 0; i < n; ++i) {
          if (conn.Reply().rfind("INSERTED", 0) == 0) {
            ++ok;
          } else {
            ++failures;
          }
        }
        return ok;
      });
}

// Reserves ready jobs and ends each with `verb`: n reserves, then their n
// "<verb> ID<suffix>" commands, each to be answered `answer`.
int ReserveThen(const char* name, const std::map<std::string, std::string>& f, const char* verb,
                const char* suffix, const char* answer) {
  return OnConnections(
      name, f, 100'000, [&](Conn& conn, int n, std::mt19937_64&, std::atomic<int>& failures) {
        std::string reserves;
        for (int i = 0; i < n; ++i) reserves += "reserve-with-timeout 5\r\n";
        conn.Send(reserves);
        std::string ends;
        int got = 0;
        for (int i = 0; i < n; ++i) {
          std::string r = conn.Reply();
          if (r.rfind("RESERVED ", 0) != 0) {
            ++failures;
            continue;
          }
          ends += std::string(verb) + " " + r.substr(9, r.find(' ', 9) - 9) + suffix + "\r\n";
          ++got;
        }
        conn.Send(ends);
        int ok = 0;
        for (int i = 0; i < got; ++i) {
          if (conn.Reply() == answer) {
            ++ok;
          } else {
            ++failures;
          }
        }
        return ok;
      });
}

// Puts `jobs` jobs with delays of 1..spread seconds (each body names its due
// time in wall-clock us), while consumers keep reserves pending; lateness is
// the time a job is handed out minus its due time. With --serial 1 each
// consumer works as most beanstalk clients do: reserve, then delete, one
// command at a time, so every delete's reply is on the path of the next job.
int Lateness(const std::map<std::string, std::string>& f) {
  const std::vector<int> ports = Ports(f);
  const int64_t jobs = Get(f, "jobs", 100'000);
  const int spread = static_cast<int>(Get(f, "spread", 10));
  const int consumers = static_cast<int>(Get(f, "consumers", 4));
  const bool serial = Get(f, "serial", 0) != 0;
  const int in_flight = serial ? 1 : 16;  // reserves kept pending per consumer
  // LATENESS_DEBUG=MS prints each job later than MS, with when it came.
  const double debug_ms =
      std::getenv("LATENESS_DEBUG") ? std::atof(std::getenv("LATENESS_DEBUG")) : 0;

  std::mutex mu;
  std::vector<double> late_ms, delete_ms;
  late_ms.reserve(static_cast<size_t>(jobs));
  std::atomic<int64_t> received{0};
  std::atomic<bool> failed{false};
  // Once the last job is in, the consumers still waiting in a reserve are
  // cut off rather than left to time out.
  std::atomic<bool> all_in{false};
  std::vector<std::unique_ptr<Conn>> conns;
  for (int c = 0; c < consumers; ++c) {
    conns.push_back(std::make_unique<Conn>(ports[static_cast<size_t>(c) % ports.size()]));
  }
  const double cpu_before = ServersCpuSeconds(f);
  auto start = Clock::now();

  std::vector<std::thread> threads;
  for (int c = 0; c < consumers; ++c) {
    threads.emplace_back([&, c] {
      std::vector<double> local, local_delete;
      try {
        Conn& conn = *conns[static_cast<size_t>(c)];
        std::string many;
        for (int i = 0; i < in_flight; ++i) many += "reserve-with-timeout 30\r\n";
        conn.Send(many);
        while (received < jobs) {
          std::string body;
          std::string r = conn.Reply(&body);
          const int64_t now = WallMicros();
          if (r.rfind("RESERVED ", 0) != 0) break;  // TIMED_OUT: nothing more is coming
          const int64_t n = received.fetch_add(1);
          if (n >= jobs) break;
          if (n == jobs - 1) {
            all_in = true;
            for (auto& other : conns) {
              if (other.get() != &conn) other->Shutdown();
            }
          }
          local.push_back(static_cast<double>(now - std::stoll(body)) / 1000.0);
          if (debug_ms > 0 && local.back() > debug_ms) {
            std::fprintf(stderr, "late %.1f ms at wall ms %lld: %s\n", local.back(),
                         static_cast<long long>(now / 1000), r.c_str());
          }
          if (serial) {
            conn.Send("delete " + r.substr(9, r.find(' ', 9) - 9) + "\r\n");
            if (conn.Reply() != "DELETED") break;
            local_delete.push_back(static_cast<double>(WallMicros() - now) / 1000.0);
          }
          if (received >= jobs) break;
          conn.Send("reserve-with-timeout 30\r\n");
        }
      } catch (const std::exception& e) {
        if (!all_in) {
          std::fprintf(stderr, "lateness consumer: %s\n", e.what());
          failed = true;
        }
      }
      std::lock_guard lock(mu);
      late_ms.insert(late_ms.end(), local.begin(), local.end());
      delete_ms.insert(delete_ms.end(), local_delete.begin(), local_delete.end());
    });
  }
  threads.emplace_back([&] {
    try {
      Conn conn(ports.front());
      constexpr int kWindow = 20;
      for (int64_t i = 0; i < jobs; i += kWindow) {
        std::string batch;
        const int n = static_cast<int>(std::min<int64_t>(kWindow, jobs - i));
        const int64_t now = WallMicros();
        for (int k = 0; k < n; ++k) {
          const int delay = 1 + static_cast<int>((i + k) % spread);
          const std::string body = std::to_string(now + delay * 1'000'000LL);
          batch += "put 100 " + std::to_string(delay) + " 3600 " + std::to_string(body.size()) +
                   "\r\n" + body + "\r\n";
        }
        conn.Send(batch);
        for (int k = 0; k < n; ++k) conn.Reply();
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "lateness producer: %s\n", e.what());
      failed = true;
    }
  });
  for (auto& t : threads) t.join();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu = ServersCpuSeconds(f) - cpu_before;
  std::sort(late_ms.begin(), late_ms.end());
  std::sort(delete_ms.begin(), delete_ms.end());
  std::printf(
      "lateness jobs=%zu p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f max_ms=%.3f min_ms=%.3f "
      "seconds=%.1f server_cpu_s=%.2f",
      late_ms.size(), Quantile(late_ms, 0.50), Quantile(late_ms, 0.99), Quantile(late_ms, 0.999),
      late_ms.empty() ? 0.0 : late_ms.back(), late_ms.empty() ? 0.0 : late_ms.front(), secs, cpu);
  // A serial consumer's delete round trip is on the path of its next job.
  if (serial) {
    std::printf(" delete_p50_ms=%.3f delete_p99_ms=%.3f", Quantile(delete_ms, 0.50),
                Quantile(delete_ms, 0.99));
  }
  std::printf("\n");
  return failed || static_cast<int64_t>(late_ms.size()) != jobs ? 1 : 0;
}

// Prints a free loopback port.
int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  std::printf("%d\n", ntohs(a.sin_port));
  return 0;
}

// Waits (up to --timeout-s, default 10) until a server answers a command:
// beanstalkd accepts connections while it still replays its binlog, so an
// accepted connection alone does not mean it is serving. Prints how long.
int Wait(const std::map<std::string, std::string>& f) {
  const int port = static_cast<int>(Get(f, "port", 11300));
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::seconds(Get(f, "timeout-s", 10));
  while (Clock::now() < deadline) {
    try {
      Conn c(port);
      c.Send("list-tube-used\r\n");
      if (c.Reply().rfind("USING ", 0) == 0) {
        std::printf("ready seconds=%.3f\n",
                    std::chrono::duration<double>(Clock::now() - start).count());
        return 0;
      }
    } catch (const std::exception&) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::fprintf(stderr, "nothing answers on port %d\n", port);
  return 1;
}

int Rss(const std::map<std::string, std::string>& f) {
  const int64_t pid = Get(f, "pid", 0);
  std::printf("rss kib=%ld cpu_s=%.2f\n", RssKib(pid), CpuSeconds(pid));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: beanstalk_load put|drain|lateness|rss --port P [--flag value ...]\n");
    return 2;
  }
  try {
    const std::string mode = argv[1];
    auto flags = ParseFlags(argc, argv);
    if (mode == "put") return Put(flags);
    if (mode == "drain") return ReserveThen("drain", flags, "delete", "", "DELETED");
    if (mode == "bury") return ReserveThen("bury", flags, "bury", " 100", "BURIED");
    if (mode == "lateness") return Lateness(flags);
    if (mode == "rss") return Rss(flags);
    if (mode == "freeport") return FreePort();
    if (mode == "wait") return Wait(flags);
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "beanstalk_load: %s\n", e.what());
  }
  return 2;
}
