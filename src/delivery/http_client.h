// HttpClient: outbound HTTP(S) over libcurl's multi interface on a thread of
// its own. Connections are kept alive and reused; HTTP/2 is used over TLS
// when the server offers it; each request has its own timeout.
//
// The thread drives curl with curl_multi_socket_action over its own epoll
// set, so a loop turn costs what the sockets with activity cost: thousands
// of transfers waiting on slow targets do not slow the others down (with
// curl_multi_perform every turn walked every transfer).
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
#include <unordered_map>
#include <vector>

#include "common/executor.h"
#include "delivery/target_policy.h"

namespace delayd::delivery {

// The job an attempt delivers, for a sender that carries it as fields
// rather than as the Delayd-* headers (a gRPC receiver's Delivery).
struct DeliveryJob {
  uint64_t id = 0;
  std::string topic;
  std::string key;
  uint32_t attempt = 0;
  int64_t due_ms = 0;
  int64_t run_at_ms = 0;
  uint64_t timer_id = 0;  // 0: no timer's fire
  int64_t fire_ms = 0;
  bool body_is_json = false;
  std::string traceparent = {};  // this attempt's, as its headers carry it; empty: none
  std::string tracestate = {};
};

struct OutRequest {
  std::string method = "POST";
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string body;
  int64_t timeout_ms = 10'000;
  DeliveryJob job;  // a push attempt's job (id 0 for an alert)
};

struct OutResult {
  int status = 0;  // HTTP status; 0 when no response came
  // A gRPC target's answer (grpc::StatusCode); -1 for HTTP. `error` then
  // holds the code's name and the status message.
  int grpc_code = -1;
  bool timed_out = false;
  std::string error;        // transport error, or an excerpt of a failed response's body
  std::string retry_after;  // the Retry-After header, if any
  int64_t duration_ms = 0;
  bool not_sent = false;  // delayd refused to send it (`error` says why): never retried
  // A broker target's outcome (kafka://; kNone for HTTP and gRPC): the broker
  // acknowledged the message, failed to (retried), or rejected it for good
  // (dead at once unless the policy retries refusals). `error` says why not.
  enum class Broker { kNone, kAcknowledged, kFailed, kRejected };
  Broker broker = Broker::kNone;
};

// What the dispatcher sends through: each request's result is reported once,
// on the event loop. HttpClient is the real one; tests give their own.
class HttpSender {
 public:
  using Callback = std::function<void(OutResult)>;
  virtual ~HttpSender() = default;
  virtual void Send(OutRequest request, Callback done) = 0;
};

class HttpClient final : public HttpSender {
 public:
  // `max_connections`: idle connections kept open for reuse, all hosts together.
  // Every connection is opened only to an address `policy` allows; a refused
  // one fails the request with the policy's reason.
  explicit HttpClient(Executor executor, size_t max_connections = 1024,
                      TargetPolicy policy = TargetPolicy());
  ~HttpClient();  // abandons transfers in flight; their callbacks never run
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  void Send(OutRequest request, Callback done) override;
  void Stop();

 private:
  struct Transfer;
  void Loop();
  void Start(std::unique_ptr<Transfer> t);
  void Collect();  // hands finished transfers to the executor
  void Wake();
  static int OnSocket(void* easy, int fd, int what, void* self, void* socketp);
  static int OnTimer(void* multi, long timeout_ms, void* self);

  Executor executor_;
  const TargetPolicy policy_;
  std::mutex mu_;
  std::deque<std::unique_ptr<Transfer>> queue_;  // guarded by mu_
  bool stopping_ = false;                        // guarded by mu_
  void* multi_ = nullptr;                        // CURLM*, created before the thread starts
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: Send() and Stop() wake the thread
  // Touched by the thread only:
  int64_t timer_due_ms_ = -1;  // steady ms when curl wants its timeout action
  std::unordered_map<void*, std::unique_ptr<Transfer>> active_;  // by CURL*
  std::vector<void*> idle_;  // finished easy handles, kept for reuse
  std::thread thread_;
};

}  // namespace delayd::delivery
