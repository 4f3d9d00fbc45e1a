#include "delivery/dispatcher.h"

#include <fmt/format.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <spdlog/spdlog.h>
#include <strings.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/grpc_url.h"
#include "common/header_rules.h"
#include "common/json_dump.h"
#include "common/target_kind.h"
#include "common/time_format.h"
#include "common/trace_context.h"
#include "delivery/retry_policy.h"
#include "engine/timer_key.h"

namespace delayd::delivery {
namespace {

// An alert webhook gets this long to answer; alerts are not retried.
constexpr int64_t kAlertTimeoutMs = 10'000;
// The part of a failed attempt's error kept in its attempt log.
constexpr size_t kErrorExcerptBytes = 300;

// A key as a header value: printable ASCII stays, any other byte (and '%')
// is percent-encoded, so no key can inject a header or break the request.
std::string HeaderSafe(std::string_view key) {
  std::string out;
  for (unsigned char c : key) {
    if (c > 0x20 && c < 0x7f && c != '%') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

}  // namespace

std::string Signature(const std::string& secret, int64_t unix_s, const std::string& body) {
  std::string message = std::to_string(unix_s) + "." + body;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len);
  std::string out = fmt::format("t={},v1=", unix_s);
  for (unsigned int i = 0; i < len; ++i) out += fmt::format("{:02x}", mac[i]);
  return out;
}

Dispatcher::Dispatcher(boost::asio::io_context& io, engine::Engine& engine, HttpSender& client,
                       const Clock& clock, DispatcherOptions options)
    : io_(io),
      engine_(engine),
      client_(client),
      clock_(clock),
      options_(options),
      rate_timer_(io) {}

Dispatcher::~Dispatcher() {
  if (subscription_ != 0) engine_.Unsubscribe(subscription_);
}

void Dispatcher::Start() {
  subscription_ = engine_.Subscribe([this](const engine::JobEvent& e) {
    if (e.kind == engine::JobEventKind::kReady && (e.push || e.job_id == 0)) {
      OnReady(std::string(e.topic));
    }
  });
  for (const std::string& t : engine_.PushReadyTopics()) OnReady(t);
}

uint64_t Dispatcher::in_flight(const std::string& topic) const {
  auto it = topics_.find(topic);
  return it == topics_.end() ? 0 : it->second.in_flight;
}

void Dispatcher::OnReady(const std::string& topic) {
  runnable_.insert(topic);
  SchedulePump();
}

void Dispatcher::SchedulePump() {
  // Called from inside engine calls: pump on the next turn of the loop,
  // once for everything that became ready meanwhile.
  if (pump_posted_ || stopped_) return;
  pump_posted_ = true;
  boost::asio::post(io_, [this] { PumpPending(); });
}

void Dispatcher::PumpPending() {
  if (!pump_posted_) return;  // pumped already
  pump_posted_ = false;
  Pump();
}

void Dispatcher::Pump() {
  if (stopped_) return;
  int64_t next_us = 0;
  // One job per topic per pass, so topics share the global cap fairly.
  std::vector<std::string> pass(runnable_.begin(), runnable_.end());
  while (!pass.empty() && stats_.in_flight < options_.max_in_flight) {
    std::vector<std::string> again;
    for (const std::string& topic : pass) {
      if (stats_.in_flight >= options_.max_in_flight) break;
      if (PumpTopic(topic, topics_[topic])) again.push_back(topic);
    }
    pass.swap(again);
  }
  // Rate-limited topics: wake when the soonest gets its next token.
  for (const std::string& topic : runnable_) {
    TopicState& ts = topics_[topic];
    if (ts.rate > 0 && ts.tokens < 1) {
      int64_t at = ts.refilled_us + static_cast<int64_t>((1 - ts.tokens) / ts.rate * 1e6) + 1;
      if (next_us == 0 || at < next_us) next_us = at;
    }
  }
  if (next_us != 0 && (rate_timer_at_us_ == 0 || next_us < rate_timer_at_us_)) {
    rate_timer_at_us_ = next_us;
    rate_timer_.expires_after(
        std::chrono::microseconds(std::max<int64_t>(0, next_us - clock_.SteadyMicros())));
    rate_timer_.async_wait([this](const boost::system::error_code& ec) {
      rate_timer_at_us_ = 0;
      if (!ec) Pump();
    });
  }
}

// Dispatches at most one job of `topic`. Returns whether it did; when the
// topic has nothing ready, it is no longer runnable.
bool Dispatcher::PumpTopic(const std::string& topic, TopicState& ts) {
  std::shared_ptr<const engine::TopicSettings> settings = engine_.SettingsOf(topic);
  const size_t cap = settings && settings->max_concurrency > 0 ? settings->max_concurrency
                                                               : options_.topic_concurrency;
  if (ts.in_flight >= cap) return false;
  const double rate = settings ? settings->rate_limit_per_s : 0;
  if (rate > 0) {
    // Token bucket holding up to 100 ms of tokens (at least 2): a timer
    // that wakes late (a busy or contended machine) loses no tokens, and a
    // burst stays a tenth of a second's worth.
    const int64_t now_us = clock_.SteadyMicros();
    const double capacity = std::max(2.0, rate * 0.1);
    if (ts.rate != rate) {
      ts.rate = rate;
      ts.tokens = std::min(ts.tokens, capacity);
      if (ts.refilled_us == 0) ts.tokens = 1;
      ts.refilled_us = now_us;
    }
    ts.tokens = std::min(capacity, ts.tokens + (now_us - ts.refilled_us) / 1e6 * rate);
    ts.refilled_us = now_us;
    if (ts.tokens < 1) return false;
  } else {
    ts.rate = 0;
  }
  std::optional<engine::PushLease> lease = engine_.TakePush(topic);
  if (!lease) {
    runnable_.erase(topic);
    return false;
  }
  if (rate > 0) ts.tokens -= 1;
  Deliver(std::move(*lease), settings.get());
  return true;
}

void Dispatcher::Deliver(engine::PushLease lease, const engine::TopicSettings* settings) {
  const engine::Target& target = *lease.spec->target;
  OutRequest req;
  req.method = target.method;
  req.url = target.url;
  req.timeout_ms = target.timeout_ms;
  // delayd's own headers first, each once; then the job's, each checked
  // again (a target stored before a rule was made may break it).
  req.headers.push_back("Delayd-Job-Id: " + std::to_string(lease.id));
  req.headers.push_back("Delayd-Topic: " + lease.topic);
  req.headers.push_back("Delayd-Attempt: " + std::to_string(lease.attempt));
  req.headers.push_back("Delayd-Due-At: " + FormatRfc3339Ms(lease.due_ms));
  if (!lease.key.empty()) req.headers.push_back("Delayd-Key: " + HeaderSafe(lease.key));
  req.job = {.id = lease.id,
             .topic = lease.topic,
             .key = lease.key,
             .attempt = lease.attempt,
             .due_ms = lease.due_ms,
             .run_at_ms = lease.run_at_ms,
             .body_is_json = lease.spec->encoding == engine::BodyEncoding::kJson};
  // The submitter's trace goes on under a parent id of this attempt's own,
  // so that each attempt is a span of its own on the receiving side.
  std::string parent_id;
  if (std::optional<TraceParent> tp = ParseTraceparent(lease.spec->traceparent)) {
    tp->parent_id = parent_id = NewParentId();
    req.job.traceparent = FormatTraceparent(*tp);
    req.job.tracestate = lease.spec->tracestate;
    req.headers.push_back("traceparent: " + req.job.traceparent);
    if (!req.job.tracestate.empty()) req.headers.push_back("tracestate: " + req.job.tracestate);
  }
  if (std::optional<engine::FireOfKey> fire = engine::ParseTimerFireKey(lease.key)) {
    // A catch-up fire after downtime is due now; its fire time says which it was.
    req.headers.push_back("Delayd-Timer-Id: " + std::to_string(fire->timer_id));
    req.headers.push_back("Delayd-Fire-At: " + FormatRfc3339Ms(fire->fire_ms));
    req.job.timer_id = fire->timer_id;
    req.job.fire_ms = fire->fire_ms;
  }
  const TargetKind kind = KindOfUrl(target.url);
  const bool grpc = kind == TargetKind::kGrpc;
  if (req.method != "GET" || kind != TargetKind::kHttp) req.body = *lease.body;
  if (settings != nullptr && !settings->signing_secret.empty()) {
    req.headers.push_back("Delayd-Signature: " + Signature(settings->signing_secret,
                                                           clock_.WallMillis() / 1000, req.body));
  }
  bool own_content_type = false;
  std::string refused;
  for (const auto& [k, v] : target.headers) {
    std::string fault = TargetHeaderFault(k, v);
    if (fault.empty() && grpc) fault = GrpcMetadataNameFault(k);
    if (!fault.empty() && refused.empty()) {
      refused = "not sent: the target's header " + k.substr(0, 100) + " " + fault;
    }
    own_content_type = own_content_type || strcasecmp(k.c_str(), "Content-Type") == 0;
  }
  if (!own_content_type) {
    req.headers.push_back(lease.spec->encoding == engine::BodyEncoding::kJson
                              ? "Content-Type: application/json"
                              : "Content-Type: application/octet-stream");
  }
  for (const auto& [k, v] : target.headers) {
    // A target's own trace headers yield to the job's trace context.
    if (!parent_id.empty() &&
        (strcasecmp(k.c_str(), "traceparent") == 0 || strcasecmp(k.c_str(), "tracestate") == 0)) {
      continue;
    }
    req.headers.push_back(k + ": " + v);
  }
  ++stats_.in_flight;
  ++topics_[lease.topic].in_flight;
  const int64_t started_ms = clock_.WallMillis();
  const int64_t sent_us = clock_.SteadyMicros();
  if (!refused.empty()) {
    // Never sent, never retried: a dead letter that says why.
    boost::asio::post(io_, [this, lease = std::move(lease), started_ms, refused]() mutable {
      OutResult r;
      r.not_sent = true;
      r.error = refused;
      OnResult(lease, started_ms, "", std::move(r));
    });
    return;
  }
  client_.Send(std::move(req), [this, lease = std::move(lease), started_ms, sent_us,
                                parent_id = std::move(parent_id)](OutResult r) {
    if (metrics_ != nullptr) {
      metrics_->Kind(KindOfUrl(lease.spec->target->url))
          .duration.ObserveMicros(clock_.SteadyMicros() - sent_us);
    }
    OnResult(lease, started_ms, parent_id, std::move(r));
  });
}

void Dispatcher::OnResult(const engine::PushLease& lease, int64_t started_ms,
                          const std::string& parent_id, OutResult r) {
  --stats_.in_flight;
  TopicState& ts = topics_[lease.topic];
  --ts.in_flight;
  const engine::RetryPolicy policy = lease.spec->retry.value_or(engine::RetryPolicy{});
  const int64_t now_ms = clock_.WallMillis();
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  Decision d = Decide(policy, r, lease.attempt, now_ms, lease.created_ms, uniform(rng_));
  engine::Attempt a;
  a.number = lease.attempt;
  a.started_ms = started_ms;
  a.duration_ms = r.duration_ms;
  a.http_status = r.status;
  a.parent_id = parent_id;
  a.error = r.timed_out ? "timed out after " + std::to_string(r.duration_ms) + " ms: " + r.error
                        : r.error;
  if (a.error.size() > kErrorExcerptBytes) a.error.resize(kErrorExcerptBytes);
  switch (d.kind) {
    case Decision::Kind::kSuccess:
      a.outcome = engine::AttemptOutcome::kOk;
      ++stats_.delivered;
      ts.consecutive_failures = 0;
      break;
    case Decision::Kind::kRetry:
      a.outcome = engine::AttemptOutcome::kRetry;
      ++stats_.failed;
      ++ts.consecutive_failures;
      break;
    case Decision::Kind::kDead:
      a.outcome = engine::AttemptOutcome::kDead;
      a.error += a.error.empty() ? d.reason : " (" + d.reason + ")";
      ++stats_.failed;
      ++stats_.dead_letters;
      ++ts.consecutive_failures;
      break;
  }
  const bool success = d.kind == Decision::Kind::kSuccess;
  const bool dead = d.kind == Decision::Kind::kDead;
  if (metrics_ != nullptr) {
    TopicCounters& m = metrics_->Topic(lease.topic);
    ++(success ? m.delivered : m.failed);
    if (d.kind == Decision::Kind::kRetry) ++m.retried;
    if (dead) ++m.dead_lettered;
    Metrics::KindMetrics& km = metrics_->Kind(KindOfUrl(lease.spec->target->url));
    ++(success ? km.ok : dead ? km.dead : km.retry);
  }
  engine_.PushDone(lease.id, a, d.delay_ms, [id = lease.id](const Status& s) {
    if (!s.ok() && s.code() != StatusCode::kConflict) {
      spdlog::error("delivery: recording job {}: {}", id, s.ToString());
    }
  });
  if (!success) {
    auto settings = engine_.SettingsOf(lease.topic);
    if (settings && settings->alert) {
      const engine::AlertRule& rule = *settings->alert;
      if (dead && rule.on_dead_letter) {
        MaybeAlert(lease.topic, ts, "dead_letter", lease.id, a.error);
      } else if (rule.consecutive_failures > 0 &&
                 ts.consecutive_failures >= rule.consecutive_failures) {
        MaybeAlert(lease.topic, ts, "consecutive_failures", lease.id, a.error);
      }
    }
  }
  OnReady(lease.topic);
}

void Dispatcher::MaybeAlert(const std::string& topic, TopicState& ts, const char* event,
                            uint64_t job_id, const std::string& error) {
  auto settings = engine_.SettingsOf(topic);
  const engine::AlertRule& rule = *settings->alert;
  const int64_t now_ms = clock_.WallMillis();
  if (ts.last_alert_ms >= 0 && now_ms - ts.last_alert_ms < rule.min_interval_s * 1000) {
    ++stats_.alerts_suppressed;
    return;
  }
  ts.last_alert_ms = now_ms;
  ++stats_.alerts_sent;
  if (metrics_ != nullptr) ++metrics_->Topic(topic).alerts;
  nlohmann::json body = {{"event", event},      {"topic", topic},
                         {"job_id", job_id},    {"consecutive_failures", ts.consecutive_failures},
                         {"last_error", error}, {"at", FormatRfc3339Ms(now_ms)}};
  // The topic's counts (in cluster mode the cluster's, read aside).
  engine_.Topic(topic, [this, topic, body = std::move(body),
                        webhook = rule.webhook](Result<engine::TopicInfo> info) mutable {
    body["dead_letters"] = info.ok() ? info->buried : 0;
    body["ready"] = info.ok() ? info->ready : 0;
    OutRequest req;
    req.url = webhook;
    req.headers.push_back("Content-Type: application/json");
    req.body = DumpJson(body);
    req.timeout_ms = kAlertTimeoutMs;
    client_.Send(std::move(req), [topic](OutResult r) {
      if (r.status < 200 || r.status >= 300) {
        spdlog::warn("alert webhook of topic {} failed: {}", topic, r.error);
      }
    });
  });
}

}  // namespace delayd::delivery
