#include "delivery/dispatcher.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "store/sqlite/sqlite_store.h"
#include "store/testing/test_dir.h"

namespace delayd::delivery {
namespace {

namespace asio = boost::asio;

// Records what the dispatcher sends; the test answers each request itself.
class FakeSender final : public HttpSender {
 public:
  struct Sent {
    OutRequest request;
    Callback done;
  };
  void Send(OutRequest request, Callback done) override {
    sent.push_back({std::move(request), std::move(done)});
  }
  // Answers request `i` (each is answered once).
  void Answer(size_t i, int status, std::string error = "") {
    OutResult r;
    r.status = status;
    r.error = std::move(error);
    r.duration_ms = 3;
    Callback done = std::move(sent.at(i).done);
    ASSERT_TRUE(done) << "request " << i << " answered twice";
    done(std::move(r));
  }
  // The value of header `name` in request `i`; nullopt when absent.
  std::optional<std::string> Header(size_t i, const std::string& name) const {
    for (const std::string& h : sent.at(i).request.headers) {
      if (h.rfind(name + ": ", 0) == 0) return h.substr(name.size() + 2);
    }
    return std::nullopt;
  }
  std::vector<Sent> sent;
};

class DispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = store::testing::FreshTestDir("dispatcher");
    auto post = [this](std::function<void()> f) { asio::post(io_, std::move(f)); };
    auto s = store::SqliteStore::Open({.path = (dir_ / "delayd.db").string()}, post);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    engine_ =
        std::make_unique<engine::Engine>(*store_, clock_, engine::EngineOptions{}, [](int64_t) {});
    ASSERT_TRUE(engine_->Recover().ok());
    dispatcher_ = std::make_unique<Dispatcher>(io_, *engine_, sender_, clock_,
                                               DispatcherOptions{.topic_concurrency = 3});
    dispatcher_->Start();
  }
  void TearDown() override {
    dispatcher_->Stop();
    store_->Close();
    io_.poll();
    dispatcher_.reset();
    engine_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  // Runs the loop one handler at a time until `pred` holds (10 s at most).
  template <typename Pred>
  void RunUntil(Pred pred) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!pred()) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "condition not reached";
      io_.restart();
      io_.run_one_for(std::chrono::milliseconds(10));
    }
  }

  std::filesystem::path dir_;
  asio::io_context io_;
  ManualClock clock_;
  std::unique_ptr<store::SqliteStore> store_;
  std::unique_ptr<engine::Engine> engine_;
  FakeSender sender_;
  std::unique_ptr<Dispatcher> dispatcher_;

  uint64_t Submit(const std::string& topic, engine::NewJob job) {
    std::vector<engine::NewJob> batch;
    batch.push_back(std::move(job));
    std::optional<Result<std::vector<engine::Submitted>>> out;
    engine_->Submit(topic, std::move(batch), [&](auto r) { out = std::move(r); });
    RunUntil([&] { return out.has_value(); });
    EXPECT_TRUE(out->ok()) << out->status().ToString();
    return out->ok() ? out->value()[0].id : 0;
  }
  static engine::NewJob PushJob(std::string body, engine::RetryPolicy retry = {}) {
    engine::NewJob job;
    job.body = std::move(body);
    job.spec.target.emplace().url = "http://hooks.test/orders";
    retry.jitter = false;
    job.spec.retry = retry;
    return job;
  }
  void SetTopic(const std::string& topic, engine::TopicSettings settings) {
    std::optional<Status> done;
    engine_->SetTopicSettings(topic, std::make_shared<const engine::TopicSettings>(settings),
                              [&](const Status& s) { done = s; });
    RunUntil([&] { return done.has_value(); });
    ASSERT_TRUE(done->ok());
  }
  Result<engine::JobInfo> GetJob(uint64_t id) {
    std::optional<Result<engine::JobInfo>> out;
    engine_->GetJob(id, [&](Result<engine::JobInfo> r) { out.emplace(std::move(r)); });
    RunUntil([&] { return out.has_value(); });
    return out ? std::move(*out) : Result<engine::JobInfo>(Status::Internal("not answered"));
  }
  engine::JobState StateOf(uint64_t id) { return GetJob(id)->state; }
  // Lets time pass for the engine: due jobs become ready.
  void Advance(int64_t ms) {
    clock_.AdvanceMillis(ms);
    engine_->Tick();
  }
};

TEST_F(DispatcherTest, PumpPendingSendsReadyJobsBeforeWorkAlreadyQueued) {
  Submit("push", PushJob("x"));
  // The job is ready and a pump is scheduled behind whatever the loop holds.
  ASSERT_EQ(dispatcher_->stats().in_flight, 0u);
  uint64_t in_flight_seen_by_queued_work = 99;
  asio::post(io_, [&] { in_flight_seen_by_queued_work = dispatcher_->stats().in_flight; });

  dispatcher_->PumpPending();
  EXPECT_EQ(dispatcher_->stats().in_flight, 1u);

  RunUntil([&] { return in_flight_seen_by_queued_work != 99; });
  EXPECT_EQ(in_flight_seen_by_queued_work, 1u);
  io_.poll();
  // The pump that was scheduled found nothing left to send: one attempt.
  EXPECT_EQ(sender_.sent.size(), 1u);
}

TEST_F(DispatcherTest, DeliversTheJobAsItsTargetSaysAndFinishesItOn2xx) {
  engine::NewJob job = PushJob(R"({"order":8812})");
  job.key = "order-8812\r\nX-Injected: 1";
  job.spec.encoding = engine::BodyEncoding::kJson;
  job.spec.target->method = "PUT";
  job.spec.target->headers = {{"X-Tenant", "acme"}};
  job.spec.target->timeout_ms = 2500;
  const uint64_t id = Submit("orders", std::move(job));
  RunUntil([&] { return sender_.sent.size() == 1; });
  const OutRequest& r = sender_.sent[0].request;
  EXPECT_EQ(r.method, "PUT");
  EXPECT_EQ(r.url, "http://hooks.test/orders");
  EXPECT_EQ(r.timeout_ms, 2500);
  EXPECT_EQ(r.body, R"({"order":8812})");
  EXPECT_EQ(sender_.Header(0, "Content-Type"), "application/json");
  EXPECT_EQ(sender_.Header(0, "X-Tenant"), "acme");
  EXPECT_EQ(sender_.Header(0, "Delayd-Job-Id"), std::to_string(id));
  EXPECT_EQ(sender_.Header(0, "Delayd-Topic"), "orders");
  EXPECT_EQ(sender_.Header(0, "Delayd-Attempt"), "1");
  EXPECT_EQ(sender_.Header(0, "Delayd-Key"), "order-8812%0D%0AX-Injected:%201");
  EXPECT_EQ(sender_.Header(0, "Delayd-Signature"), std::nullopt) << "no secret, no signature";
  EXPECT_EQ(StateOf(id), engine::JobState::kReserved);

  sender_.Answer(0, 204);
  RunUntil([&] { return StateOf(id) == engine::JobState::kDone; });
  EXPECT_EQ(dispatcher_->stats().delivered, 1u);
  const std::vector<engine::Attempt> log = engine::ReadAttempts(GetJob(id)->record.attempt_log);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].outcome, engine::AttemptOutcome::kOk);
  EXPECT_EQ(log[0].http_status, 204);
}

// W3C trace context: each attempt sends the submitter's trace id and
// tracestate under a parent id of its own, recorded in the attempt log; a
// target's own traceparent yields to the job's.
TEST_F(DispatcherTest, EachAttemptCarriesTheTraceUnderANewParentId) {
  engine::RetryPolicy retry;
  retry.max_attempts = 3;
  retry.initial_backoff_ms = 1000;
  retry.jitter = false;
  engine::NewJob job = PushJob("t", retry);
  job.spec.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  job.spec.tracestate = "rojo=00f067aa0ba902b7";
  job.spec.target->headers = {
      {"TraceParent", "00-11111111111111111111111111111111-1111111111111111-00"}};
  const uint64_t id = Submit("orders", std::move(job));
  std::vector<std::string> parents;
  for (size_t i = 0; i < 2; ++i) {
    RunUntil([&] { return sender_.sent.size() == i + 1; });
    int traceparents = 0;
    for (const std::string& h : sender_.sent[i].request.headers) {
      traceparents += strncasecmp(h.c_str(), "traceparent:", 12) == 0;
    }
    EXPECT_EQ(traceparents, 1) << "the target's own is not sent beside it";
    const std::string tp = sender_.Header(i, "traceparent").value_or("");
    ASSERT_EQ(tp.size(), 55u) << tp;
    EXPECT_EQ(tp.substr(0, 36), "00-4bf92f3577b34da6a3ce929d0e0e4736-") << "the same trace";
    EXPECT_EQ(tp.substr(52), "-01") << "its flags";
    parents.push_back(tp.substr(36, 16));
    EXPECT_EQ(sender_.Header(i, "tracestate"), "rojo=00f067aa0ba902b7");
    sender_.Answer(i, i == 0 ? 503 : 204, i == 0 ? "HTTP 503: busy" : "");
    if (i == 0) {
      RunUntil([&] { return StateOf(id) == engine::JobState::kDelayed; });
      Advance(1000);
    }
  }
  RunUntil([&] { return StateOf(id) == engine::JobState::kDone; });
  EXPECT_NE(parents[0], "00f067aa0ba902b7") << "not the submitter's span";
  EXPECT_NE(parents[0], parents[1]) << "each attempt a span of its own";
  const std::vector<engine::Attempt> log = engine::ReadAttempts(GetJob(id)->record.attempt_log);
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].parent_id, parents[0]);
  EXPECT_EQ(log[1].parent_id, parents[1]);
}

TEST_F(DispatcherTest, AFailureIsRetriedAfterItsBackoffAndTheLastOneIsADeadLetter) {
  engine::TopicSettings settings;
  settings.signing_secret = "s3cret";
  settings.alert.emplace().webhook = "http://alerts.test/hook";
  SetTopic("orders", settings);
  engine::RetryPolicy retry;
  retry.max_attempts = 2;
  retry.initial_backoff_ms = 4000;
  const uint64_t id = Submit("orders", PushJob("b", retry));
  RunUntil([&] { return sender_.sent.size() == 1; });
  EXPECT_EQ(sender_.Header(0, "Delayd-Signature"),
            Signature("s3cret", clock_.WallMillis() / 1000, "b"));
  sender_.Answer(0, 503, "HTTP 503: busy");
  RunUntil([&] { return StateOf(id) == engine::JobState::kDelayed; });
  Result<engine::JobInfo> info = GetJob(id);
  EXPECT_EQ(info->record.due_ms, clock_.WallMillis() + 4000) << "the policy's backoff";

  Advance(3999);
  io_.poll();
  EXPECT_EQ(sender_.sent.size(), 1u) << "redelivered before its backoff ran out";
  Advance(1);
  RunUntil([&] { return sender_.sent.size() == 2; });
  EXPECT_EQ(sender_.Header(1, "Delayd-Attempt"), "2");
  sender_.Answer(1, 500, "HTTP 500: broken");
  RunUntil([&] { return StateOf(id) == engine::JobState::kBuried; });
  info = GetJob(id);
  EXPECT_NE(info->record.last_error.find("HTTP 500: broken"), std::string::npos)
      << info->record.last_error;
  EXPECT_EQ(dispatcher_->stats().dead_letters, 1u);
  // The dead letter raises the topic's alert.
  RunUntil([&] { return sender_.sent.size() == 3; });
  EXPECT_EQ(sender_.sent[2].request.url, "http://alerts.test/hook");
  const nlohmann::json alert = nlohmann::json::parse(sender_.sent[2].request.body);
  EXPECT_EQ(alert["event"], "dead_letter");
  EXPECT_EQ(alert["job_id"], id);
  EXPECT_EQ(alert["dead_letters"], 1);
}

TEST_F(DispatcherTest, ATopicHasAtMostItsConcurrencyInFlightAndOthersAreNotHeldUp) {
  std::vector<uint64_t> slow;
  for (int i = 0; i < 5; ++i) slow.push_back(Submit("slow", PushJob("s" + std::to_string(i))));
  RunUntil([&] { return sender_.sent.size() == 3; });
  io_.poll();
  EXPECT_EQ(sender_.sent.size(), 3u) << "--topic-concurrency 3";
  EXPECT_EQ(dispatcher_->in_flight("slow"), 3u);
  // Another topic is not held up by the first one's hanging requests.
  Submit("fast", PushJob("f"));
  RunUntil([&] { return sender_.sent.size() == 4; });
  EXPECT_EQ(sender_.Header(3, "Delayd-Topic"), "fast");
  // One slot frees, one more of the slow topic goes.
  sender_.Answer(0, 200);
  RunUntil([&] { return sender_.sent.size() == 5; });
  EXPECT_EQ(sender_.Header(4, "Delayd-Topic"), "slow");
  EXPECT_EQ(dispatcher_->in_flight("slow"), 3u);
}

}  // namespace
}  // namespace delayd::delivery
