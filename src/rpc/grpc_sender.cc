#include "rpc/grpc_sender.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>

#include "common/thread_name.h"
#include "delayd/v1/receiver.grpc.pb.h"
#include "delivery/header_line.h"
#include "delivery/retry_policy.h"

namespace delayd::rpc {

using delivery::OutRequest;
using delivery::OutResult;

namespace {

constexpr int64_t kResolveAgainUs = 60'000'000;  // a name's addresses are read again after
constexpr int64_t kIdleUs = 300'000'000;         // a target unused this long lets its channel go
constexpr int kMaxAnswerBytes = 64 * 1024;       // Delivered is empty; a receiver's garbage is not

// `ms` (wall) as a Timestamp; unset for 0.
void SetTime(google::protobuf::Timestamp* t, int64_t ms) {
  t->set_seconds(ms / 1000);
  t->set_nanos(static_cast<int32_t>(ms % 1000) * 1'000'000);
}

// An address with its port as a gRPC target names it ("1.2.3.4:80", "[::1]:80"),
// or "" when it is neither IPv4 nor IPv6.
std::string AddressText(const sockaddr* sa) {
  char text[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    return std::string(text) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    return "[" + std::string(text) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "";
}

}  // namespace

struct GrpcSender::Target {
  GrpcUrl url;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<delayd::v1::JobReceiver::Stub> stub;
  std::string addresses;  // the target the channel was made for ("ipv4:...")
  int64_t resolved_us = 0;
  bool resolving = false;
  bool stale = false;  // a call found it unreachable: resolve again before the next
  int64_t used_us = 0;
  size_t calls = 0;              // in flight
  std::vector<Waiting> waiting;  // sends before the first resolution
  OutResult failure;             // why the last resolution found nothing to call
};

struct GrpcSender::Call {
  // Counts the call among the sender's live ones. Declared first, so
  // destroyed last: once gRPC's thread has destroyed the context and all
  // else the call held, Stop() may return and gRPC be shut down. Destroying
  // the context while the library shut down once freed memory twice (an
  // ASan report in grpc_sender_test at exit).
  struct Live {
    explicit Live(GrpcSender* s) : sender(s) {
      std::lock_guard lock(sender->mu_);
      ++sender->live_calls_;
    }
    ~Live() {
      std::lock_guard lock(sender->mu_);
      if (--sender->live_calls_ == 0) sender->cv_.notify_all();
    }
    Live(const Live&) = delete;
    Live& operator=(const Live&) = delete;
    GrpcSender* sender;
  };
  explicit Call(GrpcSender* s) : live(s) {}
  Live live;
  grpc::ClientContext ctx;
  delayd::v1::Delivery request;
  delayd::v1::Delivered response;
  Callback done;
  std::string key;
  int64_t started_us = 0;
};

GrpcSender::GrpcSender(Executor executor, const delivery::TargetPolicy& policy, const Clock& clock)
    : executor_(std::move(executor)), policy_(policy), clock_(clock) {
  resolver_ = StartNamedThread("grpc-resolver", [this] { ResolverLoop(); });
}

GrpcSender::~GrpcSender() { Stop(); }

void GrpcSender::Stop() {
  std::unique_lock lock(mu_);
  if (stopping_ && !resolver_.joinable()) return;
  stopping_ = true;
  cv_.notify_all();
  // Cancelled without the lock: gRPC may run a completion, which takes it,
  // on this thread; and the copies are dropped without it too, since the
  // last reference to a call takes it as well (Call::Live).
  std::set<std::shared_ptr<Call>> calls = in_flight_;
  lock.unlock();
  for (const auto& call : calls) call->ctx.TryCancel();
  calls.clear();
  lock.lock();
  // gRPC runs each call's completion once cancelled; wait for all of them,
  // and for gRPC's threads to have let go of every call.
  cv_.wait(lock, [this] { return in_flight_.empty() && live_calls_ == 0; });
  lock.unlock();
  if (resolver_.joinable()) resolver_.join();
}

void GrpcSender::Send(OutRequest request, Callback done) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
  }
  const int64_t now_us = clock_.SteadyMicros();
  DropIdle(now_us);
  std::optional<GrpcUrl> url = ParseGrpcUrl(request.url);
  if (!url) {
    OutResult r;
    r.not_sent = true;
    r.error = "not sent: " + request.url.substr(0, 200) + " is not grpc://HOST:PORT";
    return Fail(std::move(done), std::move(r));
  }
  const std::string key = (url->tls ? "grpcs://" : "grpc://") + url->authority;
  std::unique_ptr<Target>& slot = targets_[key];
  if (!slot) {
    slot = std::make_unique<Target>();
    slot->url = std::move(*url);
  }
  Target& t = *slot;
  t.used_us = now_us;
  if (!t.resolving && (t.resolved_us == 0 || t.stale || now_us - t.resolved_us > kResolveAgainUs)) {
    Resolve(t, key);
  }
  if (!t.stub) {
    // Resolving: wait for it. Resolved to nothing just now (a literal
    // address the policy refuses): fail as the waiting sends did.
    if (!t.resolving) return Fail(std::move(done), t.failure);
    t.waiting.push_back({std::move(request), std::move(done)});
    return;
  }
  StartCall(t, std::move(request), std::move(done));
}

void GrpcSender::Resolve(Target& t, const std::string& key) {
  t.resolving = true;
  t.stale = false;
  sockaddr_storage ss{};
  auto* in = reinterpret_cast<sockaddr_in*>(&ss);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, t.url.host.c_str(), &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    in->sin_port = htons(t.url.port);
  } else if (inet_pton(AF_INET6, t.url.host.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(t.url.port);
  } else {
    std::lock_guard lock(mu_);
    lookups_.push_back({key, t.url.host, t.url.port});
    cv_.notify_all();
    return;
  }
  // A literal address: nothing to look up.
  const auto* sa = reinterpret_cast<const sockaddr*>(&ss);
  Status s = policy_.CheckAddress(t.url.host, sa);
  std::vector<std::string> found;
  if (s.ok()) found.push_back(AddressText(sa));
  OnResolved(key, std::move(found), s.ok() ? "" : "refused by the target policy: " + s.message());
}

void GrpcSender::ResolverLoop() {
  for (;;) {
    Lookup l;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !lookups_.empty(); });
      if (stopping_) return;
      l = std::move(lookups_.front());
      lookups_.pop_front();
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const std::string port = std::to_string(l.port);
    const int rc = getaddrinfo(l.host.c_str(), port.c_str(), &hints, &res);
    std::vector<std::string> allowed;
    std::string error;
    if (rc != 0) {
      error = "cannot resolve " + l.host + ": " + gai_strerror(rc);
    } else {
      for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
        Status s = policy_.CheckAddress(l.host, a->ai_addr);
        std::string text = AddressText(a->ai_addr);
        if (s.ok() && !text.empty()) {
          if (std::find(allowed.begin(), allowed.end(), text) == allowed.end()) {
            allowed.push_back(std::move(text));
          }
        } else if (error.empty()) {
          error = "refused by the target policy: " + s.message();
        }
      }
      freeaddrinfo(res);
    }
    executor_([this, key = std::move(l.key), allowed = std::move(allowed),
               error = std::move(error)]() mutable {
      OnResolved(key, std::move(allowed), std::move(error));
    });
  }
}

void GrpcSender::OnResolved(const std::string& key, std::vector<std::string> addresses,
                            std::string error) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
  }
  auto it = targets_.find(key);
  if (it == targets_.end()) return;
  Target& t = *it->second;
  t.resolving = false;
  t.resolved_us = clock_.SteadyMicros();
  if (addresses.empty()) {
    // Nothing to call: the sends waiting fail, and the next one looks again.
    t.channel.reset();
    t.stub.reset();
    t.addresses.clear();
    t.failure = OutResult();
    if (error.rfind("refused by the target policy", 0) == 0) {
      t.failure.error = error;  // a connection refused, as HttpClient reports it
    } else {
      t.failure.grpc_code = static_cast<int>(grpc::StatusCode::UNAVAILABLE);
      t.failure.error = "UNAVAILABLE: " + error;
    }
    for (Waiting& w : std::exchange(t.waiting, {})) Fail(std::move(w.done), t.failure);
    t.stale = true;
    return;
  }
  // One family per target string: IPv4 when there is any.
  std::vector<std::string> v4, v6;
  for (std::string& a : addresses) (a.front() == '[' ? v6 : v4).push_back(std::move(a));
  const std::vector<std::string>& use = v4.empty() ? v6 : v4;
  std::string target = v4.empty() ? "ipv6:" : "ipv4:";
  for (size_t i = 0; i < use.size(); ++i) target += (i ? "," : "") + use[i];
  if (!t.stub || target != t.addresses) {
    grpc::ChannelArguments args;
    args.SetString(GRPC_ARG_DEFAULT_AUTHORITY, t.url.authority);
    args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);  // the job's retry policy decides
    args.SetMaxReceiveMessageSize(kMaxAnswerBytes);
    std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
    if (t.url.tls) {
      creds = grpc::SslCredentials(grpc::SslCredentialsOptions());
      args.SetSslTargetNameOverride(t.url.host);
    }
    t.channel = grpc::CreateCustomChannel(target, creds, args);
    t.stub = delayd::v1::JobReceiver::NewStub(t.channel);
    t.addresses = std::move(target);
  }
  for (Waiting& w : std::exchange(t.waiting, {})) {
    StartCall(t, std::move(w.request), std::move(w.done));
  }
}

void GrpcSender::StartCall(Target& t, OutRequest req, Callback done) {
  auto call = std::make_shared<Call>(this);
  call->done = std::move(done);
  call->key = (t.url.tls ? "grpcs://" : "grpc://") + t.url.authority;
  call->started_us = clock_.SteadyMicros();
  call->ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(req.timeout_ms));
  for (const std::string& h : req.headers) {
    std::optional<std::pair<std::string_view, std::string_view>> nv = delivery::SplitHeaderLine(h);
    if (!nv) continue;
    std::string name(nv->first);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (name == "content-type") continue;  // gRPC's own
    call->ctx.AddMetadata(name, std::string(nv->second));
  }
  delayd::v1::Delivery& d = call->request;
  d.set_id(req.job.id);
  d.set_topic(req.job.topic);
  d.set_key(req.job.key);
  d.set_attempt(req.job.attempt);
  SetTime(d.mutable_due_at(), req.job.due_ms);
  SetTime(d.mutable_run_at(), req.job.run_at_ms);
  if (req.job.timer_id != 0) {
    d.set_timer_id(req.job.timer_id);
    SetTime(d.mutable_fire_at(), req.job.fire_ms);
  }
  d.set_traceparent(req.job.traceparent);
  d.set_tracestate(req.job.tracestate);
  d.set_body(std::move(req.body));
  d.set_body_is_json(req.job.body_is_json);
  ++t.calls;
  {
    // Everything the call holds is written before this lock is released;
    // the completion takes the lock before it reads any of it (the order
    // gRPC's own synchronisation gives, stated where TSan can see it).
    std::lock_guard lock(mu_);
    in_flight_.insert(call);
  }
  t.stub->async()->Deliver(
      &call->ctx, &call->request, &call->response, [this, call](grpc::Status s) {
        OutResult r;
        {
          std::lock_guard lock(mu_);
          in_flight_.erase(call);
          if (stopping_) {
            cv_.notify_all();
            return;
          }
        }
        r.grpc_code = static_cast<int>(s.error_code());
        r.duration_ms = (clock_.SteadyMicros() - call->started_us) / 1000;
        r.timed_out = s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
        if (!s.ok()) {
          r.error = std::string(delivery::GrpcCodeName(r.grpc_code)) + ": " + s.error_message();
        }
        // The loop gets what it needs, not the call: a Stop() on the loop
        // waits for every call to be gone.
        executor_(
            [this, key = call->key, done = std::move(call->done), r = std::move(r)]() mutable {
              auto it = targets_.find(key);
              if (it != targets_.end()) {
                --it->second->calls;
                if (r.grpc_code == static_cast<int>(grpc::StatusCode::UNAVAILABLE))
                  it->second->stale = true;
              }
              done(std::move(r));
            });
      });
}

void GrpcSender::Fail(Callback done, OutResult r) {
  executor_([done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
}

void GrpcSender::DropIdle(int64_t now_us) {
  if (now_us - swept_us_ < kResolveAgainUs) return;
  swept_us_ = now_us;
  for (auto it = targets_.begin(); it != targets_.end();) {
    const Target& t = *it->second;
    if (t.calls == 0 && t.waiting.empty() && !t.resolving && now_us - t.used_us > kIdleUs) {
      it = targets_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace delayd::rpc
