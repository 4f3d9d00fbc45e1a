#include "engine/attempt_log.h"

#include <gtest/gtest.h>

namespace delayd::engine {
namespace {

Attempt Make(uint32_t n, AttemptOutcome o, std::string error = "") {
  return Attempt{.number = n,
                 .started_ms = 1'700'000'000'000 + n,
                 .duration_ms = 10 + n,
                 .outcome = o,
                 .http_status = o == AttemptOutcome::kOk ? 200 : 0,
                 .error = std::move(error)};
}

TEST(AttemptLogTest, WhatIsAppendedReadsBackFieldForField) {
  std::string log;
  AppendAttempt(log, Make(1, AttemptOutcome::kRetry, "timed out after 5000 ms: \"x\"\n"), 20);
  AppendAttempt(log, Make(2, AttemptOutcome::kDead, "HTTP 500: \xE2\x9C\x93"), 20);
  Attempt traced = Make(3, AttemptOutcome::kOk);
  traced.parent_id = "00f067aa0ba902b7";
  AppendAttempt(log, traced, 20);
  const std::vector<Attempt> back = ReadAttempts(log);
  ASSERT_EQ(back.size(), 3u) << log;
  for (uint32_t i = 0; i < 3; ++i) {
    const Attempt want = Make(i + 1, back[i].outcome, back[i].error);
    EXPECT_EQ(back[i].number, want.number);
    EXPECT_EQ(back[i].started_ms, want.started_ms);
    EXPECT_EQ(back[i].duration_ms, want.duration_ms);
    EXPECT_EQ(back[i].http_status, want.http_status);
  }
  EXPECT_EQ(back[0].outcome, AttemptOutcome::kRetry);
  EXPECT_EQ(back[0].error, "timed out after 5000 ms: \"x\"\n");
  EXPECT_EQ(back[1].outcome, AttemptOutcome::kDead);
  EXPECT_EQ(back[1].error, "HTTP 500: \xE2\x9C\x93");
  EXPECT_EQ(back[2].outcome, AttemptOutcome::kOk);
  EXPECT_EQ(back[0].parent_id, "") << "no trace context, none written";
  EXPECT_EQ(back[2].parent_id, "00f067aa0ba902b7");
}

TEST(AttemptLogTest, KeepsOnlyTheLatestEntriesAsTheyWereWritten) {
  std::string log;
  for (uint32_t n = 1; n <= 3; ++n) AppendAttempt(log, Make(n, AttemptOutcome::kRetry), 3);
  const std::string first_three = log;
  AppendAttempt(log, Make(4, AttemptOutcome::kRetry), 3);
  AppendAttempt(log, Make(5, AttemptOutcome::kOk), 3);
  const std::vector<Attempt> back = ReadAttempts(log);
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[0].number, 3u);
  EXPECT_EQ(back[2].number, 5u);
  // The kept entry's text is unchanged: the third entry of the first log.
  const std::string third = first_three.substr(first_three.rfind(",{") + 1);
  EXPECT_EQ(log.substr(1, third.size() - 1), third.substr(0, third.size() - 1));
}

TEST(AttemptLogTest, AnEmptyOrUnreadableLogHasNoAttempts) {
  EXPECT_TRUE(ReadAttempts("").empty());
  EXPECT_TRUE(ReadAttempts("[").empty());
  EXPECT_TRUE(ReadAttempts("{\"attempt\":1}").empty());
  EXPECT_TRUE(ReadAttempts(std::string(1000, '[')).empty());
  std::string log = "not json";
  AppendAttempt(log, Make(1, AttemptOutcome::kOk), 20);
  EXPECT_EQ(ReadAttempts(log).size(), 1u) << "a damaged log starts over";
}

TEST(AttemptLogTest, OutcomesRoundTripThroughTheirNames) {
  for (AttemptOutcome o : {AttemptOutcome::kOk, AttemptOutcome::kRetry, AttemptOutcome::kDead}) {
    EXPECT_EQ(ParseOutcome(OutcomeName(o)), o);
  }
  EXPECT_EQ(ParseOutcome("released"), std::nullopt);
}

}  // namespace
}  // namespace delayd::engine
