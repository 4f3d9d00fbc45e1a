// HttpClient: outbound HTTP(S) over libcurl's multi interface on a thread of
// its own. Connections are kept alive and reused; HTTP/2 is used over TLS
// when the server offers it; each request has its own timeout.
//
// Threading: Send() from any thread; completions run through the executor
// given at construction (the event loop).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace delayd::delivery {

struct OutRequest {
  std::string method = "POST";
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string body;
  int64_t timeout_ms = 10'000;
};

struct OutResult {
  int status = 0;  // HTTP status; 0 when no response came
  bool timed_out = false;
  std::string error;        // transport error, or an excerpt of a failed response's body
  std::string retry_after;  // the Retry-After header, if any
  int64_t duration_ms = 0;
};

class HttpClient {
 public:
  using Executor = std::function<void(std::function<void()>)>;
  using Callback = std::function<void(OutResult)>;

  explicit HttpClient(Executor executor, size_t max_host_connections = 256);
  ~HttpClient();  // abandons transfers in flight; their callbacks never run
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  void Send(OutRequest request, Callback done);
  void Stop();

 private:
  struct Transfer;
  void Loop();

  Executor executor_;
  size_t max_host_connections_;
  std::mutex mu_;
  std::deque<std::unique_ptr<Transfer>> queue_;  // guarded by mu_
  bool stopping_ = false;                        // guarded by mu_
  void* multi_ = nullptr;                        // CURLM*, created before the thread starts
  std::thread thread_;
};

}  // namespace delayd::delivery
