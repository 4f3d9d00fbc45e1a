// The gRPC listener (--grpc) against a real client: a Python client
// (python3-grpcio) generated at test time from the shipped .proto files
// (tests/grpc/client.py) runs each scenario against the real delayd, and
// this test checks beside it over HTTP what the scenario cannot see: every
// RPC of Jobs, Topics and Timers; bad input (malformed and oversized
// messages, unknown enum values, impossible times, expired deadlines);
// tokens; health and reflection; a Reserve stream across kill -9 and
// SIGTERM.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <fstream>

#include "common/base64.h"
#include "support/http.h"
#include "support/process.h"

namespace delayd::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// The gRPC address the server's last start logged ("grpc=127.0.0.1:N").
std::string GrpcAddress(const DelaydServer& server) {
  const std::string log = server.log();
  const size_t at = log.rfind("grpc=");
  if (at == std::string::npos) return "";
  return log.substr(at + 5, log.find_first_of(" \n", at) - at - 5);
}

struct ClientRun {
  int status = -1;  // the exit status; 0 when every check held
  std::string output;
};

// Runs one scenario of tests/grpc/client.py to its end (two minutes at most).
ClientRun RunClient(const std::string& address, const std::string& scenario,
                    const std::vector<std::string>& args = {}, const std::string& token = "") {
  const std::string dir = MakeTempDir("delayd-grpc-client");
  std::string cmd = "DELAYD_TOKEN='" + token + "' timeout 120 /usr/bin/python3 " +
                    DELAYD_GRPC_CLIENT + " " + DELAYD_PROTO_DIR + " " + address + " " + scenario;
  for (const std::string& a : args) cmd += " " + a;
  cmd += " > " + dir + "/out.log 2>&1";
  ClientRun run;
  const int rc = std::system(cmd.c_str());
  run.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  run.output = ReadFile(dir + "/out.log");
  return run;
}

// A scenario's line "NAME N", as N; 0 when absent.
uint64_t Printed(const std::string& output, const std::string& name) {
  const size_t at = output.find(name + " ");
  return at == std::string::npos ? 0 : std::stoull(output.substr(at + name.size() + 1));
}

class GrpcApiTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> extra = {}) {
    extra.insert(extra.end(), {"--grpc", "127.0.0.1:0"});
    server_ = std::make_unique<DelaydServer>(MakeTempDir("delayd-grpc-api"), extra);
    address_ = GrpcAddress(*server_);
    ASSERT_FALSE(address_.empty()) << server_->log();
  }
  HttpReply Call(const std::string& method, const std::string& target) {
    return HttpCall(server_->http_port(), method, target);
  }
  std::unique_ptr<DelaydServer> server_;
  std::string address_;
};

TEST_F(GrpcApiTest, EveryJobRpcAsTheHttpApiDoesIt) {
  Start();
  ClientRun run = RunClient(address_, "jobs");
  ASSERT_EQ(run.status, 0) << run.output << server_->log();
  // What gRPC submitted reads back over HTTP as HTTP would have kept it.
  const uint64_t bytes_job = Printed(run.output, "bytes job");
  ASSERT_NE(bytes_job, 0u) << run.output;
  json job = Call("GET", "/v1/jobs/" + std::to_string(bytes_job)).json();
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  EXPECT_EQ(Base64Decode(job["body_base64"].get<std::string>()).value(), all) << job;
  EXPECT_EQ(job["key"], "order-8812");
  EXPECT_EQ(job["priority"], 7);
}

TEST_F(GrpcApiTest, AReserveStreamHandsOutJobsForCreditAndSettlesThem) {
  Start();
  ClientRun run = RunClient(address_, "reserve");
  ASSERT_EQ(run.status, 0) << run.output << server_->log();
}

TEST_F(GrpcApiTest, BadInputIsRefusedNamingTheFieldAndChangesNothing) {
  const int64_t max_request = 1 << 20;
  Start({"--max-request-bytes", std::to_string(max_request), "--max-job-size",
         std::to_string(max_request / 4)});
  ClientRun run = RunClient(address_, "errors", {std::to_string(max_request)});
  ASSERT_EQ(run.status, 0) << run.output << server_->log();
  // Still serving, over both doors.
  EXPECT_EQ(Call("GET", "/healthz").status, 200);
  EXPECT_EQ(RunClient(address_, "health").status, 0);
}

TEST_F(GrpcApiTest, TokensAndTheirScopesAsOverHttp) {
  Start({"--api-token", "admin-t0ken", "--api-read-token", "read-t0ken", "--api-write-token",
         "write-t0ken"});
  ClientRun run =
      RunClient(address_, "auth", {"admin-t0ken", "read-t0ken", "write-t0ken"}, "admin-t0ken");
  ASSERT_EQ(run.status, 0) << run.output << server_->log();
}

TEST_F(GrpcApiTest, HealthAndReflectionAnswer) {
  Start();
  ClientRun run = RunClient(address_, "health");
  ASSERT_EQ(run.status, 0) << run.output << server_->log();
}

TEST_F(GrpcApiTest, TopicsAndTimers) {
  Start();
  ClientRun run = RunClient(address_, "topics-timers");
  ASSERT_EQ(run.status, 0) << run.output << server_->log();
}

TEST_F(GrpcApiTest, OffUnlessAsked) {
  server_ = std::make_unique<DelaydServer>(MakeTempDir("delayd-grpc-api"));
  EXPECT_EQ(GrpcAddress(*server_), "") << server_->log();
}

// A worker holding a job over a stream when delayd dies: the job comes back
// after its ttr and another worker gets it; nothing is lost.
TEST_F(GrpcApiTest, KillNineDuringAStreamingReserveLosesNothing) {
  Start();
  const std::string body = "{\"order\":8812}";
  HttpReply put = HttpCall(server_->http_port(), "POST", "/v1/topics/held/jobs",
                           R"({"body":{"order":8812},"ttr_ms":2000})");
  ASSERT_EQ(put.status, 201) << put.body;
  const uint64_t id = put.json()["id"];

  const std::string dir = MakeTempDir("delayd-grpc-hold");
  Process holder;
  holder.Start({"/usr/bin/python3", DELAYD_GRPC_CLIENT, DELAYD_PROTO_DIR, address_, "hold", "held"},
               dir + "/hold.log");
  ASSERT_TRUE(WaitUntil(
      [&] { return ReadFile(dir + "/hold.log").find("reserved ") != std::string::npos; }, 60s))
      << ReadFile(dir + "/hold.log");
  EXPECT_EQ(Printed(ReadFile(dir + "/hold.log"), "reserved"), id);

  server_->Kill9();
  // The stream breaks with the server.
  EXPECT_TRUE(WaitUntil(
      [&] { return ReadFile(dir + "/hold.log").find("stream ended") != std::string::npos; }, 30s))
      << ReadFile(dir + "/hold.log");
  holder.Stop(SIGTERM, 10s);
  server_->Restart();
  address_ = GrpcAddress(*server_);
  ClientRun take = RunClient(address_, "take", {"held"});
  ASSERT_EQ(take.status, 0) << take.output << server_->log();
  EXPECT_EQ(Printed(take.output, "finished"), id);
  EXPECT_NE(take.output.find("body " + Base64Encode(body)), std::string::npos) << take.output;
  EXPECT_EQ(Call("GET", "/v1/jobs/" + std::to_string(id)).json()["state"], "done");
}

// SIGTERM ends an open Reserve stream with UNAVAILABLE at once, so that its
// worker reconnects elsewhere, and delayd exits cleanly.
TEST_F(GrpcApiTest, SigtermEndsReserveStreamsUnavailable) {
  Start();
  const std::string dir = MakeTempDir("delayd-grpc-term");
  Process holder;
  holder.Start(
      {"/usr/bin/python3", DELAYD_GRPC_CLIENT, DELAYD_PROTO_DIR, address_, "hold", "nothing-here"},
      dir + "/hold.log");
  // The stream is open once the server counts a waiting consumer.
  ASSERT_TRUE(WaitUntil(
      [&] { return Call("GET", "/v1/stats").json().value("waiting_consumers", 0) == 1; }, 60s))
      << ReadFile(dir + "/hold.log") << server_->log();
  const int status = server_->Terminate();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << server_->log();
  EXPECT_TRUE(WaitUntil(
      [&] {
        return ReadFile(dir + "/hold.log").find("stream ended UNAVAILABLE") != std::string::npos;
      },
      30s))
      << ReadFile(dir + "/hold.log");
}

}  // namespace
}  // namespace delayd::testing
