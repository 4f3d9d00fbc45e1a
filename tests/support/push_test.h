// The base of the black-box suites of push targets (gRPC, Kafka, RabbitMQ):
// delayd on a data dir of its own, and a client's view of it over HTTP:
// requests, submissions, a job as it reads back, waiting for its state.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "support/http.h"
#include "support/process.h"

namespace delayd::testing {

class PushTargetTest : public ::testing::Test {
 protected:
  // `prefix` names the data dir; `state_wait` is how long WaitState waits
  // unless told otherwise.
  PushTargetTest(std::string prefix, std::chrono::milliseconds state_wait)
      : prefix_(std::move(prefix)), state_wait_(state_wait) {}

  void SetUp() override { server_ = std::make_unique<DelaydServer>(MakeTempDir(prefix_)); }

  HttpReply Call(const std::string& method, const std::string& target,
                 const nlohmann::json& body = nullptr) {
    return HttpCall(server_->http_port(), method, target, body.is_null() ? "" : body.dump());
  }
  // Submits `job` to `topic`, expecting it accepted.
  nlohmann::json Submit(const std::string& topic, const nlohmann::json& job) {
    HttpReply r = Call("POST", "/v1/topics/" + topic + "/jobs", job);
    EXPECT_EQ(r.status, 201) << r.body;
    return r.json();
  }
  nlohmann::json Job(uint64_t id) { return Call("GET", "/v1/jobs/" + std::to_string(id)).json(); }
  bool WaitState(uint64_t id, const std::string& state, std::chrono::milliseconds timeout) {
    return WaitUntil([&] { return Job(id)["state"] == state; }, timeout);
  }
  bool WaitState(uint64_t id, const std::string& state) {
    return WaitState(id, state, state_wait_);
  }

  std::unique_ptr<DelaydServer> server_;

 private:
  std::string prefix_;
  std::chrono::milliseconds state_wait_;
};

}  // namespace delayd::testing
