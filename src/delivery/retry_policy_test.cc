#include "delivery/retry_policy.h"

#include <gtest/gtest.h>

namespace delayd::delivery {
namespace {

engine::RetryPolicy Policy() {
  engine::RetryPolicy p;
  p.max_attempts = 5;
  p.initial_backoff_ms = 1000;
  p.max_backoff_ms = 5000;
  p.multiplier = 2.0;
  p.jitter = false;
  return p;
}

OutResult Status(int s) {
  OutResult r;
  r.status = s;
  return r;
}

TEST(RetryPolicyTest, BackoffGrowsByTheMultiplierUpToTheMaximum) {
  EXPECT_EQ(Backoff(Policy(), 1, 0.5), 1000);
  EXPECT_EQ(Backoff(Policy(), 2, 0.5), 2000);
  EXPECT_EQ(Backoff(Policy(), 3, 0.5), 4000);
  EXPECT_EQ(Backoff(Policy(), 4, 0.5), 5000);
  EXPECT_EQ(Backoff(Policy(), 40, 0.5), 5000);
}

TEST(RetryPolicyTest, JitterDrawsFromTheUpperHalf) {
  engine::RetryPolicy p = Policy();
  p.jitter = true;
  EXPECT_EQ(Backoff(p, 2, 0.0), 1000);
  EXPECT_EQ(Backoff(p, 2, 0.999999), 1999);
}

TEST(RetryPolicyTest, ClassifiesStatuses) {
  for (int s : {200, 201, 204, 299})
    EXPECT_EQ(Decide(Policy(), Status(s), 1, 0, 0, 0).kind, Decision::Kind::kSuccess);
  for (int s : {0, 408, 429, 500, 503, 599})
    EXPECT_EQ(Decide(Policy(), Status(s), 1, 0, 0, 0).kind, Decision::Kind::kRetry) << s;
  for (int s : {301, 400, 404, 410, 422})
    EXPECT_EQ(Decide(Policy(), Status(s), 1, 0, 0, 0).kind, Decision::Kind::kDead) << s;
  engine::RetryPolicy p = Policy();
  p.retry_4xx = true;
  EXPECT_EQ(Decide(p, Status(404), 1, 0, 0, 0).kind, Decision::Kind::kRetry);
}

OutResult Grpc(int code) {
  OutResult r;
  r.grpc_code = code;
  return r;
}

TEST(RetryPolicyTest, ClassifiesGrpcCodes) {
  EXPECT_EQ(Decide(Policy(), Grpc(0), 1, 0, 0, 0).kind, Decision::Kind::kSuccess);
  // UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, INTERNAL,
  // UNKNOWN, and CANCELLED (delayd's own shutdown).
  for (int c : {14, 4, 8, 10, 13, 2, 1})
    EXPECT_EQ(Decide(Policy(), Grpc(c), 1, 0, 0, 0).kind, Decision::Kind::kRetry) << c;
  for (int c : {3, 5, 6, 7, 9, 11, 12, 15, 16, 99}) {
    Decision d = Decide(Policy(), Grpc(c), 1, 0, 0, 0);
    EXPECT_EQ(d.kind, Decision::Kind::kDead) << c;
    EXPECT_EQ(d.reason, std::string("gRPC ") + GrpcCodeName(c) + " is not retried");
  }
  EXPECT_STREQ(GrpcCodeName(3), "INVALID_ARGUMENT");
  EXPECT_STREQ(GrpcCodeName(16), "UNAUTHENTICATED");
  EXPECT_STREQ(GrpcCodeName(99), "UNKNOWN_CODE");
  // An HTTP-looking status beside a gRPC code changes nothing.
  OutResult r = Grpc(3);
  r.status = 200;
  EXPECT_EQ(Decide(Policy(), r, 1, 0, 0, 0).kind, Decision::Kind::kDead);
  engine::RetryPolicy p = Policy();
  p.retry_4xx = true;
  EXPECT_EQ(Decide(p, Grpc(3), 1, 0, 0, 0).kind, Decision::Kind::kRetry);
  EXPECT_EQ(Decide(p, Grpc(3), 5, 0, 0, 0).kind, Decision::Kind::kDead);
}

TEST(RetryPolicyTest, ClassifiesBrokerOutcomes) {
  auto broker = [](OutResult::Broker b) {
    OutResult r;
    r.broker = b;
    if (b != OutResult::Broker::kAcknowledged) r.error = "MSG_SIZE_TOO_LARGE: too large";
    return r;
  };
  using B = OutResult::Broker;
  EXPECT_EQ(Decide(Policy(), broker(B::kAcknowledged), 1, 0, 0, 0).kind, Decision::Kind::kSuccess);
  EXPECT_EQ(Decide(Policy(), broker(B::kFailed), 1, 0, 0, 0).kind, Decision::Kind::kRetry);
  EXPECT_EQ(Decide(Policy(), broker(B::kFailed), 5, 0, 0, 0).kind, Decision::Kind::kDead);
  Decision d = Decide(Policy(), broker(B::kRejected), 1, 0, 0, 0);
  EXPECT_EQ(d.kind, Decision::Kind::kDead);
  EXPECT_EQ(d.reason, "the broker's refusal is not retried");
  engine::RetryPolicy p = Policy();
  p.retry_4xx = true;
  EXPECT_EQ(Decide(p, broker(B::kRejected), 1, 0, 0, 0).kind, Decision::Kind::kRetry);
  // A broker's failure is not read as an HTTP or gRPC answer.
  OutResult r = broker(B::kFailed);
  r.status = 200;
  r.grpc_code = 0;
  EXPECT_EQ(Decide(Policy(), r, 1, 0, 0, 0).kind, Decision::Kind::kRetry);
}

TEST(RetryPolicyTest, StopsAfterMaxAttemptsAndMaxAge) {
  EXPECT_EQ(Decide(Policy(), Status(500), 4, 0, 0, 0).kind, Decision::Kind::kRetry);
  EXPECT_EQ(Decide(Policy(), Status(500), 5, 0, 0, 0).kind, Decision::Kind::kDead);
  engine::RetryPolicy p = Policy();
  p.max_age_ms = 10'000;
  EXPECT_EQ(Decide(p, Status(500), 1, 8'000, 0, 0).kind, Decision::Kind::kRetry);
  EXPECT_EQ(Decide(p, Status(500), 1, 9'500, 0, 0).kind, Decision::Kind::kDead);
}

TEST(RetryPolicyTest, RetryAfterReplacesTheBackoff) {
  OutResult r = Status(503);
  r.retry_after = " 7\r\n";
  EXPECT_EQ(Decide(Policy(), r, 1, 0, 0, 0).delay_ms, 7000);
  r.retry_after = "Thu, 01 Jan 1970 00:00:30 GMT";
  EXPECT_EQ(Decide(Policy(), r, 1, 10'000, 0, 0).delay_ms, 20'000);
  r.retry_after = "garbage";
  EXPECT_EQ(Decide(Policy(), r, 1, 0, 0, 0).delay_ms, 1000);
}

}  // namespace
}  // namespace delayd::delivery
