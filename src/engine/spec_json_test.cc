#include "engine/spec_json.h"

#include <gtest/gtest.h>

namespace delayd::engine {
namespace {

using nlohmann::json;

std::string FieldOf(const Status& s) { return s.ok() ? "(ok)" : s.field(); }

TEST(SpecJsonTest, ATargetIsReadWithItsDefaults) {
  Result<Target> t =
      ParseTarget(json::parse(R"({"url": "https://hooks.example.com/a?b=1"})"), "target");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->url, "https://hooks.example.com/a?b=1");
  EXPECT_EQ(t->method, "POST");
  EXPECT_EQ(t->headers.size(), 0u);
  EXPECT_EQ(t->timeout_ms, 10'000);
}

TEST(SpecJsonTest, EachBadTargetFieldIsNamed) {
  auto field = [](const char* text) {
    Result<Target> t = ParseTarget(json::parse(text), "target");
    return t.ok() ? "(ok)" : t.status().field() + ": " + t.status().message();
  };
  EXPECT_EQ(field(R"({})"), "target.url: is required");
  EXPECT_EQ(field(R"({"url": "ftp://x"})").substr(0, 11), "target.url:");
  EXPECT_EQ(field(R"({"url": "http:///path"})").substr(0, 11), "target.url:");
  EXPECT_EQ(field(R"({"url": "http://a b"})").substr(0, 11), "target.url:");
  EXPECT_EQ(field("{\"url\": \"http://a/\\r\\nX: 1\"}").substr(0, 11), "target.url:");
  EXPECT_EQ(field(R"({"url": "http://a", "method": "TRACE"})").substr(0, 14), "target.method:");
  EXPECT_EQ(field(R"({"url": "http://a", "headers": {"Bad Name": "v"}})").substr(0, 24),
            "target.headers.Bad Name:");
  EXPECT_EQ(field(R"({"url": "http://a", "headers": {"Content-Length": "0"}})").substr(0, 30),
            "target.headers.Content-Length:");
  EXPECT_EQ(field(R"({"url": "http://a", "headers": {"Delayd-Job-Id": "9"}})").substr(0, 29),
            "target.headers.Delayd-Job-Id:");
  EXPECT_EQ(field(R"({"url": "http://a", "headers": {"X": "a\r\nInjected: 1"}})").substr(0, 17),
            "target.headers.X:");
  EXPECT_EQ(field(R"({"url": "http://a", "timeout_ms": 0})").substr(0, 18), "target.timeout_ms:");
  EXPECT_EQ(field(R"({"url": "http://a", "timeout_ms": 86400001})").substr(0, 18),
            "target.timeout_ms:");
  EXPECT_EQ(field(R"({"url": "http://a", "colour": "red"})"), "target.colour: unknown field");
  EXPECT_EQ(field(R"("http://a")"), "target: must be an object");
}

TEST(SpecJsonTest, DurationsAreMillisecondsOrUnitStrings) {
  auto ms = [](const json& v) { return ParseMillis(v, "delay"); };
  auto value = [&](const json& v) {
    Result<int64_t> r = ms(v);
    return r.ok() ? r.value() : -1;
  };
  EXPECT_EQ(value(json(1500)), 1500);
  EXPECT_EQ(value(json("250ms")), 250);
  EXPECT_EQ(value(json("30m")), 1'800'000);
  EXPECT_EQ(value(json("1h30m")), 5'400'000);
  EXPECT_EQ(value(json("2d")), 172'800'000);
  for (const json& bad : {json(-1), json("30"), json("1y"), json(""), json(1.5), json(nullptr),
                          json(18446744073709551615ULL)}) {
    EXPECT_EQ(FieldOf(ms(bad).status()), "delay") << bad.dump();
  }
}

TEST(SpecJsonTest, TopicSettingsKeepTheSecretInTheStoreAndOutOfTheApi) {
  Result<TopicSettings> s = ParseTopicSettings(json::parse(R"({
      "target": {"url": "http://a"}, "retry": {"max_attempts": 4}, "ttr_ms": "2m",
      "signing_secret": "s3cret", "rate_limit_per_s": 50, "max_concurrency": 8,
      "alert": {"webhook": "http://alerts", "consecutive_failures": 5}})"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->ttr_ms, 120'000);
  EXPECT_EQ(s->alert->consecutive_failures, 5u);
  EXPECT_TRUE(s->alert->on_dead_letter);
  const json api = ToJson(*s, /*with_secret=*/false);
  EXPECT_FALSE(api.contains("signing_secret"));
  EXPECT_EQ(api["signing_secret_set"], true);
  std::shared_ptr<const TopicSettings> stored = DecodeSettings(EncodeSettings(*s));
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->signing_secret, "s3cret");
  EXPECT_EQ(stored->max_concurrency, 8u);
  EXPECT_EQ(stored->retry->max_attempts, 4u);
  // What GET returns can be PUT back.
  EXPECT_TRUE(ParseTopicSettings(api).ok());

  EXPECT_EQ(FieldOf(ParseTopicSettings(json::parse(R"({"rate_limit_per_s": -1})")).status()),
            "rate_limit_per_s");
  EXPECT_EQ(FieldOf(ParseTopicSettings(json::parse(R"({"alert": {}})")).status()), "alert.webhook");
  EXPECT_EQ(FieldOf(ParseTopicSettings(json::parse(R"({"retry": {"multiplier": 0}})")).status()),
            "retry.multiplier");
  EXPECT_EQ(FieldOf(ParseTopicSettings(json::parse(R"({"surprise": 1})")).status()), "surprise");
}

}  // namespace
}  // namespace delayd::engine
