#include "common/problem.h"

#include <gtest/gtest.h>

namespace delayd {
namespace {

TEST(ProblemTest, ARefusedFieldIsNamedWithTheStatusMessage) {
  Problem p = ProblemOf(Status::InvalidField("retry.max_attempts", "must be from 1 to 1000"));
  EXPECT_EQ(p.http_status, 400);
  EXPECT_EQ(p.type(), "https://delayd.dev/problems/invalid-request");
  EXPECT_EQ(p.field, "retry.max_attempts");
  EXPECT_EQ(p.detail, "must be from 1 to 1000");
  EXPECT_TRUE(p.request_id.empty());
}

TEST(ProblemTest, AnOutcomeUnknownListsItsJobsAndNoField) {
  Problem p = ProblemOf(Status::Unknown("the connection broke", "12,13,,x,40"));
  EXPECT_EQ(p.http_status, 503);
  EXPECT_EQ(p.slug, "outcome-unknown");
  EXPECT_EQ(p.job_ids, (std::vector<uint64_t>{12, 13, 40}));
  EXPECT_TRUE(p.field.empty());
  EXPECT_EQ(p.detail, "the connection broke");
}

TEST(ProblemTest, AStoreFailuresOwnTextIsReplacedByARequestId) {
  Problem p = ProblemOf(Status::IoError("disk I/O error in /var/lib/delayd/jobs.db"));
  EXPECT_EQ(p.http_status, 503);
  EXPECT_EQ(p.slug, "storage-unavailable");
  ASSERT_EQ(p.request_id.size(), 12u);
  EXPECT_EQ(p.detail.find("jobs.db"), std::string::npos);
  EXPECT_NE(p.detail.find(p.request_id), std::string::npos);
  EXPECT_NE(ProblemOf(Status::Internal("x")).request_id, p.request_id);
}

TEST(ProblemTest, EachCodeHasItsKind) {
  EXPECT_EQ(ProblemOf(Status::NotFound("no job 7")).http_status, 404);
  EXPECT_EQ(ProblemOf(Status::Conflict("reserved")).http_status, 409);
  EXPECT_EQ(ProblemOf(Status::NoSpace("full")).slug, "storage-full");
  EXPECT_EQ(ProblemOf(Status::Fenced("lease moved")).slug, "unavailable");
  EXPECT_EQ(ProblemOf(Status::Internal("bug")).http_status, 500);
}

}  // namespace
}  // namespace delayd
