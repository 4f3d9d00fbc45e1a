#include "rpc/grpc_sender.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <thread>

#include "delayd/v1/receiver.grpc.pb.h"

namespace delayd::rpc {
namespace {

using delivery::OutRequest;
using delivery::OutResult;
using namespace std::chrono_literals;

// An in-process JobReceiver: records each call and answers with `code`, or
// holds the call unanswered while `hold` is set.
class Receiver final : public delayd::v1::JobReceiver::CallbackService {
 public:
  struct Got {
    delayd::v1::Delivery delivery;
    std::multimap<std::string, std::string> metadata;
  };
  grpc::ServerUnaryReactor* Deliver(grpc::CallbackServerContext* ctx,
                                    const delayd::v1::Delivery* request,
                                    delayd::v1::Delivered*) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    std::lock_guard lock(mu_);
    Got g;
    g.delivery = *request;
    for (const auto& [k, v] : ctx->client_metadata()) {
      g.metadata.emplace(std::string(k.data(), k.size()), std::string(v.data(), v.size()));
    }
    got_.push_back(std::move(g));
    if (hold_) {
      held_.push_back(reactor);
    } else {
      reactor->Finish(code_ == grpc::StatusCode::OK ? grpc::Status::OK
                                                    : grpc::Status(code_, "no such order"));
    }
    return reactor;
  }
  void Answer(grpc::StatusCode code) {
    std::lock_guard lock(mu_);
    code_ = code;
  }
  void Hold(bool hold) {
    std::lock_guard lock(mu_);
    hold_ = hold;
  }
  void ReleaseHeld() {
    std::lock_guard lock(mu_);
    for (auto* r : held_) r->Finish(grpc::Status::OK);
    held_.clear();
  }
  std::vector<Got> got() {
    std::lock_guard lock(mu_);
    return got_;
  }

 private:
  std::mutex mu_;
  grpc::StatusCode code_ = grpc::StatusCode::OK;
  bool hold_ = false;
  std::vector<grpc::ServerUnaryReactor*> held_;
  std::vector<Got> got_;
};

class GrpcSenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(&receiver_);
    server_ = b.BuildAndStart();
    ASSERT_NE(port_, 0);
    NewSender();
  }
  // A sender (in place of the one before), with no channel yet.
  void NewSender() {
    sender_ = std::make_unique<GrpcSender>(
        [this](std::function<void()> f) { boost::asio::post(io_, std::move(f)); }, policy_, clock_);
  }
  static bool WaitFor(const std::function<bool()>& pred) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!pred()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }
  void TearDown() override {
    receiver_.ReleaseHeld();
    sender_.reset();
    server_->Shutdown(std::chrono::system_clock::now());
  }
  std::string url() const { return "grpc://127.0.0.1:" + std::to_string(port_); }
  OutRequest Request(uint64_t id, std::string body) {
    OutRequest r;
    r.url = url();
    r.body = std::move(body);
    r.timeout_ms = 5000;
    r.headers = {"Delayd-Job-Id: " + std::to_string(id), "Content-Type: application/json",
                 "X-Tenant: acme"};
    r.job = {.id = id,
             .topic = "orders",
             .key = "k" + std::to_string(id),
             .attempt = 2,
             .due_ms = 1'700'000'000'123,
             .run_at_ms = 1'700'000'000'000,
             .timer_id = 7,
             .fire_ms = 1'700'000'000'000,
             .body_is_json = true};
    return r;
  }
  // Sends `r` and runs the loop until its result comes (10 s at most).
  std::optional<OutResult> SendAndWait(OutRequest r) {
    std::optional<OutResult> result;
    sender_->Send(std::move(r), [&](OutResult got) { result = std::move(got); });
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!result && std::chrono::steady_clock::now() < deadline) {
      io_.restart();
      io_.run_for(10ms);
    }
    return result;
  }

  boost::asio::io_context io_;
  SystemClock clock_;
  delivery::TargetPolicy policy_;
  Receiver receiver_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<GrpcSender> sender_;
};

TEST_F(GrpcSenderTest, DeliversTheJobsFieldsAndHeadersOverOneChannel) {
  for (uint64_t id : {1, 2, 3}) {
    auto r = SendAndWait(Request(id, std::string("{\"n\":") + std::to_string(id) + "}"));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->grpc_code, 0) << r->error;
    EXPECT_TRUE(r->error.empty());
  }
  EXPECT_EQ(sender_->channels(), 1u) << "one channel per target, reused";
  auto got = receiver_.got();
  ASSERT_EQ(got.size(), 3u);
  const delayd::v1::Delivery& d = got[1].delivery;
  EXPECT_EQ(d.id(), 2u);
  EXPECT_EQ(d.topic(), "orders");
  EXPECT_EQ(d.key(), "k2");
  EXPECT_EQ(d.attempt(), 2u);
  EXPECT_EQ(d.due_at().seconds(), 1'700'000'000);
  EXPECT_EQ(d.due_at().nanos(), 123'000'000);
  EXPECT_EQ(d.timer_id(), 7u);
  EXPECT_EQ(d.body(), "{\"n\":2}");
  EXPECT_TRUE(d.body_is_json());
  ASSERT_EQ(got[1].metadata.count("x-tenant"), 1u);
  EXPECT_EQ(got[1].metadata.find("x-tenant")->second, "acme");
  ASSERT_EQ(got[1].metadata.count("delayd-job-id"), 1u);
  EXPECT_EQ(got[1].metadata.find("delayd-job-id")->second, "2");
  // The HTTP content type is not sent: it is gRPC's own.
  auto [first, last] = got[1].metadata.equal_range("content-type");
  for (auto it = first; it != last; ++it) EXPECT_NE(it->second, "application/json");
}

TEST_F(GrpcSenderTest, AReceiversRefusalComesBackAsItsCodeAndMessage) {
  receiver_.Answer(grpc::StatusCode::NOT_FOUND);
  auto r = SendAndWait(Request(1, "x"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->grpc_code, static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_EQ(r->error, "NOT_FOUND: no such order");
  EXPECT_FALSE(r->not_sent);
}

TEST_F(GrpcSenderTest, TheDeadlineIsTheTargetsTimeout) {
  receiver_.Hold(true);
  OutRequest req = Request(1, "x");
  req.timeout_ms = 200;
  const auto start = std::chrono::steady_clock::now();
  auto r = SendAndWait(std::move(req));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->grpc_code, static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED));
  EXPECT_TRUE(r->timed_out);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 190ms);
}

TEST_F(GrpcSenderTest, AnAddressThePolicyRefusesIsNeverCalled) {
  policy_ = delivery::TargetPolicy::Make({}, {"127.0.0.0/8"}).value();
  auto r = SendAndWait(Request(1, "x"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->error.rfind("refused by the target policy", 0), 0u) << r->error;
  EXPECT_EQ(r->grpc_code, -1) << "a refused connection, retried as HTTP's are";
  EXPECT_TRUE(receiver_.got().empty());
}

TEST_F(GrpcSenderTest, ANameIsResolvedAndJudgedByItsAddresses) {
  OutRequest req = Request(1, "x");
  req.url = "grpc://localhost:" + std::to_string(port_);
  auto r = SendAndWait(req);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->grpc_code, 0) << r->error;
  EXPECT_EQ(receiver_.got().size(), 1u);
  // The same name, every address of it denied: never called. The policy is
  // only changed with no sender alive, since a sender's threads read it.
  sender_.reset();
  policy_ = delivery::TargetPolicy::Make({}, {"127.0.0.0/8", "[::1]"}).value();
  NewSender();
  r = SendAndWait(req);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->error.rfind("refused by the target policy", 0), 0u) << r->error;
  EXPECT_EQ(receiver_.got().size(), 1u);
}

TEST_F(GrpcSenderTest, StopEndsCallsInFlightAndRunsNoCallbackAfter) {
  receiver_.Hold(true);
  bool called = false;
  sender_->Send(Request(1, "x"), [&](OutResult) { called = true; });
  ASSERT_TRUE(WaitFor([&] { return receiver_.got().size() == 1; }));
  const auto start = std::chrono::steady_clock::now();
  sender_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  io_.restart();
  io_.poll();
  EXPECT_FALSE(called);
  sender_->Send(Request(2, "y"), [&](OutResult) { called = true; });  // dropped
  io_.restart();
  io_.poll();
  EXPECT_FALSE(called);
}

}  // namespace
}  // namespace delayd::rpc
