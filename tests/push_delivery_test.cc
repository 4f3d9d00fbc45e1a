// Push delivery against real local receivers: timing, headers and signature,
// retries with backoff, Retry-After, timeouts, dead letters and alerts, rate
// limits, isolation between topics, and kill -9 during delivery.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <set>

#include "common/time_format.h"
#include "support/http.h"
#include "support/process.h"

namespace delayd::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

class PushTest : public ::testing::Test {
 protected:
  void SetUp() override { server_ = std::make_unique<DelaydServer>(MakeTempDir("delayd-push")); }
  int port() const { return server_->http_port(); }
  json Put(const std::string& target, const json& body, int want = 200) {
    HttpReply r = HttpCall(port(), "PUT", target, body.dump());
    EXPECT_EQ(r.status, want) << r.body;
    return r.json();
  }
  json Post(const std::string& target, const json& body, int want = 201) {
    HttpReply r = HttpCall(port(), "POST", target, body.dump());
    EXPECT_EQ(r.status, want) << r.body;
    return r.json();
  }
  json Get(const std::string& target) {
    HttpReply r = HttpCall(port(), "GET", target);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.json();
  }
  // Waits until the job reads back in `state`.
  bool WaitState(uint64_t id, const std::string& state, std::chrono::milliseconds timeout = 10s) {
    return WaitUntil([&] { return Get("/v1/jobs/" + std::to_string(id))["state"] == state; },
                     timeout);
  }
  // Issue 34: 300 push jobs in a topic delivering one at a time (so that
  // arrival order is dispatch order), on a server whose windows hold 8: those
  // beyond the window wait in the store and are read back as the dispatcher
  // drains it, each delivered once, in order. `delay_ms` makes them delayed
  // jobs whose time comes at once: those beyond the window are ready in memory
  // but delayed in their rows until stored as ready, or a refill would never
  // find them (it once lost all but the window's).
  void DeliversABacklogBeyondTheWindow(const std::string& topic, int delay_ms) {
    server_ = std::make_unique<DelaydServer>(MakeTempDir("delayd-push-window"),
                                             std::vector<std::string>{"--ready-window", "8"});
    Receiver rx;
    const std::string path = "/v1/topics/" + topic;
    Put(path, {{"target", {{"url", rx.url()}}}, {"max_concurrency", 1}});
    json batch = json::array();
    for (int i = 0; i < 300; ++i) batch.push_back({{"body", i}, {"delay", delay_ms}});
    Post(path + "/jobs", batch);
    ASSERT_TRUE(rx.WaitFor([](auto& v) { return v.size() >= 300; }, 30s))
        << rx.count() << " delivered; " << Get(path).dump();
    auto got = rx.received();
    ASSERT_EQ(got.size(), 300u);
    for (int i = 0; i < 300; ++i) EXPECT_EQ(got[i].body, std::to_string(i)) << "delivery " << i;
    EXPECT_TRUE(WaitUntil([&] { return Get(path)["counts"]["ready"] == 0; }, 5s))
        << Get(path).dump();
  }
  std::unique_ptr<DelaydServer> server_;
};

int64_t ParseTestTime(const json& j) { return ParseRfc3339(j.get<std::string>()).value(); }

std::string Hmac(const std::string& key, const std::string& msg) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), mac, &len);
  std::string hex;
  char b[3];
  for (unsigned i = 0; i < len; ++i) {
    snprintf(b, sizeof b, "%02x", mac[i]);
    hex += b;
  }
  return hex;
}

int64_t Ms(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

// Issue 33: a W3C trace context given at submission reaches the target on
// every attempt, with the submitter's trace id, its flags and tracestate,
// and a parent id of the attempt's own, which the attempt log and the job
// show; a timer's fires carry the trace of the request that made it. A
// traceparent that breaks the spec's rules is ignored, not refused.
TEST_F(PushTest, TheSubmittersTraceGoesOnWithEveryAttemptUnderANewParentId) {
  Receiver rx([](const Received&, int n) { return Answer(n == 0 ? 503 : 200); });
  const std::string trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  const std::string submitted = "00-" + trace_id + "-00f067aa0ba902b7-01";
  const std::vector<std::string> headers = {
      "traceparent: " + submitted, "tracestate: rojo=00f067aa0ba902b7 , congo=t61rcWkgMzE"};
  json spec = {{"body", "traced"},
               {"target", {{"url", rx.url("/t")}}},
               {"retry", {{"initial_backoff_ms", 100}, {"jitter", false}}}};
  HttpReply put = HttpCall(port(), "POST", "/v1/topics/traced/jobs", spec.dump(), headers);
  ASSERT_EQ(put.status, 201) << put.body;
  const uint64_t id = put.json()["id"];
  EXPECT_EQ(put.json()["traceparent"], submitted);
  EXPECT_EQ(put.json()["tracestate"], "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
  ASSERT_TRUE(WaitState(id, "done"));
  const std::vector<Received> got = rx.received();
  ASSERT_EQ(got.size(), 2u);
  std::set<std::string> parents;
  for (const Received& r : got) {
    const std::string tp = r.headers.count("traceparent") ? r.headers.at("traceparent") : "";
    ASSERT_EQ(tp.size(), 55u) << tp;
    EXPECT_EQ(tp.substr(0, 36), "00-" + trace_id + "-");
    EXPECT_EQ(tp.substr(52), "-01");
    EXPECT_NE(tp, submitted) << "a parent id of delayd's own";
    parents.insert(tp.substr(36, 16));
    EXPECT_EQ(r.headers.at("tracestate"), "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
  }
  EXPECT_EQ(parents.size(), 2u) << "one parent id per attempt";
  const json attempts = Get("/v1/jobs/" + std::to_string(id) + "/attempts")["attempts"];
  ASSERT_EQ(attempts.size(), 2u) << attempts;
  for (const json& a : attempts) EXPECT_EQ(parents.count(a["parent_id"].get<std::string>()), 1u);
  EXPECT_EQ(Get("/v1/jobs/" + std::to_string(id))["traceparent"], submitted);

  // Broken: upper case, all-zero trace id, two traceparents. The job is
  // taken, without a trace context, and its push carries none.
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"traceparent: 00-" + std::string(32, 'A') + "-00f067aa0ba902b7-01",
                                 "tracestate: a=1"},
        std::vector<std::string>{"traceparent: 00-" + std::string(32, '0') +
                                 "-00f067aa0ba902b7-01"},
        std::vector<std::string>{"traceparent: " + submitted, "traceparent: " + submitted}}) {
    const size_t before = rx.count();
    HttpReply r =
        HttpCall(port(), "POST", "/v1/topics/traced/jobs",
                 json{{"body", "plain"}, {"target", {{"url", rx.url("/p")}}}}.dump(), bad);
    ASSERT_EQ(r.status, 201) << r.body;
    EXPECT_TRUE(r.json()["traceparent"].is_null()) << bad[0];
    EXPECT_TRUE(r.json()["tracestate"].is_null());
    ASSERT_TRUE(rx.WaitFor([&](auto& v) { return v.size() == before + 1; }, 10s));
    EXPECT_EQ(rx.received().back().headers.count("traceparent"), 0u) << bad[0];
  }

  // A timer: its fires' jobs carry the trace of the request that made it.
  json timer = {{"name", "traced"},
                {"topic", "traced"},
                {"schedule", "@every 1s"},
                {"template", {{"body", "fire"}, {"target", {{"url", rx.url("/timer")}}}}}};
  HttpReply made = HttpCall(port(), "POST", "/v1/timers", timer.dump(), headers);
  ASSERT_EQ(made.status, 201) << made.body;
  EXPECT_EQ(made.json()["template"]["traceparent"], submitted);
  ASSERT_TRUE(rx.WaitFor(
      [](auto& v) {
        return std::any_of(v.begin(), v.end(),
                           [](const Received& r) { return r.path == "/timer"; });
      },
      10s));
  for (const Received& r : rx.received()) {
    if (r.path != "/timer") continue;
    EXPECT_EQ(r.headers.at("traceparent").substr(0, 36), "00-" + trace_id + "-");
  }
}

TEST_F(PushTest, DeliversOnTimeWithEveryHeaderAndAVerifiableSignature) {
  Receiver rx;
  Put("/v1/topics/orders", {{"signing_secret", "s3cret"}});
  json job = Post("/v1/topics/orders/jobs",
                  {{"delay", 1500},
                   {"body", {{"order", 8812}}},
                   {"target", {{"url", rx.url("/close")}, {"headers", {{"X-Tenant", "a"}}}}}});
  const int64_t due = ParseTestTime(job["due_at"]);
  ASSERT_TRUE(rx.WaitFor([](auto& v) { return v.size() == 1; }, 10s));
  Received r = rx.received()[0];
  EXPECT_GE(Ms(r.at), due);
  EXPECT_LT(Ms(r.at), due + 500) << "late by " << Ms(r.at) - due << " ms";
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, "/close");
  EXPECT_EQ(r.body, R"({"order":8812})");
  EXPECT_EQ(r.headers["content-type"], "application/json");
  EXPECT_EQ(r.headers["x-tenant"], "a");
  EXPECT_EQ(r.headers["delayd-job-id"], std::to_string(job["id"].get<uint64_t>()));
  EXPECT_EQ(r.headers["delayd-topic"], "orders");
  EXPECT_EQ(r.headers["delayd-attempt"], "1");
  EXPECT_EQ(r.headers["delayd-due-at"], job["due_at"]);
  // Delayd-Signature: t=<unix s>,v1=<hex HMAC-SHA256 of "t.body">
  const std::string sig = r.headers["delayd-signature"];
  ASSERT_EQ(sig.rfind("t=", 0), 0u) << sig;
  const std::string t = sig.substr(2, sig.find(',') - 2);
  EXPECT_NEAR(std::stoll(t), Ms(r.at) / 1000, 2);
  EXPECT_EQ(sig.substr(sig.find(",v1=") + 4), Hmac("s3cret", t + "." + r.body));
  EXPECT_NE(sig.substr(sig.find(",v1=") + 4), Hmac("other", t + "." + r.body));
  EXPECT_TRUE(WaitState(job["id"], "done"));
}

TEST_F(PushTest, FailsTwiceThenSucceedsWithBackoffRecorded) {
  Receiver rx([](const Received&, int n) { return Answer{n < 2 ? 500 : 200}; });
  json job =
      Post("/v1/topics/t/jobs",
           {{"body", {{"x", 1}}},
            {"target", {{"url", rx.url()}}},
            {"retry", {{"initial_backoff_ms", 200}, {"multiplier", 2.0}, {"jitter", false}}}});
  ASSERT_TRUE(WaitState(job["id"], "done"));
  auto got = rx.received();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_GE(Ms(got[1].at) - Ms(got[0].at), 200);
  EXPECT_GE(Ms(got[2].at) - Ms(got[1].at), 400);
  EXPECT_EQ(got[2].headers["delayd-attempt"], "3");
  json attempts = Get("/v1/jobs/" + std::to_string(job["id"].get<uint64_t>()) + "/attempts");
  ASSERT_EQ(attempts["attempts"].size(), 3u);
  EXPECT_EQ(attempts["attempts"][0]["outcome"], "retry");
  EXPECT_EQ(attempts["attempts"][0]["http_status"], 500);
  EXPECT_EQ(attempts["attempts"][1]["outcome"], "retry");
  EXPECT_EQ(attempts["attempts"][2]["outcome"], "ok");
  EXPECT_EQ(attempts["attempts"][2]["http_status"], 200);
}

TEST_F(PushTest, ExhaustedJobsBecomeDeadLettersAndAlertOncePerInterval) {
  Receiver rx([](const Received&, int) { return Answer{503}; });
  Receiver ops;
  Put("/v1/topics/pay", {{"alert", {{"webhook", ops.url("/alert")}, {"min_interval_s", 300}}}});
  json retry = {{"max_attempts", 3}, {"initial_backoff_ms", 20}, {"jitter", false}};
  json a =
      Post("/v1/topics/pay/jobs", {{"body", 1}, {"target", {{"url", rx.url()}}}, {"retry", retry}});
  ASSERT_TRUE(WaitState(a["id"], "buried"));
  json dead = Get("/v1/jobs/" + std::to_string(a["id"].get<uint64_t>()));
  EXPECT_EQ(dead["attempts"], 3);
  EXPECT_NE(dead["last_error"].get<std::string>().find("503"), std::string::npos) << dead;
  ASSERT_TRUE(ops.WaitFor([](auto& v) { return v.size() == 1; }, 5s));
  json alert = json::parse(ops.received()[0].body);
  EXPECT_EQ(alert["event"], "dead_letter");
  EXPECT_EQ(alert["topic"], "pay");
  EXPECT_EQ(alert["job_id"], a["id"]);
  EXPECT_EQ(alert["dead_letters"], 1);
  // A second dead letter within the interval raises no second alert.
  json b =
      Post("/v1/topics/pay/jobs", {{"body", 2}, {"target", {{"url", rx.url()}}}, {"retry", retry}});
  ASSERT_TRUE(WaitState(b["id"], "buried"));
  EXPECT_TRUE(
      WaitUntil([&] { return Get("/v1/stats")["delivery"]["alerts_suppressed"] == 1; }, 5s));
  EXPECT_EQ(ops.count(), 1u);
  EXPECT_EQ(rx.count(), 6u);
  // A dead letter can be retried from the API, with a fresh budget.
  HttpReply r =
      HttpCall(port(), "POST", "/v1/jobs/" + std::to_string(a["id"].get<uint64_t>()) + "/retry");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(rx.WaitFor([](auto& v) { return v.size() >= 7; }, 5s));
}

// A target's reply is quoted into the attempt log, the last error and the
// alert; bytes of it that are not UTF-8 must come out as U+FFFD in valid
// JSON, not break those documents or the server.
TEST_F(PushTest, AReplyThatIsNotUtf8IsQuotedAsValidJson) {
  Receiver rx([](const Received&, int) {
    Answer a{500};
    a.body = "bad \xff\xfe reply \xc3";  // stray bytes, then a sequence cut short
    return a;
  });
  Receiver ops;
  Put("/v1/topics/odd", {{"alert", {{"webhook", ops.url("/alert")}}}});
  json job =
      Post("/v1/topics/odd/jobs",
           {{"body", 1},
            {"target", {{"url", rx.url()}}},
            {"retry", {{"max_attempts", 2}, {"initial_backoff_ms", 20}, {"jitter", false}}}});
  const std::string id = std::to_string(job["id"].get<uint64_t>());
  ASSERT_TRUE(WaitState(job["id"], "buried"));
  const std::string replaced = "HTTP 500: bad \xEF\xBF\xBD\xEF\xBF\xBD reply \xEF\xBF\xBD";
  const std::string gave_up = replaced + " (gave up after 2 attempts)";
  json dead = Get("/v1/jobs/" + id);
  EXPECT_EQ(dead["last_error"], gave_up) << dead;
  json attempts = Get("/v1/jobs/" + id + "/attempts");
  ASSERT_EQ(attempts["attempts"].size(), 2u) << attempts;
  EXPECT_EQ(attempts["attempts"][0]["error"], replaced);
  EXPECT_EQ(attempts["attempts"][1]["error"], gave_up);
  ASSERT_TRUE(ops.WaitFor([](auto& v) { return v.size() == 1; }, 5s));
  json alert = json::parse(ops.received()[0].body, nullptr, false);
  ASSERT_FALSE(alert.is_discarded()) << ops.received()[0].body;
  EXPECT_EQ(alert["last_error"], gave_up);
  // The server is still whole.
  EXPECT_EQ(Get("/v1/stats")["delivery"]["alerts_sent"], 1);
}

TEST_F(PushTest, NonRetryable4xxGoesToDeadLettersAtOnce) {
  Receiver rx([](const Received&, int) { return Answer{404}; });
  json job = Post("/v1/topics/t/jobs", {{"body", 1}, {"target", {{"url", rx.url()}}}});
  ASSERT_TRUE(WaitState(job["id"], "buried"));
  EXPECT_EQ(rx.count(), 1u);
}

TEST_F(PushTest, AHangingReceiverTimesOutAndIsRetried) {
  Receiver rx([](const Received&, int n) {
    Answer a;
    a.hang = n == 0;
    return a;
  });
  json job =
      Post("/v1/topics/t/jobs", {{"body", 1},
                                 {"target", {{"url", rx.url()}, {"timeout_ms", 300}}},
                                 {"retry", {{"initial_backoff_ms", 50}, {"jitter", false}}}});
  ASSERT_TRUE(WaitState(job["id"], "done"));
  json attempts = Get("/v1/jobs/" + std::to_string(job["id"].get<uint64_t>()) + "/attempts");
  ASSERT_EQ(attempts["attempts"].size(), 2u);
  EXPECT_NE(attempts["attempts"][0]["error"].get<std::string>().find("timed out"),
            std::string::npos);
  EXPECT_GE(attempts["attempts"][0]["duration_ms"].get<int>(), 290);
}

TEST_F(PushTest, RetryAfterIsObeyed) {
  Receiver rx([](const Received&, int n) {
    return n == 0 ? Answer{429, {"Retry-After: 1"}} : Answer{200};
  });
  json job =
      Post("/v1/topics/t/jobs", {{"body", 1},
                                 {"target", {{"url", rx.url()}}},
                                 {"retry", {{"initial_backoff_ms", 10}, {"jitter", false}}}});
  ASSERT_TRUE(WaitState(job["id"], "done"));
  auto got = rx.received();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_GE(Ms(got[1].at) - Ms(got[0].at), 1000);
  EXPECT_LT(Ms(got[1].at) - Ms(got[0].at), 3000);
}

TEST_F(PushTest, RateLimitHoldsWithinTenPercent) {
  Receiver rx;
  Put("/v1/topics/slow", {{"target", {{"url", rx.url()}}}, {"rate_limit_per_s", 50}});
  json batch = json::array();
  for (int i = 0; i < 500; ++i) batch.push_back({{"body", i}, {"delay", 200}});
  Post("/v1/topics/slow/jobs", batch);
  // While limited, the waiting jobs are ready and their lateness shows.
  ASSERT_TRUE(WaitUntil([&] { return Get("/v1/topics/slow")["ready_lateness_ms"] > 100; }, 5s));
  ASSERT_TRUE(rx.WaitFor([](auto& v) { return v.size() == 500; }, 30s)) << rx.count();
  auto got = rx.received();
  const double secs = (Ms(got.back().at) - Ms(got.front().at)) / 1000.0;
  const double rate = 499 / secs;
  EXPECT_GT(rate, 45.0);
  EXPECT_LT(rate, 55.0);
}

TEST_F(PushTest, ABacklogBeyondTheWindowIsDeliveredOnceInOrder) {
  DeliversABacklogBeyondTheWindow("backlog", 0);
}

TEST_F(PushTest, DelayedJobsThatComeDueBeyondTheWindowAreAllDelivered) {
  DeliversABacklogBeyondTheWindow("due", 300);
}

TEST_F(PushTest, ADeadTargetDoesNotDelayOtherTopics) {
  Receiver dead([](const Received&, int) {
    Answer a;
    a.hang = true;
    return a;
  });
  Receiver live;
  json stuck = json::array();
  for (int i = 0; i < 200; ++i) stuck.push_back({{"body", i}});
  Put("/v1/topics/stuck", {{"target", {{"url", dead.url()}, {"timeout_ms", 10000}}}});
  Post("/v1/topics/stuck/jobs", stuck);
  ASSERT_TRUE(dead.WaitFor([](auto& v) { return v.size() >= 50; }, 10s));
  Put("/v1/topics/fine", {{"target", {{"url", live.url()}}}});
  json pushed = json::array();
  for (int i = 0; i < 20; ++i) pushed.push_back({{"body", i}, {"delay", 300}});
  json jobs = Post("/v1/topics/fine/jobs", pushed);
  const int64_t due = ParseTestTime(jobs[19]["due_at"]);
  ASSERT_TRUE(live.WaitFor([](auto& v) { return v.size() == 20; }, 5s));
  // Were the dead target's hanging requests in the way, these would wait for
  // its 10 s timeout. A second's margin tells the two apart under a sanitizer
  // on a busy machine, where 200 ms once did not.
  for (const Received& r : live.received())
    EXPECT_LT(Ms(r.at), due + 1000) << "late by " << Ms(r.at) - due << " ms";
}

TEST_F(PushTest, KillDuringDeliveryLosesNothingAndRedeliversNoRecordedSuccess) {
  Receiver rx([](const Received&, int) { return Answer{200, {}, 20ms}; });
  Put("/v1/topics/k", {{"target", {{"url", rx.url()}}}, {"max_concurrency", 4}});
  json batch = json::array();
  for (int i = 0; i < 300; ++i) batch.push_back({{"body", i}});
  json made = Post("/v1/topics/k/jobs", batch);
  std::set<uint64_t> all;
  for (auto& j : made) all.insert(j["id"].get<uint64_t>());
  ASSERT_TRUE(rx.WaitFor([](auto& v) { return v.size() >= 60; }, 10s));
  // Done records read back are durable.
  std::set<uint64_t> recorded;
  json page = Get("/v1/jobs?topic=k&state=done&limit=1000");
  for (auto& j : page["jobs"]) recorded.insert(j["id"].get<uint64_t>());
  ASSERT_FALSE(recorded.empty());
  server_->Kill9();
  const auto killed_at = std::chrono::system_clock::now();
  ASSERT_LT(recorded.size(), all.size());
  server_->Restart();
  ASSERT_TRUE(WaitUntil(
      [&] {
        std::set<uint64_t> seen;
        for (auto& r : rx.received()) seen.insert(std::stoull(r.headers["delayd-job-id"]));
        return seen == all;
      },
      30s));
  for (auto& r : rx.received()) {
    if (r.at > killed_at) {
      EXPECT_EQ(recorded.count(std::stoull(r.headers["delayd-job-id"])), 0u)
          << "job " << r.headers["delayd-job-id"]
          << " was delivered again after its success was recorded";
    }
  }
}

}  // namespace
}  // namespace delayd::testing
