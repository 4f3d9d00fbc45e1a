// The HTTP API as a client sees it: idempotent submission, modify and
// delete, list filters and pagination, pull over HTTP, one engine behind two
// front doors, the OpenAPI document, and every validation error.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>

#include "common/time_format.h"
#include "support/client.h"
#include "support/http.h"
#include "support/process.h"

namespace delayd::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

class HttpApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<DelaydServer>(MakeTempDir("delayd-http"),
                                             std::vector<std::string>{"--max-batch", "50"});
  }
  HttpReply Call(const std::string& method, const std::string& target,
                 const std::string& body = "") {
    return HttpCall(server_->http_port(), method, target, body);
  }
  json Ok(const std::string& method, const std::string& target, const json& body = nullptr,
          int want = 200) {
    HttpReply r = Call(method, target, body.is_null() ? "" : body.dump());
    EXPECT_EQ(r.status, want) << method << " " << target << ": " << r.body;
    return r.json();
  }
  std::unique_ptr<DelaydServer> server_;
};

TEST_F(HttpApiTest, ResubmittingAKeyReturnsTheExistingJobAndCreatesNothing) {
  json a = Ok("POST", "/v1/topics/orders/jobs",
              {{"key", "order-8812"}, {"delay", "30m"}, {"body", 1}}, 201);
  EXPECT_EQ(a["duplicate"], false);
  HttpReply again = Call("POST", "/v1/topics/orders/jobs",
                         json{{"key", "order-8812"}, {"delay", "5m"}, {"body", 2}}.dump());
  EXPECT_EQ(again.status, 200);
  EXPECT_EQ(again.headers["delayd-duplicate"], "true");
  EXPECT_EQ(again.json()["id"], a["id"]);
  EXPECT_EQ(again.json()["body"], 1);
  EXPECT_EQ(Ok("GET", "/v1/topics/orders")["counts"]["delayed"], 1);
  EXPECT_EQ(Ok("GET", "/v1/topics/orders/keys/order-8812")["id"], a["id"]);
  // The same key in a batch, and in another topic.
  json batch =
      Ok("POST", "/v1/topics/orders/jobs",
         json::array({{{"key", "order-8812"}}, {{"key", "order-9"}}, {{"key", "order-9"}}}), 201);
  EXPECT_EQ(batch[0]["id"], a["id"]);
  EXPECT_EQ(batch[0]["duplicate"], true);
  EXPECT_EQ(batch[1]["duplicate"], false);
  EXPECT_EQ(batch[2]["id"], batch[1]["id"]);
  EXPECT_EQ(batch[2]["duplicate"], true);
  EXPECT_EQ(Ok("POST", "/v1/topics/other/jobs", {{"key", "order-8812"}}, 201)["duplicate"], false);
  // A deleted (cancelled) job frees its key.
  Ok("DELETE", "/v1/jobs/" + std::to_string(a["id"].get<uint64_t>()), nullptr, 204);
  EXPECT_EQ(Call("GET", "/v1/topics/orders/keys/order-8812").status, 404);
  EXPECT_NE(Ok("POST", "/v1/topics/orders/jobs", {{"key", "order-8812"}}, 201)["id"], a["id"]);
}

TEST_F(HttpApiTest, AFinishedJobKeepsItsKeyForTheRetentionWindow) {
  json a = Ok("POST", "/v1/topics/q/jobs", {{"key", "once"}, {"body", "x"}}, 201);
  json got = Ok("POST", "/v1/topics/q/reserve?timeout_ms=1000");
  EXPECT_EQ(got["id"], a["id"]);
  Ok("POST", "/v1/jobs/" + std::to_string(a["id"].get<uint64_t>()) + "/finish",
     {{"lease", got["lease"]["lease"]}}, 204);
  EXPECT_EQ(Ok("GET", "/v1/jobs/" + std::to_string(a["id"].get<uint64_t>()))["state"], "done");
  json again = Ok("POST", "/v1/topics/q/jobs", {{"key", "once"}});
  EXPECT_EQ(again["id"], a["id"]);
  EXPECT_EQ(again["state"], "done");
}

TEST_F(HttpApiTest, ModifyAndDeleteDelayedJobs) {
  json a = Ok("POST", "/v1/topics/t/jobs", {{"delay", "1h"}, {"body", {{"v", 1}}}}, 201);
  const std::string path = "/v1/jobs/" + std::to_string(a["id"].get<uint64_t>());
  json m = Ok("PATCH", path,
              {{"priority", 5},
               {"delay", "2h"},
               {"body", {{"v", 2}}},
               {"target", {{"url", "http://127.0.0.1:9/x"}}}});
  EXPECT_EQ(m["priority"], 5);
  EXPECT_EQ(m["body"]["v"], 2);
  EXPECT_EQ(m["state"], "delayed");
  EXPECT_GT(m["due_at"].get<std::string>(), a["due_at"].get<std::string>());
  EXPECT_EQ(m["target"]["url"], "http://127.0.0.1:9/x");
  // The change is durable: it survives a restart.
  server_->Restart();
  json after = Ok("GET", path);
  EXPECT_EQ(after["priority"], 5);
  EXPECT_EQ(after["body"]["v"], 2);
  EXPECT_EQ(after["due_at"], m["due_at"]);
  // Taking the target off and running it now makes it a ready pull job.
  Ok("PATCH", path, {{"target", nullptr}});
  EXPECT_EQ(Ok("POST", path + "/run-now")["state"], "ready");
  Ok("DELETE", path, nullptr, 204);
  EXPECT_EQ(Call("GET", path).status, 404);
  EXPECT_EQ(Call("DELETE", path).status, 404);
}

// An operator parks a job nobody holds as buried (bury without a lease):
// durable, a dead letter until kicked or retried; a held job is its
// holder's to bury.
TEST_F(HttpApiTest, AnOperatorBuriesAReadyOrDelayedJobWithoutALease) {
  json delayed = Ok("POST", "/v1/topics/park/jobs", {{"delay", "1h"}, {"body", 1}}, 201);
  json ready = Ok("POST", "/v1/topics/park/jobs", {{"body", 2}}, 201);
  const std::string d = "/v1/jobs/" + std::to_string(delayed["id"].get<uint64_t>());
  const std::string r = "/v1/jobs/" + std::to_string(ready["id"].get<uint64_t>());
  EXPECT_EQ(Ok("POST", d + "/bury", json::object())["state"], "buried");
  json b = Ok("POST", r + "/bury", {{"priority", 7}});
  EXPECT_EQ(b["state"], "buried");
  EXPECT_EQ(b["priority"], 7);
  EXPECT_EQ(Call("POST", r + "/bury", "{}").status, 409) << "already buried";
  EXPECT_EQ(Call("POST", "/v1/jobs/999999/bury", "{}").status, 404);
  server_->Restart();
  EXPECT_EQ(Ok("GET", d)["state"], "buried") << "durable";
  EXPECT_EQ(Ok("GET", "/v1/topics/park")["counts"]["buried"], 2);
  EXPECT_EQ(Ok("POST", d + "/kick")["state"], "ready");
  // A job a beanstalk consumer holds is the consumer's to bury.
  Client bs(server_->port());
  bs.Cmd("watch park");
  EXPECT_EQ(bs.Cmd("reserve-with-timeout 1")
                .rfind("RESERVED " + std::to_string(delayed["id"].get<uint64_t>()), 0),
            0u);
  EXPECT_EQ(Call("POST", d + "/bury", "{}").status, 409);
  EXPECT_EQ(bs.Cmd("bury " + std::to_string(delayed["id"].get<uint64_t>()) + " 1"), "BURIED\r\n");
}

TEST_F(HttpApiTest, AReservedJobCannotBeModifiedOrDeleted) {
  json a = Ok("POST", "/v1/topics/t/jobs", {{"body", 1}}, 201);
  const std::string path = "/v1/jobs/" + std::to_string(a["id"].get<uint64_t>());
  json got = Ok("POST", "/v1/topics/t/reserve");
  EXPECT_EQ(got["state"], "reserved");
  EXPECT_EQ(Call("PATCH", path, R"({"priority":1})").status, 409);
  EXPECT_EQ(Call("DELETE", path).status, 409);
  EXPECT_EQ(Call("POST", path + "/finish", R"({"lease":999})").status, 409);
  json released =
      Ok("POST", path + "/release", {{"delay", "1s"}, {"lease", got["lease"]["lease"]}});
  EXPECT_EQ(released["state"], "delayed");
}

TEST_F(HttpApiTest, ListFiltersAndPaginates) {
  json a = json::array(), b = json::array();
  for (int i = 0; i < 25; ++i) {
    char key[16];
    snprintf(key, sizeof key, "k-%02d", i);
    a.push_back({{"key", key}, {"delay", i < 10 ? "1m" : "2h"}});
    b.push_back({{"key", key}});
  }
  Ok("POST", "/v1/topics/a/jobs", a, 201);
  Ok("POST", "/v1/topics/b/jobs", b, 201);
  std::vector<std::string> keys;
  std::string cursor;
  int pages = 0;
  for (;;) {
    json page =
        Ok("GET", "/v1/jobs?topic=a&limit=10" + (cursor.empty() ? "" : "&cursor=" + cursor));
    ++pages;
    for (auto& j : page["jobs"]) {
      EXPECT_EQ(j["topic"], "a");
      keys.push_back(j["key"]);
    }
    if (page["next_cursor"].is_null()) break;
    cursor = page["next_cursor"];
  }
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(keys.size(), 25u);
  EXPECT_EQ(keys.front(), "k-00");
  EXPECT_EQ(keys.back(), "k-24");
  EXPECT_EQ(Ok("GET", "/v1/jobs?topic=a&key_prefix=k-1")["jobs"].size(), 10u);
  EXPECT_EQ(Ok("GET", "/v1/jobs?state=ready&limit=1000")["jobs"].size(), 25u);
  EXPECT_EQ(Ok("GET", "/v1/jobs?state=delayed&topic=a")["jobs"].size(), 25u);
  json soon = Ok("GET", "/v1/jobs?topic=a&due_before=" + a.dump().substr(0, 0) +
                            "2100-01-01T00:00:00Z&due_after=2000-01-01T00:00:00Z");
  EXPECT_EQ(soon["jobs"].size(), 25u);
  // Exactly the first ten are due within a minute (the others in two hours).
  json first = Ok("GET", "/v1/jobs?topic=a&limit=1");
  const int64_t due = ParseRfc3339(first["jobs"][0]["due_at"].get<std::string>()).value();
  json early = Ok("GET", "/v1/jobs?topic=a&due_before=" + FormatRfc3339Ms(due + 30'000));
  EXPECT_EQ(early["jobs"].size(), 10u);
  for (auto& j : early["jobs"]) EXPECT_LT(j["key"].get<std::string>(), "k-10");
  json reserved = Ok("POST", "/v1/topics/b/reserve");
  json held = Ok("GET", "/v1/jobs?state=reserved");
  ASSERT_EQ(held["jobs"].size(), 1u);
  EXPECT_EQ(held["jobs"][0]["id"], reserved["id"]);
}

// Jobs found by a field of their body: strings by content, numbers as
// written, existence alone; bodies that are not JSON never match and never
// fail the search; a body changed a moment ago is searched as it is now.
TEST_F(HttpApiTest, ListFindsJobsByAFieldOfTheirBody) {
  json batch = json::array();
  for (int i = 0; i < 30; ++i) {
    json body = {{"order", {{"id", i}, {"status", i % 3 == 0 ? "unpaid" : "paid"}}}};
    if (i == 7) body["order"]["coupon"] = "SPRING";
    batch.push_back({{"key", "o-" + std::to_string(i)}, {"delay", "1h"}, {"body", body}});
  }
  Ok("POST", "/v1/topics/shop/jobs", batch, 201);
  Client bs(server_->port());
  bs.Cmd("use shop");
  for (const std::string& raw :
       {std::string("not json"), std::string("{\"order\":{\"status\":"),
        std::string("{\"order\":{\"status\":\"unpaid\xff\"}}"), std::string("\0\x01{}", 4)}) {
    bs.Put(raw, 1);
  }
  Ok("POST", "/v1/topics/other/jobs", {{"body", {{"order", {{"status", "unpaid"}}}}}}, 201);
  auto keys = [&](const std::string& query) {
    std::vector<std::string> out;
    std::string cursor;
    for (int pages = 0; pages < 100; ++pages) {
      json page = Ok("GET", "/v1/jobs?" + query + (cursor.empty() ? "" : "&cursor=" + cursor));
      for (auto& j : page["jobs"]) out.push_back(j["key"].is_string() ? j["key"] : j["topic"]);
      if (page["next_cursor"].is_null()) break;
      cursor = page["next_cursor"];
    }
    return out;
  };
  using V = std::vector<std::string>;
  const V unpaid = {"o-0", "o-3", "o-6", "o-9", "o-12", "o-15", "o-18", "o-21", "o-24", "o-27"};
  EXPECT_EQ(keys("topic=shop&body_field=order.status&body_value=unpaid"), unpaid);
  EXPECT_EQ(keys("topic=shop&body_field=order.status&body_value=unpaid&limit=3"), unpaid);
  EXPECT_EQ(keys("body_field=order.status&body_value=unpaid").size(), 11u) << "both topics";
  EXPECT_EQ(keys("topic=shop&body_field=order.id&body_value=12"), V{"o-12"});
  EXPECT_EQ(keys("topic=shop&body_field=order.id&body_value=%2212%22"), V{});
  EXPECT_EQ(keys("topic=shop&body_field=order.coupon"), V{"o-7"});
  EXPECT_EQ(keys("topic=shop&state=ready&body_field=order.status&body_value=unpaid"), V{});
  EXPECT_EQ(keys("topic=shop&key_prefix=o-2&body_field=order.status&body_value=unpaid"),
            (V{"o-21", "o-24", "o-27"}));
  // A change of body is searched at once.
  json j = Ok("GET", "/v1/topics/shop/keys/o-1");
  Ok("PATCH", "/v1/jobs/" + std::to_string(j["id"].get<uint64_t>()),
     {{"body", {{"order", {{"id", 1}, {"status", "unpaid"}}}}}});
  EXPECT_EQ(keys("topic=shop&body_field=order.status&body_value=unpaid").size(), 11u);
  EXPECT_EQ(keys("topic=shop&body_field=order.status&body_value=paid").size(), 19u);

  EXPECT_EQ(Call("GET", "/v1/jobs?body_value=unpaid").json()["field"], "body_value");
  EXPECT_EQ(Call("GET", "/v1/jobs?body_field=order..status").json()["field"], "body_field");
  EXPECT_EQ(Call("GET", "/v1/jobs?body_field=").json()["field"], "body_field");
  EXPECT_EQ(
      Call("GET", "/v1/jobs?body_field=a&body_value=" + std::string(4097, 'v')).json()["field"],
      "body_value");
}

// A body search reads at most kBodyScanBytes per page (bodies and 256 bytes
// a job): a page can come back short, its cursor going on from the last job
// read, and following the cursors finds every match.
TEST_F(HttpApiTest, ABodySearchReadsABoundedNumberOfJobsPerPage) {
  constexpr int kJobs = 10'050;  // 10,050 x (1,700 + 256) bytes: 19 MiB, over 16
  const std::string pad(1700, 'p');
  for (int i = 0; i < kJobs; i += 50) {
    json batch = json::array();
    for (int k = i; k < i + 50; ++k) {
      batch.push_back({{"delay", "1h"},
                       {"body", {{"n", k}, {"rare", k == 0 || k == kJobs - 1}, {"pad", pad}}}});
    }
    Ok("POST", "/v1/topics/many/jobs", batch, 201);
  }
  json first = Ok("GET", "/v1/jobs?topic=many&body_field=rare&body_value=true&limit=10");
  ASSERT_EQ(first["jobs"].size(), 1u) << "the first 16 MiB of jobs hold one match";
  EXPECT_EQ(first["jobs"][0]["body"]["n"], 0);
  ASSERT_TRUE(first["next_cursor"].is_string()) << first["next_cursor"];
  const uint64_t first_id = first["jobs"][0]["id"];
  const uint64_t cursor = std::stoull(first["next_cursor"].get<std::string>());
  EXPECT_GT(cursor, first_id + 8'000) << "read most of the jobs";
  EXPECT_LT(cursor, first_id + kJobs - 1) << "but not all";
  json second = Ok("GET", "/v1/jobs?topic=many&body_field=rare&body_value=true&limit=10&cursor=" +
                              std::to_string(cursor));
  ASSERT_EQ(second["jobs"].size(), 1u) << second["next_cursor"];
  EXPECT_EQ(second["jobs"][0]["body"]["n"], kJobs - 1);
  EXPECT_TRUE(second["next_cursor"].is_null()) << second["next_cursor"];
}

TEST_F(HttpApiTest, OneEngineTwoFrontDoors) {
  Client bs(server_->port());
  bs.Cmd("use shared");
  const uint64_t id = bs.Put("hello", 10);
  json j = Ok("GET", "/v1/jobs/" + std::to_string(id));
  EXPECT_EQ(j["topic"], "shared");
  EXPECT_EQ(j["body_base64"], "aGVsbG8=");
  EXPECT_EQ(j["priority"], 10);
  // Submitted over HTTP, reserved over beanstalk.
  json h = Ok("POST", "/v1/topics/shared/jobs", {{"priority", 0}, {"body", {{"a", 1}}}}, 201);
  bs.Cmd("watch shared");
  std::string r = bs.Cmd("reserve-with-timeout 1");
  EXPECT_EQ(r, "RESERVED " + std::to_string(h["id"].get<uint64_t>()) + " 7\r\n{\"a\":1}\r\n");
  EXPECT_EQ(Ok("GET", "/v1/jobs/" + std::to_string(h["id"].get<uint64_t>()))["state"], "reserved");
  // HTTP reserve waits (long poll) and is woken by a beanstalk put.
  std::thread later([&] {
    std::this_thread::sleep_for(200ms);
    Client c2(server_->port());
    c2.Cmd("use late");
    c2.Put("hi", 1);
  });
  auto start = std::chrono::steady_clock::now();
  json got = Ok("POST", "/v1/topics/late/reserve?timeout_ms=5000");
  later.join();
  EXPECT_EQ(got["body_base64"], "aGk=");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_EQ(Call("POST", "/v1/topics/empty/reserve?timeout_ms=100").status, 204);
}

TEST_F(HttpApiTest, ALongPollWhoseClientHangsUpLeavesTheJobToOthers) {
  auto waiting = [&] { return Ok("GET", "/v1/stats")["waiting_consumers"].get<int>(); };
  int fd = ConnectLoopback(server_->http_port());
  ASSERT_GE(fd, 0);
  const std::string req =
      "POST /v1/topics/hup/reserve?timeout_ms=30000 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Length: 0\r\n\r\n";
  ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  ASSERT_TRUE(WaitUntil([&] { return waiting() == 1; }, 5s)) << "the long poll never waited";
  ::close(fd);
  ASSERT_TRUE(WaitUntil([&] { return waiting() == 0; }, 5s))
      << "the server kept waiting for a client that had gone";
  // The job goes to a client that is there, not to the one that left.
  json put = Ok("POST", "/v1/topics/hup/jobs", {{"body", "x"}}, 201);
  json got = Ok("POST", "/v1/topics/hup/reserve?timeout_ms=5000");
  EXPECT_EQ(got["id"], put["id"]);
}

TEST_F(HttpApiTest, SigtermAnswersAWaitingLongPollAndExitsPromptly) {
  HttpReply reply;
  std::thread poll([&] { reply = Call("POST", "/v1/topics/quiet/reserve?timeout_ms=30000"); });
  ASSERT_TRUE(
      WaitUntil([&] { return Ok("GET", "/v1/stats")["waiting_consumers"].get<int>() == 1; }, 5s));
  auto start = std::chrono::steady_clock::now();
  int status = server_->Terminate();
  poll.join();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_EQ(reply.status, 503) << reply.body;
  EXPECT_EQ(reply.json()["type"], "https://delayd.dev/problems/unavailable") << reply.body;
}

TEST_F(HttpApiTest, EveryValidationErrorNamesItsFieldAndChangesNothing) {
  struct Case {
    std::string body;
    std::string field;
  };
  std::vector<Case> cases = {
      {"{", "body"},
      {"", "body"},
      {R"({"bogus":1})", "bogus"},
      {R"({"delay":"soon"})", "delay"},
      {R"({"delay":-5})", "delay"},
      {R"({"delay":"1m","run_at":"2030-01-01T00:00:00Z"})", "run_at"},
      {R"({"run_at":"2026-02-30T10:00:00Z"})", "run_at"},
      {R"({"run_at":"tomorrow"})", "run_at"},
      {R"({"delay":"200y"})", "delay"},
      {R"({"priority":-1})", "priority"},
      {R"({"priority":"high"})", "priority"},
      {R"({"ttr_ms":10})", "ttr_ms"},
      {R"({"key":""})", "key"},
      {R"({"key":")" + std::string(201, 'k') + R"("})", "key"},
      {R"({"body_base64":"!!"})", "body_base64"},
      {R"({"body":1,"body_base64":"AA=="})", "body_base64"},
      {R"({"body":")" + std::string(70000, 'x') + R"("})", "body"},
      {R"({"target":{"url":"ftp://x"}})", "target.url"},
      {R"({"target":{}})", "target.url"},
      {R"({"target":{"url":"http://x","method":"BREW"}})", "target.method"},
      {R"({"target":{"url":"http://x","timeout_ms":0}})", "target.timeout_ms"},
      {R"({"target":{"url":"http://x","headers":{"X":"a\nb"}}})", "target.headers.X"},
      {R"({"retry":{"max_attempts":0}})", "retry.max_attempts"},
      {R"({"retry":{"multiplier":0.5}})", "retry.multiplier"},
      {R"({"retry":{"initial_backoff_ms":5000,"max_backoff_ms":10}})", "retry.initial_backoff_ms"},
      {R"({"retry":{"jitter":"yes"}})", "retry.jitter"},
      {R"([])", "body"},
      {R"([{"delay":1},{"delay":"x"}])", "[1].delay"},
      {"[" + std::string(50, '{').substr(0, 0) +
           [] {
             std::string s;
             for (int i = 0; i < 51; ++i) s += std::string(i ? "," : "") + "{}";
             return s;
           }() +
           "]",
       "body"},
      {"3", "body"},
  };
  for (const Case& c : cases) {
    HttpReply r = Call("POST", "/v1/topics/v/jobs", c.body);
    EXPECT_EQ(r.status, 400) << c.body.substr(0, 80) << ": " << r.body;
    EXPECT_EQ(r.headers["content-type"], "application/problem+json");
    json p = r.json();
    EXPECT_EQ(p["field"], c.field) << c.body.substr(0, 80) << ": " << r.body;
    EXPECT_EQ(p["type"], "https://delayd.dev/problems/invalid-request");
    EXPECT_FALSE(p["detail"].get<std::string>().empty());
  }
  // Nothing was created, not even by the batch with one bad job.
  EXPECT_EQ(Ok("GET", "/v1/jobs?limit=1000")["jobs"].size(), 0u);
  EXPECT_EQ(Call("GET", "/v1/topics/v").status, 404);

  EXPECT_EQ(Call("POST", "/v1/topics/bad%20name/jobs", "{}").json()["field"], "topic");
  EXPECT_EQ(Call("GET", "/v1/jobs/abc").json()["field"], "id");
  EXPECT_EQ(Call("GET", "/v1/jobs?limit=0").json()["field"], "limit");
  EXPECT_EQ(Call("GET", "/v1/jobs?state=sleeping").json()["field"], "state");
  EXPECT_EQ(Call("GET", "/v1/jobs?due_after=yesterday").json()["field"], "due_after");
  EXPECT_EQ(Call("GET", "/v1/jobs?colour=red").json()["field"], "colour");
  EXPECT_EQ(Call("POST", "/v1/topics/t/reserve?timeout_ms=999999").json()["field"], "timeout_ms");
  EXPECT_EQ(Call("PUT", "/v1/topics/t", R"({"rate_limit_per_s":-1})").json()["field"],
            "rate_limit_per_s");
  EXPECT_EQ(Call("PUT", "/v1/topics/t", R"({"alert":{"webhook":"nope"}})").json()["field"],
            "alert.webhook");
  EXPECT_EQ(Call("PATCH", "/v1/jobs/1", R"({"key":"k"})").status, 400);
  EXPECT_EQ(Call("GET", "/v1/jobs/999").status, 404);
  EXPECT_EQ(Call("GET", "/v1/nothing").status, 404);
  EXPECT_EQ(Call("DELETE", "/v1/topics").status, 405);
}

// Found by the http fuzz target: a problem reply that quoted a request path
// or query parameter that was not UTF-8 threw while rendering, and the
// server died.
TEST_F(HttpApiTest, PathsAndParametersThatAreNotUtf8GetAProblemReply) {
  for (const std::string target :
       {"/v1/nowhere/\xff\xfe", "/v1/jobs?\xc3\x28=1", "/v1/topics/t\x80/jobs"}) {
    HttpReply r = Call(target.find("/jobs?") != std::string::npos ? "GET" : "POST", target, "{}");
    EXPECT_GE(r.status, 400) << target;
    EXPECT_LT(r.status, 500) << target;
    EXPECT_TRUE(json::accept(r.body)) << target << ": " << r.body;
  }
  Ok("GET", "/v1/stats");  // still serving
}

TEST(HttpApiLimits, OversizedRequestsAndMissingTokensAreRefused) {
  DelaydServer server(MakeTempDir("delayd-http-limits"),
                      {"--api-token", "sekret", "--max-request-bytes", "2048"});
  HttpReply r = HttpCall(server.http_port(), "GET", "/v1/stats");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.headers["www-authenticate"], "Bearer");
  EXPECT_EQ(
      HttpCall(server.http_port(), "GET", "/v1/stats", "", {"Authorization: Bearer wrong"}).status,
      401);
  EXPECT_EQ(
      HttpCall(server.http_port(), "GET", "/v1/stats", "", {"Authorization: Bearer sekret"}).status,
      200);
  EXPECT_EQ(HttpCall(server.http_port(), "GET", "/healthz").status, 200);
  std::string big = R"({"body":")" + std::string(4000, 'x') + R"("})";
  EXPECT_EQ(HttpCall(server.http_port(), "POST", "/v1/topics/t/jobs", big,
                     {"Authorization: Bearer sekret"})
                .status,
            413);
}

TEST_F(HttpApiTest, TheOpenApiDocumentIsServed) {
  json doc = Ok("GET", "/v1/openapi.json");
  EXPECT_EQ(doc["openapi"], "3.1.0");
  EXPECT_TRUE(doc["paths"].contains("/v1/topics/{topic}/jobs"));
}

TEST_F(HttpApiTest, TopicsPauseAndResume) {
  Ok("POST", "/v1/topics/p/jobs", {{"body", 1}}, 201);
  EXPECT_EQ(Ok("POST", "/v1/topics/p/pause")["paused"], true);
  EXPECT_EQ(Call("POST", "/v1/topics/p/reserve?timeout_ms=100").status, 204);
  EXPECT_EQ(Ok("POST", "/v1/topics/p/resume")["paused"], false);
  EXPECT_EQ(Ok("POST", "/v1/topics/p/reserve?timeout_ms=1000")["topic"], "p");
  json t = Ok("PUT", "/v1/topics/p", {{"rate_limit_per_s", 5}, {"signing_secret", "x"}});
  EXPECT_EQ(t["rate_limit_per_s"], 5.0);
  EXPECT_EQ(t["signing_secret_set"], true);
  EXPECT_FALSE(t.contains("signing_secret"));
  // A GET body can be PUT back; the secret is kept.
  json again = Ok("PUT", "/v1/topics/p", t);
  EXPECT_EQ(again["signing_secret_set"], true);
  server_->Restart();
  EXPECT_EQ(Ok("GET", "/v1/topics/p")["rate_limit_per_s"], 5.0);
}

}  // namespace
}  // namespace delayd::testing

namespace delayd::testing {
namespace {

uint64_t Sum(const nlohmann::json& counts) {
  uint64_t n = 0;
  for (const auto& c : counts) n += c.get<uint64_t>();
  return n;
}

TEST_F(HttpApiTest, TheDueForecastCountsDelayedJobsPerComingBucket) {
  using nlohmann::json;
  Ok("POST", "/v1/topics/f/jobs",
     json::array({{{"delay", "5m"}},
                  {{"delay", "5m"}},
                  {{"delay", "5m"}},
                  {{"delay", "90m"}},
                  {{"delay", "90m"}},
                  {{"delay", "3d"}}}),
     201);
  Ok("POST", "/v1/topics/g/jobs", json::array({{{"delay", "5m"}}, {{"delay", 0}}}), 201);
  // A job whose time came is not due any more (on one node its row still
  // says delayed; memory has made it ready).
  json soon = Ok("POST", "/v1/topics/g/jobs", {{"delay", "300ms"}}, 201);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Ok("GET", "/v1/jobs/" + std::to_string(soon["id"].get<uint64_t>()))["state"] ==
               "ready";
      },
      std::chrono::seconds(5)));
  json minutes = Ok("GET", "/v1/forecast?bucket=minute&count=10&topic=f");
  ASSERT_EQ(minutes["counts"].size(), 10u) << minutes;
  EXPECT_EQ(Sum(minutes["counts"]), 3u) << minutes;
  EXPECT_EQ(minutes["counts"][5].get<uint64_t>() + minutes["counts"][4].get<uint64_t>(), 3u)
      << "due in 5 minutes: " << minutes;
  EXPECT_EQ(minutes["bucket_ms"], 60000);
  EXPECT_EQ(minutes["from"].get<std::string>().substr(17), "00.000Z") << "the current minute";
  json hours = Ok("GET", "/v1/forecast?bucket=hour&count=3&topic=f");
  EXPECT_EQ(Sum(hours["counts"]), 5u) << "three days out is beyond 3 hours: " << hours;
  EXPECT_EQ(hours["from"].get<std::string>().substr(14), "00:00.000Z") << "the current hour";
  json days = Ok("GET", "/v1/forecast?bucket=day");
  ASSERT_EQ(days["counts"].size(), 30u);
  EXPECT_EQ(Sum(days["counts"]), 7u) << "every topic's delayed jobs, not the ready one: " << days;
  // One node counts hours and days in memory: a job put now is in them at
  // once, and one that fires leaves them.
  Ok("POST", "/v1/topics/f/jobs", {{"delay", "5m"}}, 201);
  json fleeting = Ok("POST", "/v1/topics/f/jobs", {{"delay", "500ms"}}, 201);
  EXPECT_EQ(Sum(Ok("GET", "/v1/forecast?bucket=hour&count=3&topic=f")["counts"]), 7u);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Ok("GET", "/v1/jobs/" + std::to_string(fleeting["id"].get<uint64_t>()))["state"] ==
               "ready";
      },
      std::chrono::seconds(5)));
  EXPECT_EQ(Sum(Ok("GET", "/v1/forecast?bucket=hour&count=3&topic=f")["counts"]), 6u);
  EXPECT_EQ(Sum(Ok("GET", "/v1/forecast?bucket=day&topic=g")["counts"]), 1u);
  EXPECT_EQ(Sum(Ok("GET", "/v1/forecast?bucket=day&topic=nothing")["counts"]), 0u);
  EXPECT_EQ(Sum(Ok("GET", "/v1/forecast?bucket=minute&count=10&topic=f")["counts"]), 4u);
  EXPECT_EQ(Call("GET", "/v1/forecast?bucket=week").status, 400);
  EXPECT_EQ(Call("GET", "/v1/forecast?count=0").status, 400);
  EXPECT_EQ(Call("GET", "/v1/forecast?colour=red").status, 400);
}

}  // namespace
}  // namespace delayd::testing
