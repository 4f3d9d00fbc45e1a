#include "engine/spec_json.h"

#include <cmath>
#include <initializer_list>
#include <string_view>

#include "common/amqp_url.h"
#include "common/grpc_url.h"
#include "common/header_rules.h"
#include "common/kafka_url.h"
#include "common/time_format.h"

namespace delayd::engine {
namespace {

using nlohmann::json;

// Longest timeout or backoff accepted: a day keeps every sum far from overflow.
constexpr int64_t kMaxTimeoutMs = 86'400'000;
constexpr int64_t kMaxBackoffMs = 30LL * 86'400'000;

std::string Join(const std::string& prefix, std::string_view name) {
  return prefix.empty() ? std::string(name) : prefix + "." + std::string(name);
}

Status CheckObject(const json& j, const std::string& prefix,
                   std::initializer_list<std::string_view> known) {
  if (!j.is_object()) return Status::InvalidField(prefix, "must be an object");
  for (const auto& [name, value] : j.items()) {
    bool found = false;
    for (std::string_view k : known) found = found || k == name;
    if (!found) return Status::InvalidField(Join(prefix, name), "unknown field");
  }
  return Status::Ok();
}

Result<int64_t> Int(const json& v, const std::string& field, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return Status::InvalidField(field, "must be an integer");
  int64_t n = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX} ? INT64_MAX
                                                                                : v.get<int64_t>();
  if (n < lo || n > hi) {
    return Status::InvalidField(
        field, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  }
  return n;
}

Result<int64_t> Millis(const json& v, const std::string& field, int64_t lo, int64_t hi) {
  Result<int64_t> ms = ParseMillis(v, field);
  if (!ms.ok()) return ms;
  if (*ms < lo || *ms > hi) {
    return Status::InvalidField(
        field, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + " ms");
  }
  return ms;
}

Result<bool> Bool(const json& v, const std::string& field) {
  if (!v.is_boolean()) return Status::InvalidField(field, "must be true or false");
  return v.get<bool>();
}

Result<std::string> String(const json& v, const std::string& field) {
  if (!v.is_string()) return Status::InvalidField(field, "must be a string");
  return v.get<std::string>();
}

// Checks a header value has no control characters (no header injection).
bool IsHeaderValue(std::string_view s) {
  for (char c : s) {
    if ((static_cast<unsigned char>(c) < 32 && c != '\t') || c == 127) return false;
  }
  return true;
}

}  // namespace

Result<int64_t> ParseMillis(const json& v, const std::string& field, int64_t max_ms) {
  const std::string too_large =
      "is too large: at most " + std::to_string(max_ms) + " ms" +
      (max_ms == kMaxDurationMs ? std::string(" (2^32-1 s)") : std::string());
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max_ms)) {
      return Status::InvalidField(field, too_large);
    }
    const int64_t n = v.get<int64_t>();
    if (n < 0) return Status::InvalidField(field, "must not be negative");
    if (n > max_ms) return Status::InvalidField(field, too_large);
    return n;
  }
  if (v.is_string()) {
    const std::string& text = v.get_ref<const std::string&>();
    bool overflow = false;
    std::optional<int64_t> ms = ParseDurationMs(text, &overflow);
    if (overflow) return Status::InvalidField(field, too_large);
    if (!ms) {
      return Status::InvalidField(field,
                                  "must be milliseconds or a duration like \"30m\", \"1h30m\", "
                                  "\"250ms\" (units ms, s, m, h, d)");
    }
    if (*ms > max_ms) return Status::InvalidField(field, too_large);
    return *ms;
  }
  return Status::InvalidField(field, "must be milliseconds or a duration string");
}

Result<Target> ParseTarget(const json& j, const std::string& prefix) {
  Status s = CheckObject(j, prefix, {"url", "method", "headers", "timeout_ms"});
  if (!s.ok()) return s;
  Target t;
  if (!j.contains("url")) return Status::InvalidField(Join(prefix, "url"), "is required");
  Result<std::string> url = String(j["url"], Join(prefix, "url"));
  if (!url.ok()) return url.status();
  t.url = std::move(*url);
  std::string_view u = t.url;
  const bool grpc = IsGrpcUrl(u);
  if (grpc && !ParseGrpcUrl(u)) {
    return Status::InvalidField(
        Join(prefix, "url"), "must be grpc://HOST:PORT or grpcs://HOST:PORT, with nothing after");
  }
  const bool kafka = IsKafkaUrl(u);
  if (kafka) {
    std::string why;
    std::optional<KafkaUrl> k = ParseKafkaUrl(u, &why);
    // Whether this server has its properties NAME is the API's check
    // (http::CheckTargetUrl), as the target policy's is.
    if (!k) return Status::InvalidField(Join(prefix, "url"), why);
  }
  const bool amqp = IsAmqpUrl(u);
  if (amqp) {
    std::string why;
    if (!ParseAmqpUrl(u, &why)) return Status::InvalidField(Join(prefix, "url"), why);
  }
  bool http = u.rfind("http://", 0) == 0, https = u.rfind("https://", 0) == 0;
  size_t host_start = http ? 7 : 8;
  if (!grpc && !kafka && !amqp &&
      ((!http && !https) || u.size() <= host_start || u[host_start] == '/' || !IsHeaderValue(u) ||
       u.find(' ') != u.npos)) {
    return Status::InvalidField(
        Join(prefix, "url"),
        "must be an absolute http:// or https:// URL, grpc://HOST:PORT "
        "(grpcs://), kafka://BROKER[,BROKER...]/TOPIC or "
        "amqp://[USER:PASS@]HOST[:PORT]/[VHOST]?exchange=NAME&routing_key=KEY");
  }
  if (j.contains("method")) {
    Result<std::string> m = String(j["method"], Join(prefix, "method"));
    if (!m.ok()) return m.status();
    static constexpr std::string_view kMethods[] = {"GET", "POST", "PUT", "PATCH", "DELETE"};
    bool ok = false;
    for (auto k : kMethods) ok = ok || *m == k;
    if (!ok) {
      return Status::InvalidField(Join(prefix, "method"),
                                  "must be one of GET, POST, PUT, PATCH, DELETE");
    }
    t.method = std::move(*m);
  }
  if (j.contains("headers")) {
    const json& h = j["headers"];
    std::string field = Join(prefix, "headers");
    if (!h.is_object()) return Status::InvalidField(field, "must be an object of strings");
    for (const auto& [name, value] : h.items()) {
      if (!value.is_string()) return Status::InvalidField(Join(field, name), "must be a string");
      std::string fault = TargetHeaderFault(name, value.get<std::string>());
      if (!fault.empty())
        return Status::InvalidField(Join(field, name), "header " + name + " " + fault);
      t.headers.emplace_back(name, value.get<std::string>());
    }
  }
  if (grpc) {
    if (j.contains("method")) {
      return Status::InvalidField(Join(prefix, "method"),
                                  "must be left out for a gRPC target, which is called at "
                                  "delayd.v1.JobReceiver/Deliver");
    }
    for (const auto& [name, value] : t.headers) {
      if (std::string fault = GrpcMetadataNameFault(name); !fault.empty()) {
        return Status::InvalidField(Join(Join(prefix, "headers"), name),
                                    "header " + name + " " + fault);
      }
    }
  }
  if ((kafka || amqp) && j.contains("method")) {
    return Status::InvalidField(Join(prefix, "method"),
                                kafka ? "must be left out for a Kafka target, which is produced to"
                                      : "must be left out for a RabbitMQ target, which is "
                                        "published to");
  }
  if (j.contains("timeout_ms")) {
    Result<int64_t> ms = Millis(j["timeout_ms"], Join(prefix, "timeout_ms"), 1, kMaxTimeoutMs);
    if (!ms.ok()) return ms.status();
    t.timeout_ms = *ms;
  }
  return t;
}

Result<RetryPolicy> ParseRetry(const json& j, const std::string& prefix) {
  Status s = CheckObject(j, prefix,
                         {"max_attempts", "initial_backoff_ms", "max_backoff_ms", "multiplier",
                          "jitter", "retry_4xx", "max_age_ms"});
  if (!s.ok()) return s;
  RetryPolicy r;
  for (const auto& [name, v] : j.items()) {
    std::string field = Join(prefix, name);
    if (name == "max_attempts") {
      Result<int64_t> n = Int(v, field, 1, 1000);
      if (!n.ok()) return n.status();
      r.max_attempts = static_cast<uint32_t>(*n);
    } else if (name == "initial_backoff_ms" || name == "max_backoff_ms" || name == "max_age_ms") {
      Result<int64_t> ms = Millis(v, field, name == "max_age_ms" ? 0 : 1,
                                  name == "max_age_ms" ? 365 * 86'400'000LL : kMaxBackoffMs);
      if (!ms.ok()) return ms.status();
      (name == "initial_backoff_ms" ? r.initial_backoff_ms
       : name == "max_backoff_ms"   ? r.max_backoff_ms
                                    : r.max_age_ms) = *ms;
    } else if (name == "multiplier") {
      if (!v.is_number() || !(v.get<double>() >= 1.0 && v.get<double>() <= 100.0)) {
        return Status::InvalidField(field, "must be a number between 1 and 100");
      }
      r.multiplier = v.get<double>();
    } else {
      Result<bool> b = Bool(v, field);
      if (!b.ok()) return b.status();
      (name == "jitter" ? r.jitter : r.retry_4xx) = *b;
    }
  }
  if (r.initial_backoff_ms > r.max_backoff_ms) {
    return Status::InvalidField(Join(prefix, "initial_backoff_ms"),
                                "must not exceed max_backoff_ms");
  }
  return r;
}

Result<TopicSettings> ParseTopicSettings(const json& j) {
  Status s = CheckObject(
      j, "",
      {"target", "retry", "ttr_ms", "signing_secret", "rate_limit_per_s", "max_concurrency",
       "paused", "alert",
       // read-only fields of GET, so that a GET body can be PUT back
       "name", "counts", "signing_secret_set", "in_flight", "pause_left_ms", "ready_lateness_ms"});
  if (!s.ok()) return s;
  TopicSettings t;
  if (j.contains("target") && !j["target"].is_null()) {
    Result<Target> target = ParseTarget(j["target"], "target");
    if (!target.ok()) return target.status();
    t.target = std::move(*target);
  }
  if (j.contains("retry") && !j["retry"].is_null()) {
    Result<RetryPolicy> retry = ParseRetry(j["retry"], "retry");
    if (!retry.ok()) return retry.status();
    t.retry = *retry;
  }
  if (j.contains("ttr_ms")) {
    Result<int64_t> ms = Millis(j["ttr_ms"], "ttr_ms", 0, kMaxDurationMs);
    if (!ms.ok()) return ms.status();
    t.ttr_ms = *ms;
  }
  if (j.contains("signing_secret") && !j["signing_secret"].is_null()) {
    Result<std::string> secret = String(j["signing_secret"], "signing_secret");
    if (!secret.ok()) return secret.status();
    t.signing_secret = std::move(*secret);
  }
  if (j.contains("rate_limit_per_s")) {
    const json& v = j["rate_limit_per_s"];
    if (!v.is_number() || !(v.get<double>() >= 0 && v.get<double>() <= 1e6)) {
      return Status::InvalidField("rate_limit_per_s", "must be a number from 0 (no limit) to 1e6");
    }
    t.rate_limit_per_s = v.get<double>();
  }
  if (j.contains("max_concurrency")) {
    Result<int64_t> n = Int(j["max_concurrency"], "max_concurrency", 0, 100'000);
    if (!n.ok()) return n.status();
    t.max_concurrency = static_cast<uint32_t>(*n);
  }
  if (j.contains("paused")) {
    Result<bool> b = Bool(j["paused"], "paused");
    if (!b.ok()) return b.status();
  }
  if (j.contains("alert") && !j["alert"].is_null()) {
    const json& a = j["alert"];
    s = CheckObject(a, "alert",
                    {"webhook", "on_dead_letter", "consecutive_failures", "min_interval_s"});
    if (!s.ok()) return s;
    AlertRule rule;
    if (!a.contains("webhook")) return Status::InvalidField("alert.webhook", "is required");
    Result<Target> hook = ParseTarget(json{{"url", a["webhook"]}}, "alert.webhook");
    if (!hook.ok()) return Status::InvalidField("alert.webhook", hook.status().message());
    rule.webhook = hook->url;
    if (a.contains("on_dead_letter")) {
      Result<bool> b = Bool(a["on_dead_letter"], "alert.on_dead_letter");
      if (!b.ok()) return b.status();
      rule.on_dead_letter = *b;
    }
    if (a.contains("consecutive_failures")) {
      Result<int64_t> n =
          Int(a["consecutive_failures"], "alert.consecutive_failures", 0, 1'000'000);
      if (!n.ok()) return n.status();
      rule.consecutive_failures = static_cast<uint32_t>(*n);
    }
    if (a.contains("min_interval_s")) {
      Result<int64_t> n = Int(a["min_interval_s"], "alert.min_interval_s", 0, 7 * 86400);
      if (!n.ok()) return n.status();
      rule.min_interval_s = *n;
    }
    t.alert = std::move(rule);
  }
  return t;
}

json ToJson(const TopicSettings& s, bool with_secret) {
  // The stored form is the shown one, less the secret.
  json j = json::parse(EncodeSettings(s));
  if (!with_secret) {
    // A secret is write-only over the API: say whether one is set.
    j.erase("signing_secret");
    j["signing_secret_set"] = !s.signing_secret.empty();
  }
  return j;
}

}  // namespace delayd::engine
