#include "http/job_json.h"

#include <gtest/gtest.h>

#include "common/time_format.h"
#include "delivery/target_policy.h"

namespace delayd::http {
namespace {

using nlohmann::json;

constexpr int64_t kNowMs = 1'795'305'600'000;  // 2026-11-22T00:00:00Z

Result<engine::NewJob> Parse(const std::string& text, const JobLimits& limits = {}) {
  return ParseNewJob(json::parse(text), text, "", limits, kNowMs);
}

std::string Error(const Result<engine::NewJob>& r) {
  return r.ok() ? "(ok)" : r.status().field() + ": " + r.status().message();
}

TEST(JobJsonTest, AJsonBodyIsKeptAsTheTextSubmittedAndReadsBackSo) {
  const std::string text = R"({"key":"order-8812", "body": {"b" : 1.50,  "a":[ "\u00e9" ]}})";
  Result<engine::NewJob> n = Parse(text);
  ASSERT_TRUE(n.ok()) << Error(n);
  EXPECT_EQ(n->body, R"({"b" : 1.50,  "a":[ "\u00e9" ]})") << "not re-rendered";
  EXPECT_EQ(n->spec.encoding, engine::BodyEncoding::kJson);
  EXPECT_EQ(n->key, "order-8812");

  engine::JobInfo info;
  info.record.id = 7;
  info.record.tube = "orders";
  info.record.body = n->body;
  info.state = engine::JobState::kDelayed;
  info.spec = std::make_shared<engine::JobSpec>(n->spec);
  const std::string rendered = RenderJob(info);
  EXPECT_NE(rendered.find(R"("body":{"b" : 1.50,  "a":[ "\u00e9" ]})"), std::string::npos)
      << rendered;
  EXPECT_EQ(json::parse(rendered)["state"], "delayed");
}

TEST(JobJsonTest, BytesGoInAndOutAsBase64) {
  Result<engine::NewJob> n = Parse(R"({"body_base64": "AP8K"})");
  ASSERT_TRUE(n.ok()) << Error(n);
  EXPECT_EQ(n->body, std::string("\x00\xff\n", 3));
  EXPECT_EQ(n->spec.encoding, engine::BodyEncoding::kBase64);
  std::string out;
  JsonWriter w(out);
  w.BeginObject();
  WriteBody(w, n->body, n->spec.encoding);
  w.EndObject();
  EXPECT_EQ(out, R"({"body_base64":"AP8K"})");
  // A beanstalk body that is not JSON reads back as base64, one that is as JSON.
  out.clear();
  JsonWriter w2(out);
  w2.BeginObject();
  WriteBody(w2, "[1,2]", engine::BodyEncoding::kRaw);
  w2.EndObject();
  EXPECT_EQ(out, R"({"body":[1,2]})");
}

TEST(JobJsonTest, DueTimeIsADelayOrAnInstantNeverBoth) {
  Result<engine::NewJob> n = Parse(R"({"delay": "30m"})");
  ASSERT_TRUE(n.ok()) << Error(n);
  EXPECT_EQ(n->run_at_ms, kNowMs + 1'800'000);
  n = Parse(R"({"run_at": "2026-11-22T09:00:00+08:00"})");
  ASSERT_TRUE(n.ok()) << Error(n);
  EXPECT_EQ(n->run_at_ms, kNowMs + 3'600'000);
  EXPECT_EQ(Error(Parse(R"({"delay": 1, "run_at": "2026-11-22T00:00:00Z"})")),
            "run_at: give either delay or run_at");
  EXPECT_EQ(Error(Parse(R"({"run_at": "tomorrow"})")).substr(0, 7), "run_at:");
  EXPECT_EQ(Error(Parse(R"({"delay": "1d"})", JobLimits{.max_delay_ms = 3'600'000})),
            "delay: is longer than the longest delay");
}

TEST(JobJsonTest, EachBadFieldIsNamedWithItsPlaceInABatch) {
  auto batch_error = [](const std::string& text) {
    Result<engine::NewJob> r = ParseNewJob(json::parse(text), text, "[3]", JobLimits{}, kNowMs);
    return r.ok() ? "(ok)" : r.status().field();
  };
  EXPECT_EQ(batch_error(R"({"priority": -1})"), "[3].priority");
  EXPECT_EQ(batch_error(R"({"priority": 4294967296})"), "[3].priority");
  EXPECT_EQ(batch_error(R"({"ttr_ms": 999})"), "[3].ttr_ms");
  EXPECT_EQ(batch_error(R"({"key": ""})"), "[3].key");
  EXPECT_EQ(batch_error(R"({"key": "timer:1:2"})"), "[3].key");
  EXPECT_EQ(batch_error(R"({"body": 1, "body_base64": "AA=="})"), "[3].body_base64");
  EXPECT_EQ(batch_error(R"({"body_base64": "***"})"), "[3].body_base64");
  EXPECT_EQ(batch_error(R"({"target": {"url": "gopher://x"}})"), "[3].target.url");
  EXPECT_EQ(batch_error(R"({"colour": "red"})"), "[3].colour");
  EXPECT_EQ(batch_error(R"({"priority": 4294967295, "ttr_ms": "1s"})"), "(ok)");
}

TEST(JobJsonTest, LimitsAndTheTargetPolicyApply) {
  JobLimits limits;
  limits.max_body_bytes = 4;
  limits.max_key_bytes = 3;
  EXPECT_EQ(Parse(R"({"body": "12"})", limits).ok(), true) << "\"12\" is 4 bytes";
  EXPECT_EQ(Error(Parse(R"({"body": "123"})", limits)).substr(0, 5), "body:");
  EXPECT_EQ(Error(Parse(R"({"key": "abcd"})", limits)).substr(0, 4), "key:");
  Result<delivery::TargetPolicy> policy = delivery::TargetPolicy::Make({}, {"10.0.0.0/8"});
  ASSERT_TRUE(policy.ok());
  limits = JobLimits{.targets = &*policy};
  EXPECT_EQ(Error(Parse(R"({"target": {"url": "http://10.1.2.3/hook"}})", limits)).substr(0, 11),
            "target.url:");
  EXPECT_TRUE(Parse(R"({"target": {"url": "http://192.168.1.2/hook"}})", limits).ok());
}

TEST(JobJsonTest, APatchChangesOnlyWhatItNames) {
  const std::string text = R"({"priority": 5, "target": null})";
  Result<engine::JobPatch> p = ParseJobPatch(json::parse(text), text, JobLimits{}, kNowMs);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->priority, 5u);
  ASSERT_TRUE(p->target.has_value());
  EXPECT_FALSE(p->target->has_value()) << "null removes the target";
  EXPECT_FALSE(p->retry.has_value());
  EXPECT_FALSE(p->body.has_value());
  EXPECT_FALSE(p->due_ms.has_value());
  const std::string bad = R"({"key": "k"})";
  EXPECT_EQ(ParseJobPatch(json::parse(bad), bad, JobLimits{}, kNowMs).status().field(), "key")
      << "a key cannot change";
}

}  // namespace
}  // namespace delayd::http
