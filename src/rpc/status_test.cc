#include "rpc/status.h"

#include <gtest/gtest.h>

#include "delayd/v1/errors.pb.h"

namespace delayd::rpc {
namespace {

// The details a client finds in the grpc-status-details-bin trailer.
delayd::v1::Status DetailsOf(const grpc::Status& g) {
  delayd::v1::Status d;
  EXPECT_TRUE(d.ParseFromString(g.error_details()));
  return d;
}

TEST(RpcStatusTest, ARefusedFieldIsABadRequestGoogleClientsRead) {
  grpc::Status g = ToGrpc(Status::InvalidField("delay", "is longer than the longest delay"));
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(g.error_message(), "delay: is longer than the longest delay");
  delayd::v1::Status d = DetailsOf(g);
  EXPECT_EQ(d.code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(d.message(), g.error_message());
  ASSERT_EQ(d.details_size(), 2);
  EXPECT_EQ(d.details(0).type_url(), "type.googleapis.com/google.rpc.BadRequest");
  delayd::v1::BadRequest bad;
  ASSERT_TRUE(bad.ParseFromString(d.details(0).value()));
  ASSERT_EQ(bad.field_violations_size(), 1);
  EXPECT_EQ(bad.field_violations(0).field(), "delay");
  EXPECT_EQ(bad.field_violations(0).description(), "is longer than the longest delay");
  EXPECT_EQ(d.details(1).type_url(), "type.googleapis.com/delayd.v1.Problem");
  delayd::v1::Problem p;
  ASSERT_TRUE(p.ParseFromString(d.details(1).value()));
  EXPECT_EQ(p.type(), "https://delayd.dev/problems/invalid-request");
  EXPECT_EQ(p.field(), "delay");
}

TEST(RpcStatusTest, AnOutcomeUnknownNamesTheJobsToLookUp) {
  grpc::Status g = ToGrpc(Status::Unknown("the commit's outcome is unknown", "5,9"));
  EXPECT_EQ(g.error_code(), grpc::StatusCode::UNKNOWN);
  delayd::v1::Status d = DetailsOf(g);
  ASSERT_EQ(d.details_size(), 1);  // no field: no BadRequest
  delayd::v1::Problem p;
  ASSERT_TRUE(p.ParseFromString(d.details(0).value()));
  EXPECT_EQ(p.type(), "https://delayd.dev/problems/outcome-unknown");
  EXPECT_EQ(std::vector<uint64_t>(p.job_ids().begin(), p.job_ids().end()),
            (std::vector<uint64_t>{5, 9}));
}

TEST(RpcStatusTest, EachStatusCodeHasItsGrpcCode) {
  auto code = [](const Status& s) { return ToGrpc(s).error_code(); };
  EXPECT_TRUE(ToGrpc(Status::Ok()).ok());
  EXPECT_EQ(code(Status::NotFound("no job")), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(code(Status::Conflict("the job is reserved")), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(code(Status::ConflictField("name", "is in use")), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(code(Status::Unavailable("draining")), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(code(Status::Fenced("lease moved")), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(code(Status::IoError("disk")), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(code(Status::NoSpace("full")), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(code(Status::Internal("bug")), grpc::StatusCode::INTERNAL);
}

// The HTTP API's own refusals, which no engine status makes, by their HTTP
// status.
TEST(RpcStatusTest, TheApisOwnRefusalsHaveTheirCodes) {
  auto code = [](int http, const char* slug) {
    Problem p;
    p.http_status = http;
    p.slug = slug;
    return GrpcCode(p);
  };
  EXPECT_EQ(code(401, "unauthorized"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(code(403, "insufficient-scope"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(code(405, "method-not-allowed"), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(code(429, "rate-limited"), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(code(418, "teapot"), grpc::StatusCode::INTERNAL);
}

TEST(RpcStatusTest, AStoreFailuresTextStaysInTheLog) {
  grpc::Status g = ToGrpc(Status::IoError("could not write /srv/delayd/jobs.db"));
  EXPECT_EQ(g.error_message().find("jobs.db"), std::string::npos);
  EXPECT_NE(g.error_message().find("in the server's log"), std::string::npos);
}

}  // namespace
}  // namespace delayd::rpc
