// Test support: a blocking beanstalk protocol client with deadlines, speaking
// over a real socket as any client would. Every read has a deadline, so a
// test never hangs on a server that does not answer.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace delayd::testing {

class Client {
 public:
  // Connects to 127.0.0.1:port, or to a unix socket path.
  explicit Client(int port);
  explicit Client(const std::string& unix_path);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  void Send(const std::string& bytes);
  // One reply: its first line, plus the body for FOUND, RESERVED and OK.
  std::string Reply(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // Sends a command line (CRLF added) and returns the reply.
  std::string Cmd(const std::string& line,
                  std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // put; returns the id, or throws with the reply.
  uint64_t Put(const std::string& body, uint32_t pri = 0, uint32_t delay = 0, uint32_t ttr = 60);
  // True when nothing arrives within `wait` (for blocked commands).
  bool Silent(std::chrono::milliseconds wait);
  // True when the server closed the connection (EOF) within `timeout`.
  bool Closed(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  void ShutdownWrite();

 private:
  bool Fill(std::chrono::steady_clock::time_point deadline);
  int fd_ = -1;
  std::string buf_;
};

// The number after a reply word: "INSERTED 12" -> 12.
uint64_t Number(const std::string& reply);
// A field of a YAML stats body: Field(stats, "current-jobs-ready").
std::string Field(const std::string& yaml, const std::string& key);

}  // namespace delayd::testing
