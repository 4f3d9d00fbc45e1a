#include "rpc/transcode.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/percent_encoding.h"
#include "delayd/v1/jobs.pb.h"
#include "delayd/v1/timers.pb.h"

namespace delayd::rpc {
namespace {

using nlohmann::json;

TEST(TranscodeTest, ASubmissionIsTheHttpApisJson) {
  v1::SubmitRequest req;
  req.set_topic("orders");
  req.set_key("order-8812");
  req.set_priority(0);  // optional: 0 is sent
  req.mutable_delay()->set_seconds(90);
  req.mutable_delay()->set_nanos(500'000'000);
  req.set_ttr_ms(30'000);
  req.set_body(std::string("\x00\xff bytes", 8));
  req.mutable_target()->set_url("grpc://127.0.0.1:9000");
  (*req.mutable_target()->mutable_headers())["x-tenant"] = "7";
  req.mutable_retry()->set_max_attempts(3);

  Result<std::string> text = RequestJson(req, {"topic"});
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  const json j = json::parse(*text);
  EXPECT_FALSE(j.contains("topic"));
  EXPECT_EQ(j["key"], "order-8812");
  EXPECT_EQ(j["priority"], 0);
  EXPECT_EQ(j["delay"], 90'500);   // milliseconds, a number
  EXPECT_EQ(j["ttr_ms"], 30'000);  // a number, not proto3 JSON's string
  EXPECT_EQ(j["body_base64"], "AP8gYnl0ZXM=");
  EXPECT_FALSE(j.contains("body"));
  EXPECT_FALSE(j.contains("body_is_json"));
  EXPECT_EQ(j["target"]["headers"]["x-tenant"], "7");
  EXPECT_EQ(j["retry"], json({{"max_attempts", 3}}));
}

TEST(TranscodeTest, AJsonBodyIsSentAsItsOwnText) {
  v1::SubmitRequest req;
  req.set_body(R"({"z": 1.50, "a": [true]})");
  req.set_body_is_json(true);
  req.mutable_run_at()->set_seconds(1'795'000'000);
  Result<std::string> text = RequestJson(req, {"topic"});
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find(R"("body":{"z": 1.50, "a": [true]})"), std::string::npos) << *text;
  EXPECT_EQ(json::parse(*text)["run_at"], "2026-11-18T11:06:40.000Z");

  req.set_body("{not json");
  Result<std::string> bad = RequestJson(req, {}, "jobs[2]");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().field(), "jobs[2].body");
  // Nested deeper than any request may be: refused before it is parsed.
  req.set_body(std::string(100'000, '['));
  EXPECT_EQ(RequestJson(req).status().field(), "body");
}

TEST(TranscodeTest, ImpossibleTimesAndUnknownEnumValuesAreRefusedByName) {
  v1::SubmitRequest req;
  req.mutable_run_at()->set_seconds(300'000'000'000);  // year 11476
  EXPECT_EQ(RequestJson(req).status().field(), "run_at");
  req.clear_run_at();
  req.mutable_delay()->set_seconds(-5);
  EXPECT_EQ(RequestJson(req).status().field(), "delay");

  v1::ListJobsRequest list;
  list.set_state(static_cast<v1::JobState>(42));  // an open enum keeps it
  Result<std::string> text = RequestJson(list);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().field(), "state");
  list.set_state(v1::JOB_STATE_BURIED);
  EXPECT_EQ(json::parse(RequestJson(list).value())["state"], "buried");
}

TEST(TranscodeTest, AJobReadsBackWithItsBodyByteForByte) {
  const std::string answer = R"({"id":12,"topic":"orders","key":null,"state":"reserved",
    "priority":5,"due_at":"2026-11-27T10:00:00.250Z","timer":null,"ttr_ms":30000,"attempts":2,
    "target":{"url":"http://127.0.0.1:1/x","method":"POST","headers":{"a":"b"}},"retry":null,
    "last_error":"HTTP 503","body":{"z": 1.50},"lease":{"lease":3,
    "expires_at":"2026-11-27T10:00:30Z","holder":"consumer"},"counters":{"reserves":2}})";
  v1::Job job;
  Status s = FillFromJson(answer, {&job});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(job.id(), 12u);
  EXPECT_EQ(job.key(), "");
  EXPECT_EQ(job.state(), v1::JOB_STATE_RESERVED);
  EXPECT_EQ(job.due_at().seconds(), 1'795'773'600);
  EXPECT_EQ(job.due_at().nanos(), 250'000'000);
  EXPECT_FALSE(job.has_timer());
  EXPECT_EQ(job.body(), R"({"z": 1.50})");
  EXPECT_TRUE(job.body_is_json());
  EXPECT_EQ(job.target().headers().at("a"), "b");
  EXPECT_EQ(job.lease().lease(), 3u);
  EXPECT_EQ(job.lease().holder(), "consumer");
  EXPECT_EQ(job.last_error(), "HTTP 503");

  v1::Job bytes;
  ASSERT_TRUE(FillFromJson(R"({"id":1,"body_base64":"AP8="})", {&bytes}).ok());
  EXPECT_EQ(bytes.body(), std::string("\x00\xff", 2));
  EXPECT_FALSE(bytes.body_is_json());

  // An answer that does not fit the message is a bug, said as one.
  v1::Job misfit;
  Status m = FillFromJson(R"({"id":"twelve"})", {&misfit});
  EXPECT_EQ(m.code(), StatusCode::kInternal);
  EXPECT_NE(m.message().find("id"), std::string::npos);
}

TEST(TranscodeTest, RepeatedMessagesAndTimesFill) {
  v1::FiresResponse fires;
  ASSERT_TRUE(FillFromJson(R"({"timer_id":4,"fires":[{"fire_at":"2026-11-27T09:00:00Z",
      "outcome":"created","job_id":9,"job_state":"done"},{"fire_at":"2026-11-28T09:00:00Z",
      "outcome":"skipped-overlap","job_id":null,"job_state":null}]})",
                           {&fires})
                  .ok());
  ASSERT_EQ(fires.fires_size(), 2);
  EXPECT_EQ(fires.fires(0).job_state(), v1::JOB_STATE_DONE);
  EXPECT_EQ(fires.fires(1).outcome(), "skipped-overlap");
  EXPECT_EQ(fires.fires(1).fire_at().seconds() - fires.fires(0).fire_at().seconds(), 86'400);
}

TEST(TranscodeTest, AProblemReadsBack) {
  Problem p = ProblemFromJson(400, R"({"type":"https://delayd.dev/problems/invalid-request",
      "title":"Invalid request","status":400,"detail":"unknown field","field":"[2].colour"})");
  EXPECT_EQ(p.slug, "invalid-request");
  EXPECT_EQ(p.field, "[2].colour");
  EXPECT_EQ(p.detail, "unknown field");
  Problem unknown = ProblemFromJson(503, R"({"type":"https://delayd.dev/problems/outcome-unknown",
      "detail":"the commit broke","job_ids":[5,9]})");
  EXPECT_EQ(unknown.job_ids, (std::vector<uint64_t>{5, 9}));
  EXPECT_EQ(ProblemFromJson(502, "<html>").detail, "HTTP status 502");
}

// The listener builds paths and queries with it (and delayctl).
TEST(TranscodeTest, PercentEncodingKeepsOnlyUnreservedCharacters) {
  EXPECT_EQ(PercentEncode("order 8812/ä?&"), "order%208812%2F%C3%A4%3F%26");
  EXPECT_EQ(PercentEncode("a-b_c.d~"), "a-b_c.d~");
}

}  // namespace
}  // namespace delayd::rpc
