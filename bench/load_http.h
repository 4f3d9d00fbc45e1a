// The HTTP client side of bench/'s load tools (http_load, broker_load):
// blocking keep-alive connections to delayd on 127.0.0.1, submissions over
// several of them, a topic's settings.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace delayd::bench {

inline int Connect(int port) {
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
inline int Exchange(int fd, const std::string& target, const std::string& body, std::string& buf) {
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

// POSTs `jobs` items to `path` in batches of `batch` (1: one object per
// request, else a JSON array) over `conns` connections; returns items/s.
inline double Post(int port, const std::string& path, long jobs, long batch, long conns,
                   const std::function<std::string(long i)>& job) {
  std::atomic<long> next{0};
  std::atomic<bool> failed{false};
  auto start = std::chrono::steady_clock::now();
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
        if (Exchange(fd, path, body, buf) != 201) {
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
  return jobs / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline void PutTopic(int port, const std::string& topic, const std::string& settings) {
  int fd = Connect(port);
  std::string buf;
  std::string req =
      "PUT /v1/topics/" + topic +
      " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(settings.size()) + "\r\n\r\n" + settings;
  send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  char tmp[4096];
  recv(fd, tmp, sizeof tmp, 0);
  close(fd);
}

}  // namespace delayd::bench
