// What a job carries besides beanstalkd's fields: its push target and retry
// policy, and a topic's settings. Plain values; JSON forms in spec_json.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace delayd::engine {

// beanstalkd's largest delay, ttr and pause, 2^32-1 s: the longest any of
// them may be, over either front door.
inline constexpr int64_t kMaxDurationMs = 4'294'967'295'000LL;
// beanstalkd's priorities: 0 (most urgent) to 2^32-1.
inline constexpr uint64_t kMaxPriority = 4'294'967'295ULL;
// The largest job body unless configured otherwise (beanstalkd's -z default).
inline constexpr uint64_t kDefaultMaxJobBytes = 65'535;

// Where a push job is delivered.
struct Target {
  std::string url;  // http:// or https://
  std::string method = "POST";
  std::vector<std::pair<std::string, std::string>> headers;
  int64_t timeout_ms = 10'000;  // the whole request, connect to last byte
};

struct RetryPolicy {
  uint32_t max_attempts = 10;  // deliveries in all, the first included
  int64_t initial_backoff_ms = 1000;
  int64_t max_backoff_ms = 600'000;
  double multiplier = 2.0;
  bool jitter = true;      // each backoff is drawn from [backoff/2, backoff]
  bool retry_4xx = false;  // retry 4xx other than 408 and 429 instead of dead-lettering
  int64_t max_age_ms = 0;  // no retry once this long past the first due time; 0: no limit
};

// How the body was given, so it reads back the same way.
enum class BodyEncoding : uint8_t { kRaw, kJson, kBase64 };

// A job's own settings. Immutable once shared; a change makes a new one.
struct JobSpec {
  std::optional<Target> target;  // set: a push job
  std::optional<RetryPolicy> retry;
  BodyEncoding encoding = BodyEncoding::kRaw;
  // The submitter's W3C trace context (common/trace_context.h): its
  // traceparent as version 00, and its tracestate; empty when none. Each
  // push attempt sends the trace id on under a parent id of its own.
  std::string traceparent;
  std::string tracestate;
};

struct AlertRule {
  std::string webhook;
  bool on_dead_letter = true;
  uint32_t consecutive_failures = 0;  // 0: no alert on failure streaks
  int64_t min_interval_s = 300;
};

// A topic's settings. Defaults for target, retry and ttr apply when a job is
// submitted (over either protocol) without its own.
struct TopicSettings {
  std::optional<Target> target;
  std::optional<RetryPolicy> retry;
  int64_t ttr_ms = 0;  // 0: the submitter's or the server default
  std::string signing_secret;
  double rate_limit_per_s = 0;   // 0: unlimited
  uint32_t max_concurrency = 0;  // 0: the server's --topic-concurrency
  std::optional<AlertRule> alert;
};

}  // namespace delayd::engine
