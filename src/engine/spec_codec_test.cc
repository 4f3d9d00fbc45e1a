// The stored form of specs and settings (doc/store.md, "Stored specs and
// settings"): written as documented, read back as written, whatever rules
// the API applies now.
#include "engine/spec_codec.h"

#include <gtest/gtest.h>

namespace delayd::engine {
namespace {

// As this version writes a push job's spec; earlier versions wrote the same.
constexpr const char* kStoredSpec =
    R"({"target":{"url":"http://127.0.0.1:8080/x","method":"PUT","headers":{"X-Tenant":"acme"},)"
    R"("timeout_ms":2500},"retry":{"max_attempts":3,"initial_backoff_ms":500,)"
    R"("max_backoff_ms":600000,"multiplier":2.0,"jitter":false,"retry_4xx":false,)"
    R"("max_age_ms":0},"encoding":"base64"})";

TEST(SpecCodecTest, AJobSpecIsStoredInItsDocumentedFormAndReadBack) {
  JobSpec spec;
  spec.target = Target{"http://127.0.0.1:8080/x", "PUT", {{"X-Tenant", "acme"}}, 2500};
  spec.retry = RetryPolicy{.max_attempts = 3, .initial_backoff_ms = 500, .jitter = false};
  spec.encoding = BodyEncoding::kBase64;
  EXPECT_EQ(EncodeSpec(spec), kStoredSpec);
  std::shared_ptr<const JobSpec> back = DecodeSpec(kStoredSpec);
  ASSERT_TRUE(back && back->target && back->retry);
  EXPECT_EQ(back->target->url, spec.target->url);
  EXPECT_EQ(back->target->method, "PUT");
  EXPECT_EQ(back->target->headers, spec.target->headers);
  EXPECT_EQ(back->target->timeout_ms, 2500);
  EXPECT_EQ(back->retry->max_attempts, 3u);
  EXPECT_EQ(back->retry->initial_backoff_ms, 500);
  EXPECT_EQ(back->retry->max_backoff_ms, 600'000);
  EXPECT_EQ(back->retry->multiplier, 2.0);
  EXPECT_FALSE(back->retry->jitter);
  EXPECT_EQ(back->encoding, BodyEncoding::kBase64);
  EXPECT_EQ(EncodeSpec(*back), kStoredSpec);
  EXPECT_EQ(EncodeSpec(JobSpec{}), "") << "a plain job stores no spec";
  JobSpec traced;
  traced.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  traced.tracestate = "rojo=00f067aa0ba902b7";
  const std::string stored = EncodeSpec(traced);
  EXPECT_EQ(stored, R"({"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",)"
                    R"("tracestate":"rojo=00f067aa0ba902b7"})")
      << "a pull job with a trace context stores it";
  back = DecodeSpec(stored);
  ASSERT_TRUE(back);
  EXPECT_FALSE(back->target);
  EXPECT_EQ(back->traceparent, traced.traceparent);
  EXPECT_EQ(back->tracestate, traced.tracestate);
  EXPECT_EQ(DecodeSpec(""), nullptr);
}

// A rule tightened after a job was stored must not turn it into a pull job
// or change what it sends: every value comes back as stored, members a newer
// version added are skipped, and the API's rules are not applied (the
// dispatcher checks a target's headers again before it sends any).
TEST(SpecCodecTest, AStoredSpecTheApiWouldRefuseNowIsReadAsStored) {
  std::shared_ptr<const JobSpec> spec = DecodeSpec(
      R"({"target":{"url":"ftp://legacy.example/x","method":"OPTIONS","headers":{"Delayd-Job-Id":"9",)"
      R"("X-A":"1"},"timeout_ms":0,"compression":"zstd"},"retry":{"max_attempts":5000,)"
      R"("initial_backoff_ms":900000000000,"max_backoff_ms":1,"multiplier":0.5},)"
      R"("priority_class":3})");
  ASSERT_TRUE(spec && spec->target && spec->retry);
  EXPECT_EQ(spec->target->url, "ftp://legacy.example/x");
  EXPECT_EQ(spec->target->method, "OPTIONS");
  const std::vector<std::pair<std::string, std::string>> headers = {{"Delayd-Job-Id", "9"},
                                                                    {"X-A", "1"}};
  EXPECT_EQ(spec->target->headers, headers);
  EXPECT_EQ(spec->target->timeout_ms, 0);
  EXPECT_EQ(spec->retry->max_attempts, 5000u);
  EXPECT_EQ(spec->retry->initial_backoff_ms, 900'000'000'000);
  EXPECT_EQ(spec->retry->max_backoff_ms, 1);
  EXPECT_EQ(spec->retry->multiplier, 0.5);
  EXPECT_TRUE(spec->retry->jitter) << "an absent member keeps its default";
  EXPECT_EQ(spec->encoding, BodyEncoding::kRaw);
}

// A member of the wrong type keeps its default; the others are read, and a
// stored target stays a target.
TEST(SpecCodecTest, AMemberOfTheWrongTypeKeepsItsDefaultAndTheRestIsRead) {
  std::shared_ptr<const JobSpec> spec = DecodeSpec(
      R"({"target":{"url":"http://a/b","timeout_ms":"soon","headers":{"X-N":7,"X-S":"s"}},)"
      R"("retry":{"max_attempts":-4,"jitter":"no"},"encoding":"rot13"})");
  ASSERT_TRUE(spec && spec->target && spec->retry);
  EXPECT_EQ(spec->target->url, "http://a/b");
  EXPECT_EQ(spec->target->timeout_ms, 10'000);
  const std::vector<std::pair<std::string, std::string>> headers = {{"X-S", "s"}};
  EXPECT_EQ(spec->target->headers, headers);
  EXPECT_EQ(spec->retry->max_attempts, 0u) << "clamped into its type, as stored";
  EXPECT_TRUE(spec->retry->jitter);
  EXPECT_EQ(spec->encoding, BodyEncoding::kRaw);

  std::shared_ptr<const JobSpec> odd = DecodeSpec(R"({"target":"http://a/b"})");
  ASSERT_TRUE(odd);
  EXPECT_TRUE(odd->target) << "still a push job; its attempts fail visibly";

  std::shared_ptr<const TopicSettings> s =
      DecodeSettings(R"({"rate_limit_per_s":"fast","max_concurrency":4,"ttr_ms":null})");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rate_limit_per_s, 0);
  EXPECT_EQ(s->max_concurrency, 4u);
  EXPECT_EQ(s->ttr_ms, 0);
}

TEST(SpecCodecTest, TopicSettingsAreReadBackAsWrittenNowAndBefore) {
  TopicSettings t;
  t.target = Target{"https://hooks.example/x", "POST", {}, 3000};
  t.retry = RetryPolicy{.max_attempts = 4};
  t.ttr_ms = 120'000;
  t.signing_secret = "s3cret";
  t.rate_limit_per_s = 50;
  t.max_concurrency = 8;
  t.alert = AlertRule{.webhook = "http://alerts", .consecutive_failures = 5};
  const std::string now = EncodeSettings(t);
  EXPECT_EQ(now,
            R"({"target":{"url":"https://hooks.example/x","method":"POST","headers":{},)"
            R"("timeout_ms":3000},"retry":{"max_attempts":4,"initial_backoff_ms":1000,)"
            R"("max_backoff_ms":600000,"multiplier":2.0,"jitter":true,"retry_4xx":false,)"
            R"("max_age_ms":0},"ttr_ms":120000,"rate_limit_per_s":50.0,"max_concurrency":8,)"
            R"("alert":{"webhook":"http://alerts","on_dead_letter":true,"consecutive_failures":5,)"
            R"("min_interval_s":300},"signing_secret":"s3cret"})");
  // Up to this version settings were stored as a sorted JSON document.
  const std::string before =
      R"({"alert":{"consecutive_failures":5,"min_interval_s":300,"on_dead_letter":true,)"
      R"("webhook":"http://alerts"},"max_concurrency":8,"rate_limit_per_s":50.0,"retry":)"
      R"({"initial_backoff_ms":1000,"jitter":true,"max_age_ms":0,"max_attempts":4,)"
      R"("max_backoff_ms":600000,"multiplier":2.0,"retry_4xx":false},"signing_secret":)"
      R"("s3cret","target":{"headers":{},"method":"POST","timeout_ms":3000,"url":)"
      R"("https://hooks.example/x"},"ttr_ms":120000})";
  for (const std::string& text : {now, before}) {
    std::shared_ptr<const TopicSettings> s = DecodeSettings(text);
    ASSERT_TRUE(s && s->target && s->retry && s->alert) << text;
    EXPECT_EQ(EncodeSettings(*s), now) << text;
  }
  TopicSettings plain;
  std::shared_ptr<const TopicSettings> none = DecodeSettings(EncodeSettings(plain));
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->target || none->retry || none->alert);
  EXPECT_EQ(DecodeSettings(""), nullptr);
}

TEST(SpecCodecTest, TextThatIsNotJsonDecodesToNothingRatherThanFailing) {
  EXPECT_EQ(DecodeSettings("{not json"), nullptr);
  EXPECT_EQ(DecodeSettings("[1]"), nullptr);
  std::shared_ptr<const JobSpec> spec = DecodeSpec("[[[");
  ASSERT_TRUE(spec);
  EXPECT_FALSE(spec->target) << "damaged beyond reading: a plain job, never a crash";
  std::string deep(100'000, '[');
  ASSERT_TRUE(DecodeSpec(deep));
}

// One spec text is parsed once while the cache holds it: the jobs that share
// it share one JobSpec. The cache holds kEntries texts and no more.
TEST(SpecCodecTest, TheCacheHandsOutOneSpecATextAndHoldsABoundedNumber) {
  SpecCache cache;
  EXPECT_EQ(cache.Decode(""), nullptr);
  std::shared_ptr<const JobSpec> first = cache.Decode(kStoredSpec);
  ASSERT_TRUE(first && first->target);
  EXPECT_EQ(first->target->url, "http://127.0.0.1:8080/x");
  EXPECT_EQ(cache.Decode(std::string(kStoredSpec)), first) << "the same text: the same spec";
  auto other = [](size_t i) {
    return R"({"target":{"url":"http://127.0.0.1:8080/)" + std::to_string(i) + R"("}})";
  };
  std::shared_ptr<const JobSpec> one = cache.Decode(other(1));
  ASSERT_TRUE(one && one->target);
  EXPECT_NE(one, first);
  EXPECT_EQ(one->target->url, "http://127.0.0.1:8080/1");
  EXPECT_EQ(cache.Decode(kStoredSpec), first) << "still held beside another";
  // kEntries - 2 more fill it; one more replaces the oldest, the first.
  for (size_t i = 2; i < SpecCache::kEntries; ++i) cache.Decode(other(i));
  EXPECT_EQ(cache.Decode(kStoredSpec), first);
  cache.Decode(other(SpecCache::kEntries));
  EXPECT_EQ(cache.Decode(other(1)), one) << "only the oldest was replaced";
  std::shared_ptr<const JobSpec> again = cache.Decode(kStoredSpec);
  ASSERT_TRUE(again && again->target);
  EXPECT_NE(again, first) << "replaced, so parsed anew";
  EXPECT_EQ(EncodeSpec(*again), kStoredSpec);
}

}  // namespace
}  // namespace delayd::engine
