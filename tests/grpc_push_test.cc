// Push delivery to gRPC targets (grpc://HOST:PORT) against a real receiver:
// a Python JobReceiver (python3-grpcio) generated from the shipped .proto
// files. Bodies byte for byte with the job's fields and metadata, UNAVAILABLE
// and deadlines retried, INVALID_ARGUMENT a dead letter with the receiver's
// message, a receiver that is not there, and the URL and header rules.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>

#include "common/base64.h"
#include "common/time_format.h"
#include "support/http.h"
#include "support/process.h"
#include "support/push_test.h"

namespace delayd::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// The Python receiver (tests/grpc/receiver.py), on a port of its own.
class PyReceiver {
 public:
  PyReceiver() : dir_(MakeTempDir("delayd-grpc-rx")), records_(dir_ + "/records.jsonl") {
    process_.Start({"/usr/bin/python3", DELAYD_GRPC_RECEIVER, DELAYD_PROTO_DIR, records_},
                   dir_ + "/receiver.log");
    const bool listening = WaitUntil(
        [&] {
          const std::string log = ReadFile(dir_ + "/receiver.log");
          const size_t at = log.find("reset ");
          if (at == std::string::npos || log.find('\n', at) == std::string::npos) return false;
          port_ = std::stoi(log.substr(log.find("port ") + 5));
          garbage_port_ = std::stoi(log.substr(log.find("garbage ") + 8));
          reset_port_ = std::stoi(log.substr(at + 6));
          return true;
        },
        30s);
    EXPECT_TRUE(listening) << ReadFile(dir_ + "/receiver.log");
  }
  ~PyReceiver() { process_.Stop(SIGTERM, 10s); }
  std::string url() const { return "grpc://127.0.0.1:" + std::to_string(port_); }
  // A receiver answering bytes that are no Delivered message.
  std::string garbage_url() const { return "grpc://127.0.0.1:" + std::to_string(garbage_port_); }
  // A port whose connections are reset once they send.
  std::string reset_url() const { return "grpc://127.0.0.1:" + std::to_string(reset_port_); }
  // Every call received so far, in order.
  std::vector<json> records() const {
    std::vector<json> out;
    std::ifstream in(records_);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) out.push_back(json::parse(line));
    }
    return out;
  }
  bool WaitForCalls(size_t n, std::chrono::milliseconds timeout = 15s) const {
    return WaitUntil([&] { return records().size() >= n; }, timeout);
  }
  std::string log() const { return ReadFile(dir_ + "/receiver.log"); }

 private:
  std::string dir_;
  std::string records_;
  Process process_;
  int port_ = 0;
  int garbage_port_ = 0;
  int reset_port_ = 0;
};

class GrpcPushTest : public PushTargetTest {
 protected:
  GrpcPushTest() : PushTargetTest("delayd-gpush", 15s) {}
  int port() const { return server_->http_port(); }
};

TEST_F(GrpcPushTest, DeliversEachBodyByteForByteWithTheJobsFieldsAndMetadata) {
  PyReceiver rx;
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  ASSERT_EQ(Call("PUT", "/v1/topics/ok-orders", {{"signing_secret", "s3cret"}}).status, 200);
  const json target = {{"url", rx.url()}, {"headers", {{"X-Tenant", "acme"}}}};
  json binary = Submit("ok-orders", {{"body_base64", Base64Encode(bytes)},
                                     {"key", "order-8812"},
                                     {"delay", 300},
                                     {"target", target}});
  json text =
      Submit("ok-orders", {{"body", {{"order", 8812}, {"note", "héllo"}}}, {"target", target}});
  ASSERT_TRUE(rx.WaitForCalls(2)) << rx.log() << server_->log();
  ASSERT_TRUE(WaitState(binary["id"], "done"));
  ASSERT_TRUE(WaitState(text["id"], "done"));
  std::map<uint64_t, json> by_id;
  for (const json& r : rx.records()) by_id[r["id"].get<uint64_t>()] = r;
  ASSERT_EQ(by_id.size(), 2u);

  const json& b = by_id.at(binary["id"].get<uint64_t>());
  EXPECT_EQ(Base64Decode(b["body_b64"].get<std::string>()).value(), bytes);
  EXPECT_FALSE(b["body_is_json"].get<bool>());
  EXPECT_EQ(b["topic"], "ok-orders");
  EXPECT_EQ(b["key"], "order-8812");
  EXPECT_EQ(b["attempt"], 1);
  EXPECT_EQ(b["due_ms"].get<int64_t>(), ParseRfc3339(binary["due_at"].get<std::string>()).value());
  EXPECT_GE(b["at_ms"].get<int64_t>(), b["due_ms"].get<int64_t>());
  EXPECT_EQ(b["timer_id"], 0);
  EXPECT_EQ(b["metadata"]["x-tenant"], "acme");
  EXPECT_EQ(b["metadata"]["delayd-job-id"], std::to_string(binary["id"].get<uint64_t>()));
  EXPECT_EQ(b["metadata"]["delayd-attempt"], "1");
  EXPECT_TRUE(b["metadata"].contains("delayd-signature")) << b;
  EXPECT_FALSE(b["metadata"].contains("content-type") &&
               b["metadata"]["content-type"] == "application/octet-stream")
      << "Content-Type is gRPC's own";

  const json& t = by_id.at(text["id"].get<uint64_t>());
  EXPECT_TRUE(t["body_is_json"].get<bool>());
  EXPECT_EQ(json::parse(Base64Decode(t["body_b64"].get<std::string>()).value()),
            json({{"order", 8812}, {"note", "héllo"}}));
  EXPECT_TRUE(t["key"].get<std::string>().empty());
  // The attempt log shows a gRPC attempt as an HTTP one.
  json attempts =
      Call("GET", "/v1/jobs/" + std::to_string(text["id"].get<uint64_t>()) + "/attempts").json();
  ASSERT_EQ(attempts["attempts"].size(), 1u) << attempts;
  EXPECT_EQ(attempts["attempts"][0]["outcome"], "ok");
}

TEST_F(GrpcPushTest, UnavailableIsRetriedAndInvalidArgumentIsADeadLetterSayingWhy) {
  PyReceiver rx;
  const json retry = {{"initial_backoff_ms", 100}, {"jitter", false}, {"max_attempts", 5}};
  json flaky = Submit("flaky", {{"body", "x"}, {"target", {{"url", rx.url()}}}, {"retry", retry}});
  json refused =
      Submit("refuse", {{"body", "y"}, {"target", {{"url", rx.url()}}}, {"retry", retry}});
  ASSERT_TRUE(WaitState(flaky["id"], "done")) << Job(flaky["id"]);
  ASSERT_TRUE(WaitState(refused["id"], "buried")) << Job(refused["id"]);
  size_t flaky_calls = 0, refused_calls = 0;
  for (const json& r : rx.records()) {
    if (r["topic"] == "flaky") {
      EXPECT_EQ(r["attempt"], ++flaky_calls);
    } else if (r["topic"] == "refuse") {
      ++refused_calls;
    }
  }
  EXPECT_EQ(flaky_calls, 2u);
  EXPECT_EQ(refused_calls, 1u) << "INVALID_ARGUMENT is not retried";
  json dead = Job(refused["id"]);
  EXPECT_EQ(dead["attempts"], 1);
  const std::string error = dead["last_error"].get<std::string>();
  EXPECT_NE(error.find("INVALID_ARGUMENT: order 8812 is unknown"), std::string::npos) << error;
  EXPECT_NE(error.find("is not retried"), std::string::npos) << error;
}

TEST_F(GrpcPushTest, AReceiverPastItsDeadlineOrNotThereIsRetried) {
  PyReceiver rx;
  const json retry = {{"initial_backoff_ms", 60'000}, {"jitter", false}};
  json hang = Submit(
      "hang",
      {{"body", "z"}, {"target", {{"url", rx.url()}, {"timeout_ms", 300}}}, {"retry", retry}});
  const int nobody = FreePort();
  json absent =
      Submit("ok-absent", {{"body", "w"},
                           {"target", {{"url", "grpc://127.0.0.1:" + std::to_string(nobody)}}},
                           {"retry", retry}});
  // Each goes back to waiting for its next attempt, a minute away.
  for (const json* j : {&hang, &absent}) {
    ASSERT_TRUE(WaitUntil(
        [&] { return Job((*j)["id"])["attempts"] == 1 && Job((*j)["id"])["state"] == "delayed"; },
        15s))
        << Job((*j)["id"]);
  }
  EXPECT_NE(Job(hang["id"])["last_error"].get<std::string>().find("DEADLINE_EXCEEDED"),
            std::string::npos)
      << Job(hang["id"]);
  EXPECT_NE(Job(absent["id"])["last_error"].get<std::string>().find("UNAVAILABLE"),
            std::string::npos)
      << Job(absent["id"]);
}

// A receiver whose answer is not gRPC (bytes that are not HTTP/2, then a
// reset connection): failed attempts, retried by the job's policy until it
// dies. One that answers OK with bytes that are no Delivered message has
// said OK: Delivered has no fields, delayd reads nothing from it, and the
// status is the answer (gRPC C++ 1.51 does not fail such a call either).
TEST_F(GrpcPushTest, AReceiverAnsweringGarbageIsRetriedThenDeadAndItsStatusDecides) {
  PyReceiver rx;
  const json retry = {{"initial_backoff_ms", 50}, {"jitter", false}, {"max_attempts", 2}};
  json reset = Submit("ok-reset", {{"body", "r"},
                                   {"target", {{"url", rx.reset_url()}, {"timeout_ms", 3000}}},
                                   {"retry", retry}});
  json garbage =
      Submit("ok-garbage", {{"body", "g"},
                            {"target", {{"url", rx.garbage_url()}, {"timeout_ms", 3000}}},
                            {"retry", retry}});
  ASSERT_TRUE(WaitState(reset["id"], "buried", 30s)) << Job(reset["id"]) << server_->log();
  EXPECT_EQ(Job(reset["id"])["attempts"], 2) << Job(reset["id"]);
  EXPECT_NE(Job(reset["id"])["last_error"].get<std::string>().find("UNAVAILABLE"),
            std::string::npos)
      << Job(reset["id"]);
  ASSERT_TRUE(WaitState(garbage["id"], "done")) << Job(garbage["id"]);
  EXPECT_EQ(Job(garbage["id"])["attempts"], 1);
  // delayd still delivers to a sound receiver.
  json ok = Submit("ok-after", {{"body", "fine"}, {"target", {{"url", rx.url()}}}});
  EXPECT_TRUE(WaitState(ok["id"], "done")) << Job(ok["id"]);
}

TEST_F(GrpcPushTest, TargetsThatCannotBeCalledAreRefusedNamingTheField) {
  auto refused = [&](const json& target) {
    HttpReply r = Call("POST", "/v1/topics/t/jobs", {{"body", 1}, {"target", target}});
    EXPECT_EQ(r.status, 400) << target << r.body;
    return r.json().value("field", "");
  };
  EXPECT_EQ(refused({{"url", "grpc://127.0.0.1"}}), "target.url");
  EXPECT_EQ(refused({{"url", "grpc://127.0.0.1:50051/delayd.v1.JobReceiver/Deliver"}}),
            "target.url");
  EXPECT_EQ(refused({{"url", "grpc://169.254.169.254:50051"}}), "target.url")
      << "the target policy judges gRPC addresses too";
  EXPECT_EQ(refused({{"url", "grpc://127.0.0.1:50051"}, {"method", "PUT"}}), "target.method");
  EXPECT_EQ(refused({{"url", "grpc://127.0.0.1:50051"}, {"headers", {{"grpc-timeout", "1S"}}}}),
            "target.headers.grpc-timeout");
  // Nothing was kept.
  EXPECT_EQ(Call("GET", "/v1/jobs?topic=t").json()["jobs"].size(), 0u);
}

}  // namespace
}  // namespace delayd::testing
