#include "delivery/retry_policy.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "common/time_format.h"

namespace delayd::delivery {

int64_t Backoff(const engine::RetryPolicy& p, uint32_t attempt, double rand01) {
  const double exp =
      std::pow(p.multiplier, static_cast<double>(std::max<uint32_t>(attempt, 1) - 1));
  double b = std::min(static_cast<double>(p.max_backoff_ms),
                      static_cast<double>(p.initial_backoff_ms) * exp);
  if (p.jitter) b = b / 2 + b / 2 * rand01;
  return std::max<int64_t>(1, static_cast<int64_t>(b));
}

const char* GrpcCodeName(int code) {
  static constexpr const char* kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  if (code >= 0 && code < static_cast<int>(std::size(kNames))) return kNames[code];
  return "UNKNOWN_CODE";
}

bool GrpcCodeRetried(int code) {
  switch (code) {
    case 1:   // CANCELLED
    case 2:   // UNKNOWN
    case 4:   // DEADLINE_EXCEEDED
    case 8:   // RESOURCE_EXHAUSTED
    case 10:  // ABORTED
    case 13:  // INTERNAL
    case 14:  // UNAVAILABLE
      return true;
    default:
      return false;
  }
}

Decision Decide(const engine::RetryPolicy& p, const OutResult& r, uint32_t attempt, int64_t now_ms,
                int64_t created_ms, double rand01) {
  Decision d;
  using Broker = OutResult::Broker;
  if (r.broker == Broker::kAcknowledged) return d;
  if (r.broker == Broker::kNone &&
      (r.grpc_code == 0 || (r.grpc_code < 0 && r.status >= 200 && r.status < 300))) {
    return d;
  }
  if (r.not_sent) {
    d.kind = Decision::Kind::kDead;
    d.reason = "not retried";
    return d;
  }
  if (r.broker != Broker::kNone) {
    if (r.broker == Broker::kRejected && !p.retry_4xx) {
      d.kind = Decision::Kind::kDead;
      d.reason = "the broker's refusal is not retried";
      return d;
    }
  } else if (r.grpc_code > 0) {
    if (!GrpcCodeRetried(r.grpc_code) && !p.retry_4xx) {
      d.kind = Decision::Kind::kDead;
      d.reason = "gRPC " + std::string(GrpcCodeName(r.grpc_code)) + " is not retried";
      return d;
    }
  } else {
    const bool retryable = r.status == 0 || r.status == 408 || r.status == 429 || r.status >= 500 ||
                           (p.retry_4xx && r.status >= 400);
    if (!retryable) {
      d.kind = Decision::Kind::kDead;
      d.reason = "HTTP " + std::to_string(r.status) + " is not retried";
      return d;
    }
  }
  if (attempt >= p.max_attempts) {
    d.kind = Decision::Kind::kDead;
    d.reason = "gave up after " + std::to_string(attempt) + " attempts";
    return d;
  }
  d.kind = Decision::Kind::kRetry;
  d.delay_ms = Backoff(p, attempt, rand01);
  if (!r.retry_after.empty()) {
    if (auto after = ParseRetryAfterMs(r.retry_after, now_ms))
      d.delay_ms = std::max<int64_t>(*after, 1);
  }
  if (p.max_age_ms > 0 && now_ms + d.delay_ms - created_ms > p.max_age_ms) {
    d.kind = Decision::Kind::kDead;
    d.reason = "the next attempt would pass max_age_ms";
  }
  return d;
}

}  // namespace delayd::delivery
