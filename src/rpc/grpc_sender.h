// GrpcSender: push deliveries to gRPC targets (grpc://HOST:PORT and
// grpcs://), each a call of delayd.v1.JobReceiver/Deliver with the target's
// timeout as its deadline (doc/grpc.md, "The push target").
//
// One channel per target (scheme and authority), reused by every job sent
// there. gRPC would resolve names itself and connect wherever they point;
// so that the target policy sees every address, the sender resolves the host
// itself (on a thread of its own, since getaddrinfo blocks), keeps the
// addresses the policy allows, and gives gRPC those (an ipv4: or ipv6:
// target; the URL's authority is kept for :authority and the TLS name).
// A name is resolved again a minute later, or at once after a call found its
// target unreachable. A target whose every address the policy refuses fails
// its sends as HttpClient fails a refused connection ("refused by the target
// policy: ...", by the retry policy); one whose name does not resolve fails
// them as UNAVAILABLE.
//
// delayd's headers and the target's own go as metadata, names lowercased
// (Content-Type, which gRPC sets itself, excepted); the job's fields and
// body go in the Delivery message.
//
// Threading: Send() and Stop() on the event loop, whose executor runs every
// callback; gRPC's threads complete the calls and hand their results to it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/executor.h"
#include "common/grpc_url.h"
#include "delivery/http_client.h"
#include "delivery/target_policy.h"

namespace delayd::rpc {

class GrpcSender final : public delivery::HttpSender {
 public:
  // `policy` and `clock` must outlive the sender, and `policy` must not
  // change while it lives: the sender's own threads read it.
  GrpcSender(Executor executor, const delivery::TargetPolicy& policy, const Clock& clock);
  ~GrpcSender() override;  // Stop()
  GrpcSender(const GrpcSender&) = delete;
  GrpcSender& operator=(const GrpcSender&) = delete;

  void Send(delivery::OutRequest request, Callback done) override;
  // Cancels the calls in flight and waits until gRPC has let go of them; no
  // callback runs after it returns, and later sends are dropped.
  void Stop();

  // Channels kept (for tests and /metrics).
  size_t channels() const { return targets_.size(); }

 private:
  struct Call;
  struct Target;
  struct Lookup {
    std::string key;
    std::string host;
    uint16_t port;
  };
  struct Waiting {
    delivery::OutRequest request;
    Callback done;
  };

  void Resolve(Target& t, const std::string& key);
  void ResolverLoop();
  // On the event loop: the addresses found for `key` (or why none).
  void OnResolved(const std::string& key, std::vector<std::string> addresses, std::string error);
  void StartCall(Target& t, delivery::OutRequest request, Callback done);
  void Fail(Callback done, delivery::OutResult r);  // reported on the loop, as a call's
  void DropIdle(int64_t now_us);

  Executor executor_;
  const delivery::TargetPolicy& policy_;
  const Clock& clock_;
  std::map<std::string, std::unique_ptr<Target>> targets_;  // by scheme and authority
  int64_t swept_us_ = 0;

  std::mutex mu_;  // guards what gRPC's threads and the resolver share with the loop
  std::condition_variable cv_;
  bool stopping_ = false;
  std::set<std::shared_ptr<Call>> in_flight_;
  // Calls not yet destroyed: a completion drops its call on gRPC's thread
  // after it left in_flight_, and Stop() waits for that too (Call::Live).
  size_t live_calls_ = 0;
  std::deque<Lookup> lookups_;
  std::thread resolver_;
};

}  // namespace delayd::rpc
