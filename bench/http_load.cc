// HTTP benchmarks of delayd, loopback only, each stopping by itself.
//
//   http_load submit  --port P [--conns 4] [--batch 1000] [--jobs 200000]
//       submits jobs (delays spread over an hour) over keep-alive
//       connections; prints jobs/s.
//   http_load deliver --port P [--jobs 100000] [--lead-ms 2000]
//       runs a local receiver, submits push jobs due over one second
//       `lead-ms` from now, and prints delivery throughput and lateness
//       (receipt time minus Delayd-Due-At) p50/p99/max.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/time_format.h"
#include "support/http.h"

using namespace std::chrono;
using delayd::testing::Received;
using delayd::testing::Receiver;

namespace {

int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    perror("connect");
    exit(1);
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// Sends one request on a kept-alive connection and reads the reply; returns
// its status.
int Exchange(int fd, const std::string& target, const std::string& body, std::string& buf) {
  std::string req = "POST " + target +
                    " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    "Content-Length: " +
                    std::to_string(body.size()) + "\r\n\r\n" + body;
  for (size_t off = 0; off < req.size();) {
    ssize_t n = send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return -1;
    off += static_cast<size_t>(n);
  }
  buf.clear();
  for (;;) {
    size_t end = buf.find("\r\n\r\n");
    if (end != std::string::npos) {
      size_t cl = buf.find("Content-Length: ");
      size_t len = cl == std::string::npos ? 0 : std::stoul(buf.substr(cl + 16));
      if (buf.size() >= end + 4 + len) return std::stoi(buf.substr(9, 3));
    }
    char tmp[65536];
    ssize_t n = recv(fd, tmp, sizeof tmp, 0);
    if (n <= 0) return -1;
    buf.append(tmp, static_cast<size_t>(n));
  }
}

long Arg(int argc, char** argv, const char* name, long dflt) {
  for (int i = 2; i + 1 < argc; ++i) {
    if (strcmp(argv[i], name) == 0) return atol(argv[i + 1]);
  }
  return dflt;
}

// Jobs in batches of `batch` over `conns` connections; returns jobs/s.
double Submit(int port, const std::string& topic, long jobs, long batch, long conns,
              const std::function<std::string(long i)>& job) {
  std::atomic<long> next{0};
  std::atomic<bool> failed{false};
  auto start = steady_clock::now();
  std::vector<std::thread> threads;
  for (long c = 0; c < conns; ++c) {
    threads.emplace_back([&] {
      int fd = Connect(port);
      std::string buf;
      for (;;) {
        long first = next.fetch_add(batch);
        if (first >= jobs) break;
        long n = std::min(batch, jobs - first);
        std::string body = batch == 1 ? job(first) : "[";
        if (batch != 1) {
          for (long i = 0; i < n; ++i) body += (i ? "," : "") + job(first + i);
          body += "]";
        }
        if (Exchange(fd, "/v1/topics/" + topic + "/jobs", body, buf) != 201) {
          fprintf(stderr, "submit failed: %s\n", buf.c_str());
          failed = true;
          break;
        }
      }
      close(fd);
    });
  }
  for (auto& t : threads) t.join();
  if (failed) exit(1);
  return jobs / duration<double>(steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: http_load submit|deliver --port P [...]\n");
    return 2;
  }
  std::string mode = argv[1];
  const int port = static_cast<int>(Arg(argc, argv, "--port", 8080));
  if (mode == "submit") {
    const long jobs = Arg(argc, argv, "--jobs", 200000);
    const long batch = Arg(argc, argv, "--batch", 1000);
    const long conns = Arg(argc, argv, "--conns", 4);
    double rate = Submit(port, "bench", jobs, batch, conns, [](long i) {
      // Delays spread over an hour, as design.md asks of store benchmarks.
      return "{\"delay\":" + std::to_string(1000 + (i * 7919) % 3'600'000) +
             ",\"body\":{\"order\":" + std::to_string(i) + "}}";
    });
    printf("submit jobs=%ld batch=%ld conns=%ld jobs_per_s=%.0f\n", jobs, batch, conns, rate);
    return 0;
  }
  if (mode == "deliver") {
    const long jobs = Arg(argc, argv, "--jobs", 100000);
    const long lead_ms = Arg(argc, argv, "--lead-ms", 3000);
    Receiver rx;
    std::string settings = "{\"target\":{\"url\":\"" + rx.url() + "\"}}";
    int fd = Connect(port);
    std::string buf;
    std::string req = "PUT /v1/topics/push HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                      std::to_string(settings.size()) + "\r\n\r\n" + settings;
    send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    char tmp[4096];
    recv(fd, tmp, sizeof tmp, 0);
    close(fd);
    const int64_t base =
        duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count() + lead_ms;
    double submit_rate = Submit(port, "push", jobs, 1000, 4, [&](long i) {
      // Due times spread evenly over one second.
      return "{\"run_at\":\"" + delayd::FormatRfc3339Ms(base + i * 1000 / jobs) +
             "\",\"body\":" + std::to_string(i) + "}";
    });
    if (duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count() > base) {
      fprintf(stderr, "submitting took longer than --lead-ms; raise it\n");
      return 1;
    }
    if (!rx.WaitFor([&](auto& v) { return static_cast<long>(v.size()) >= jobs; }, seconds(120))) {
      fprintf(stderr, "only %zu of %ld delivered in 120 s\n", rx.count(), jobs);
      return 1;
    }
    auto got = rx.received();
    std::vector<int64_t> late;
    for (const Received& r : got) {
      int64_t at = duration_cast<microseconds>(r.at.time_since_epoch()).count();
      int64_t due = *delayd::ParseRfc3339(r.headers.at("delayd-due-at")) * 1000;
      late.push_back(at - due);
    }
    std::sort(late.begin(), late.end());
    auto first =
        std::min_element(got.begin(), got.end(), [](auto& a, auto& b) { return a.at < b.at; });
    auto last =
        std::max_element(got.begin(), got.end(), [](auto& a, auto& b) { return a.at < b.at; });
    double secs = duration<double>(last->at - first->at).count();
    printf(
        "deliver jobs=%ld submit_per_s=%.0f deliveries_per_s=%.0f (over %.2f s) lateness_ms "
        "p50=%.2f p99=%.2f max=%.2f early=%ld\n",
        jobs, submit_rate, (jobs - 1) / secs, secs, late[late.size() / 2] / 1000.0,
        late[late.size() * 99 / 100] / 1000.0, late.back() / 1000.0,
        static_cast<long>(
            std::count_if(late.begin(), late.end(), [](int64_t l) { return l < 0; })));
    return 0;
  }
  fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
