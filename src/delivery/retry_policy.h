// What a delivery's outcome means for its job: done, retry later, or dead
// letter. Pure, so the policy is tested without a network.
#pragma once

#include <cstdint>
#include <string>

#include "delivery/http_client.h"
#include "engine/spec.h"

namespace delayd::delivery {

struct Decision {
  enum class Kind { kSuccess, kRetry, kDead };
  Kind kind = Kind::kSuccess;
  int64_t delay_ms = 0;  // kRetry
  std::string reason;    // kDead: why no retry
};

// Backoff before attempt `attempt + 1` after `attempt` failures:
// initial * multiplier^(attempt-1), at most max; with jitter, drawn
// uniformly from [b/2, b] using `rand01` in [0, 1).
int64_t Backoff(const engine::RetryPolicy& p, uint32_t attempt, double rand01);

// A gRPC status code's name ("UNAVAILABLE"; "UNKNOWN_CODE" for one gRPC
// does not define), and whether a receiver's answer with it is retried:
// UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, INTERNAL and
// UNKNOWN (and CANCELLED, which only delayd's own shutdown makes).
const char* GrpcCodeName(int code);
bool GrpcCodeRetried(int code);

// HTTP: 2xx succeeds. Transport errors, timeouts, 408, 429 and 5xx are
// retried; other statuses are dead at once unless the policy retries 4xx. A
// Retry-After header replaces the backoff. gRPC (r.grpc_code >= 0): OK
// succeeds, GrpcCodeRetried codes are retried, others are dead at once
// unless the policy's retry_4xx (retry refusals) is set. A broker target
// (r.broker): acknowledged succeeds, failed is retried, rejected is dead at
// once unless retry_4xx is set. Retries stop after
// max_attempts or once the next try would come max_age_ms after the job was
// created.
Decision Decide(const engine::RetryPolicy& p, const OutResult& r, uint32_t attempt, int64_t now_ms,
                int64_t created_ms, double rand01);

}  // namespace delayd::delivery
