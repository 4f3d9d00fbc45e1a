// Bulk operations over HTTP (POST /v1/bulk): dead letters retried by their
// error text, dry runs, progress, and every malformed request refused with
// nothing changed.
#include <gtest/gtest.h>

#include "support/http.h"
#include "support/process.h"

namespace delayd::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

class BulkTest : public ::testing::Test {
 protected:
  void SetUp() override { server_ = std::make_unique<DelaydServer>(MakeTempDir("delayd-bulk")); }
  json Ok(const std::string& method, const std::string& target, const json& body = nullptr,
          int want = 200) {
    HttpReply r = HttpCall(server_->http_port(), method, target, body.is_null() ? "" : body.dump());
    EXPECT_EQ(r.status, want) << method << " " << target << ": " << r.body;
    return r.json();
  }
  // Starts an operation and waits for its end; returns its last progress.
  json RunBulk(const json& request) {
    json started = Ok("POST", "/v1/bulk", request, 202);
    const std::string at = "/v1/bulk/" + std::to_string(started["id"].get<uint64_t>());
    json p;
    EXPECT_TRUE(WaitUntil(
        [&] {
          p = Ok("GET", at);
          return p["state"] != "running";
        },
        20s))
        << p;
    return p;
  }
  std::unique_ptr<DelaydServer> server_;
};

TEST_F(BulkTest, DeadLettersMatchingAnErrorAreRetriedAndTheOthersStay) {
  // /gone answers 410: dead at once. /busy answers 503: dead after one try.
  Receiver targets([](const Received& r, int) { return Answer(r.path == "/gone" ? 410 : 503); });
  json gone = json::array(), busy = json::array();
  for (int i = 0; i < 3; ++i) gone.push_back({{"target", {{"url", targets.url("/gone")}}}});
  for (int i = 0; i < 2; ++i) {
    busy.push_back({{"target", {{"url", targets.url("/busy")}}}, {"retry", {{"max_attempts", 1}}}});
  }
  json a = Ok("POST", "/v1/topics/hooks/jobs", gone, 201);
  Ok("POST", "/v1/topics/hooks/jobs", busy, 201);
  ASSERT_TRUE(
      WaitUntil([&] { return Ok("GET", "/v1/dead-letters")["jobs"] == 5; }, 10s));  // in the store
  const json filter = {{"topic", "hooks"}, {"state", "buried"}, {"error", "410"}};

  // The dead letters grouped by error, largest group first.
  // They are read from the store, which may be a commit behind the topic's
  // counts (memory): wait for the last dead letter's write.
  json groups;
  ASSERT_TRUE(WaitUntil(
      [&] {
        groups = Ok("GET", "/v1/dead-letters");
        return groups["jobs"] == 5;
      },
      10s))
      << groups;
  ASSERT_EQ(groups["groups"].size(), 2u) << groups;
  EXPECT_NE(groups["groups"][0]["error"].get<std::string>().find("410"), std::string::npos);
  EXPECT_EQ(groups["groups"][0]["count"], 3);
  EXPECT_EQ(groups["groups"][0]["first_job_id"], a[0]["id"]);
  EXPECT_NE(groups["groups"][1]["error"].get<std::string>().find("503"), std::string::npos);
  EXPECT_EQ(groups["groups"][1]["count"], 2);
  EXPECT_EQ(Ok("GET", "/v1/dead-letters?limit=1")["groups"].size(), 1u);
  EXPECT_EQ(Ok("GET", "/v1/dead-letters?topic=other")["jobs"], 0);
  EXPECT_EQ(HttpCall(server_->http_port(), "GET", "/v1/dead-letters?colour=red").status, 400);
  EXPECT_EQ(HttpCall(server_->http_port(), "GET", "/v1/dead-letters?limit=0").status, 400);

  json dry = RunBulk({{"action", "retry"}, {"filter", filter}, {"dry_run", true}});
  EXPECT_EQ(dry["state"], "done") << dry;
  EXPECT_EQ(dry["matched"], 3);
  EXPECT_EQ(dry["applied"], 0);
  EXPECT_EQ(targets.count(), 5u) << "a dry run delivers nothing";

  json done = RunBulk({{"action", "retry"}, {"filter", filter}});
  EXPECT_EQ(done["state"], "done") << done;
  EXPECT_EQ(done["matched"], 3);
  EXPECT_EQ(done["applied"], 3);
  EXPECT_EQ(done["filter"], filter);
  // Each retried job was delivered again (and died again); the 503s were not.
  ASSERT_TRUE(targets.WaitFor(
      [](const std::vector<Received>& got) {
        return std::count_if(got.begin(), got.end(),
                             [](const Received& r) { return r.path == "/gone"; }) == 6;
      },
      10s));
  for (const json& job : a) {
    const std::string at = "/v1/jobs/" + std::to_string(job["id"].get<uint64_t>()) + "/attempts";
    ASSERT_TRUE(WaitUntil([&] { return Ok("GET", at)["attempts"].size() == 2; }, 10s));
  }
  const std::vector<Received> got = targets.received();
  EXPECT_EQ(
      std::count_if(got.begin(), got.end(), [](const Received& r) { return r.path == "/busy"; }),
      2);
  json listed = Ok("GET", "/v1/bulk")["operations"];
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0]["id"], done["id"]) << "most recent first";
}

TEST_F(BulkTest, CancelAndRescheduleByKeyPrefixAndDueRange) {
  json batch = json::array();
  for (int i = 0; i < 20; ++i) {
    batch.push_back({{"key", "order-" + std::to_string(i)}, {"delay", "2h"}});
  }
  Ok("POST", "/v1/topics/orders/jobs", batch, 201);
  json r = RunBulk({{"action", "reschedule"},
                    {"filter", {{"topic", "orders"}, {"key_prefix", "order-1"}}},
                    {"shift", "-1h"}});
  EXPECT_EQ(r["applied"], 11);  // order-1, order-10..19
  json moved = Ok("GET", "/v1/topics/orders/keys/order-12");
  json kept = Ok("GET", "/v1/topics/orders/keys/order-2");
  EXPECT_LT(moved["due_at"].get<std::string>(), kept["due_at"].get<std::string>());
  // Cancel what is due within the next 90 minutes: the 11 moved ones.
  json c = RunBulk(
      {{"action", "cancel"}, {"filter", {{"topic", "orders"}, {"due_before", kept["due_at"]}}}});
  EXPECT_EQ(c["applied"], 11) << c;
  EXPECT_EQ(Ok("GET", "/v1/topics/orders")["counts"]["delayed"], 9);
}

TEST_F(BulkTest, CancelByAFieldOfTheBody) {
  json batch = json::array();
  for (int i = 0; i < 12; ++i) {
    batch.push_back({{"delay", "2h"}, {"body", {{"user", i % 4 == 0 ? "u-1" : "u-2"}}}});
  }
  Ok("POST", "/v1/topics/mail/jobs", batch, 201);
  const json filter = {{"topic", "mail"}, {"body_field", "user"}, {"body_value", "u-1"}};
  json dry = RunBulk({{"action", "cancel"}, {"filter", filter}, {"dry_run", true}});
  EXPECT_EQ(dry["matched"], 3) << dry;
  EXPECT_EQ(dry["filter"], filter);
  EXPECT_EQ(Ok("GET", "/v1/topics/mail")["counts"]["delayed"], 12) << "a dry run changes nothing";
  json c = RunBulk({{"action", "cancel"}, {"filter", filter}});
  EXPECT_EQ(c["applied"], 3) << c;
  EXPECT_EQ(Ok("GET", "/v1/topics/mail")["counts"]["delayed"], 9);
  EXPECT_EQ(Ok("GET", "/v1/jobs?topic=mail&body_field=user&body_value=u-1")["jobs"].size(), 0u);
}

TEST_F(BulkTest, MalformedRequestsAreRefusedAndChangeNothing) {
  Ok("POST", "/v1/topics/t/jobs", {{"delay", "1h"}}, 201);
  struct Bad {
    json body;
    const char* field;
  };
  const Bad bad[] = {
      {{{"filter", {{"topic", "t"}}}}, "action"},
      {{{"action", "explode"}, {"filter", {{"topic", "t"}}}}, "action"},
      {{{"action", "cancel"}}, "filter"},
      {{{"action", "cancel"}, {"filter", json::object()}}, "filter"},
      {{{"action", "cancel"}, {"filter", {{"topic", "t"}, {"colour", "red"}}}}, "filter.colour"},
      {{{"action", "cancel"}, {"filter", {{"state", "sleeping"}}}}, "filter.state"},
      {{{"action", "cancel"}, {"filter", {{"due_before", "tomorrow"}}}}, "filter.due_before"},
      {{{"action", "cancel"}, {"filter", {{"topic", 7}}}}, "filter.topic"},
      {{{"action", "cancel"}, {"filter", {{"topic", "t"}}}, {"shift", "1h"}}, "shift"},
      {{{"action", "reschedule"}, {"filter", {{"topic", "t"}}}}, "shift"},
      {{{"action", "reschedule"}, {"filter", {{"topic", "t"}}}, {"shift", "soon"}}, "shift"},
      {{{"action", "reschedule"}, {"filter", {{"topic", "t"}}}, {"shift", 1}, {"due_at", "x"}},
       "due_at"},
      {{{"action", "cancel"}, {"filter", {{"topic", "t"}}}, {"max_jobs", 0}}, "max_jobs"},
      {{{"action", "cancel"}, {"filter", {{"topic", "t"}}}, {"dry_run", "yes"}}, "dry_run"},
      {{{"action", "cancel"}, {"filter", {{"topic", "t"}}}, {"everything", true}}, "everything"},
  };
  for (const Bad& b : bad) {
    HttpReply r = HttpCall(server_->http_port(), "POST", "/v1/bulk", b.body.dump());
    EXPECT_EQ(r.status, 400) << b.body << ": " << r.body;
    EXPECT_EQ(r.json().value("field", ""), b.field) << b.body << ": " << r.body;
  }
  EXPECT_EQ(HttpCall(server_->http_port(), "POST", "/v1/bulk", "{\"action\":").status, 400);
  EXPECT_EQ(Ok("GET", "/v1/bulk")["operations"].size(), 0u);
  EXPECT_EQ(Ok("GET", "/v1/topics/t")["counts"]["delayed"], 1);
  EXPECT_EQ(HttpCall(server_->http_port(), "GET", "/v1/bulk/9").status, 404);
  EXPECT_EQ(HttpCall(server_->http_port(), "POST", "/v1/bulk/9/stop").status, 404);
  EXPECT_EQ(HttpCall(server_->http_port(), "GET", "/v1/bulk/x").status, 400);
}

}  // namespace
}  // namespace delayd::testing
