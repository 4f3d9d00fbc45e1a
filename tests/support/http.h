// Test support for HTTP: a blocking client for delayd's API, and a receiver
// that plays a push target, answering as each test programs it and
// recording what it got.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace delayd::testing {

struct HttpReply {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  nlohmann::json json() const { return nlohmann::json::parse(body, nullptr, false); }
};

// One request on a fresh connection to 127.0.0.1:port (5 s deadline).
HttpReply HttpCall(int port, const std::string& method, const std::string& target,
                   const std::string& body = "", const std::vector<std::string>& headers = {});

struct Received {
  std::chrono::system_clock::time_point at;
  std::string method;
  std::string path;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

struct Answer {
  Answer(int s = 200, std::vector<std::string> h = {}, std::chrono::milliseconds d = {})
      : status(s), headers(std::move(h)), delay(d) {}
  int status = 200;
  std::vector<std::string> headers;    // "Name: value"
  std::chrono::milliseconds delay{0};  // wait this long before answering
  bool hang = false;                   // never answer; close at shutdown
  std::string body = "ok";
};

class Receiver {
 public:
  // `answer` decides the reply to each request (called in arrival order,
  // with the number of requests to the same path before it).
  explicit Receiver(std::function<Answer(const Received&, int n)> answer = nullptr);
  ~Receiver();
  int port() const { return port_; }
  std::string url(const std::string& path = "/hook") const;
  std::vector<Received> received() const;
  size_t count() const;
  // Waits until `pred(received())` holds; false after `timeout`.
  bool WaitFor(const std::function<bool(const std::vector<Received>&)>& pred,
               std::chrono::milliseconds timeout);

 private:
  void Serve(int fd);
  std::function<Answer(const Received&, int)> answer_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Received> received_;
  std::map<std::string, int> per_path_;
  std::vector<std::thread> workers_;
  std::vector<int> conns_;
};

// A TCP connection to 127.0.0.1:port, or -1.
int ConnectLoopback(int port);

// A listening TCP socket on 127.0.0.1 with a port of the kernel's choosing,
// which it stores in *port.
int ListenLoopback(int* port);

// Waits, polling every 10 ms, until `pred` holds; false after `timeout`.
bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

}  // namespace delayd::testing
