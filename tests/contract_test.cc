// Contracts users rely on, each found broken once by using delayd as its
// users (and attackers) would: hostile JSON, bodies that must come back byte
// for byte, the two front doors agreeing on what a delete means, a pause of
// zero, the version clients read, and the smaller HTTP contract points.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>
#include <thread>

#include "common/time_format.h"
#include "support/client.h"
#include "support/http.h"
#include "support/process.h"

namespace delayd::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

class ContractTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<DelaydServer>(MakeTempDir("delayd-contract"));
  }
  HttpReply Call(const std::string& method, const std::string& target,
                 const std::string& body = "") {
    return HttpCall(server_->http_port(), method, target, body);
  }
  json Ok(const std::string& method, const std::string& target, const std::string& body, int want) {
    HttpReply r = Call(method, target, body);
    EXPECT_EQ(r.status, want) << method << " " << target << ": " << r.body;
    return r.json();
  }
  std::unique_ptr<DelaydServer> server_;
};

int64_t ParseTime(const json& j) { return ParseRfc3339(j.get<std::string>()).value_or(0); }

std::string Nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST_F(ContractTest, DeeplyNestedJsonIsRefusedNamingTheFieldAndTheServerLives) {
  // The request that once crashed the server: 140 KB, 70,000 levels.
  HttpReply r = Call("POST", "/v1/topics/t1/jobs", "{\"body\":" + Nested(70'000) + "}");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json()["field"], "body");
  r = Call("POST", "/v1/topics/t1/jobs", "[{\"body\":1},{\"body\":" + Nested(200) + "}]");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["field"], "[1].body");
  r = Call(
      "POST", "/v1/timers",
      R"({"name":"n","topic":"t","schedule":"@daily","template":{"body":)" + Nested(200) + "}}");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["field"], "template.body");
  r = Call("PUT", "/v1/topics/t1", "{\"target\":" + Nested(100'000) + "}");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["field"], "target");
  // Nesting up to the limit is accepted, and nothing above was stored.
  json ok = Ok("POST", "/v1/topics/t1/jobs", "{\"body\":" + Nested(120) + "}", 201);
  EXPECT_EQ(Ok("GET", "/v1/topics/t1", "", 200)["counts"]["ready"], 1);
  EXPECT_EQ(Ok("GET", "/v1/jobs/" + std::to_string(ok["id"].get<uint64_t>()), "", 200)["state"],
            "ready");
}

// Numbers a double would round, keys a map would sort, escapes and spacing
// a serializer would rewrite.
const std::string kBody =
    R"({"z":1,"a":12345678901234567890123,"e":1E2, "big":18446744073709551616,)"
    R"("f":0.1000000000000000055511151231257827,"s":"\u00e9\/x", "n" : [ -0.0 , 1e-7 ]})";

TEST_F(ContractTest, AJsonBodyComesBackByteForByteOverEveryFrontDoor) {
  json one = Ok("POST", "/v1/topics/raw/jobs", R"({"key":"k1", "body": )" + kBody + "}", 201);
  json batch = Ok("POST", "/v1/topics/raw/jobs",
                  R"([{"body":7}, {"body":)" + kBody + R"(,"priority":1}])", 201);
  const std::string id = std::to_string(one["id"].get<uint64_t>());
  // Read back over HTTP: the reply embeds the submitted text.
  HttpReply got = Call("GET", "/v1/jobs/" + id);
  EXPECT_NE(got.body.find("\"body\":" + kBody), std::string::npos) << got.body;
  // Reserved over beanstalk: the exact bytes.
  Client c(server_->port());
  EXPECT_EQ(c.Cmd("watch raw"), "WATCHING 2\r\n");
  for (int i = 0; i < 3; ++i) {
    std::string reply = c.Cmd("reserve-with-timeout 5");
    ASSERT_EQ(reply.rfind("RESERVED ", 0), 0u) << reply;
    const std::string body = reply.substr(reply.find("\r\n") + 2);
    EXPECT_TRUE(body == "7\r\n" || body == kBody + "\r\n") << body;
  }
  // Patched, the new body is kept as sent too.
  json late = Ok("POST", "/v1/topics/raw2/jobs", R"({"delay":"1h","body":1})", 201);
  const std::string late_id = std::to_string(late["id"].get<uint64_t>());
  Ok("PATCH", "/v1/jobs/" + late_id, "{\"body\":" + kBody + "}", 200);
  EXPECT_NE(Call("GET", "/v1/jobs/" + late_id).body.find("\"body\":" + kBody), std::string::npos);
  (void)batch;
}

TEST_F(ContractTest, APushedBodyAndATimerFireCarryTheSubmittedBytes) {
  Receiver target;
  Ok("POST", "/v1/topics/push/jobs",
     R"({"target":{"url":")" + target.url("/job") + R"("},"body":)" + kBody + "}", 201);
  Ok("POST", "/v1/timers",
     R"({"name":"every-second","topic":"tick","schedule":"* * * * * *","template":{"target":{"url":")" +
         target.url("/timer") + R"("},"body":)" + kBody + "}}",
     201);
  ASSERT_TRUE(target.WaitFor(
      [](const std::vector<Received>& got) {
        bool job = false, timer = false;
        for (const Received& r : got) (r.path == "/job" ? job : timer) = true;
        return job && timer;
      },
      10s));
  for (const Received& r : target.received()) {
    EXPECT_EQ(r.body, kBody) << r.path;
    // Only the documented Delayd-* headers, nothing internal.
    for (const auto& [name, value] : r.headers) {
      EXPECT_NE(name.rfind("x-", 0), 0u) << name << ": " << value;
    }
  }
}

TEST_F(ContractTest, ALateJobKeepsTheTimeItWasAskedForBesideWhenItBecameReady) {
  const std::string past = "2020-01-02T03:04:05.678Z";
  json j = Ok("POST", "/v1/topics/late/jobs", R"({"run_at":")" + past + R"(","body":1})", 201);
  EXPECT_EQ(j["run_at"], past);
  EXPECT_GT(ParseTime(j["due_at"]), ParseTime(j["run_at"]) + 86'400'000LL * 365);
  EXPECT_TRUE(j["timer"].is_null());
  server_->Restart();
  json again = Ok("GET", "/v1/jobs/" + std::to_string(j["id"].get<uint64_t>()), "", 200);
  EXPECT_EQ(again["run_at"], past) << "stored, not derived";
  EXPECT_EQ(again["due_at"], j["due_at"]);
  HttpReply reserved = Call("POST", "/v1/topics/late/jobs", R"({"key":"timer:1:5","body":1})");
  EXPECT_EQ(reserved.status, 400);
  EXPECT_EQ(reserved.json()["field"], "key");
}

TEST_F(ContractTest, PushRequestsNameTheKeyAndForATimerTheFireEvenWhenLate) {
  server_ = std::make_unique<DelaydServer>(
      MakeTempDir("delayd-contract"), std::vector<std::string>{"--timer-misfire-grace-ms", "100"});
  Receiver target;
  // A key no header may carry as it is: it is percent-encoded.
  Ok("POST", "/v1/topics/keyed/jobs",
     R"({"key":"a b\r\nX-Injected: 1%","target":{"url":")" + target.url("/keyed") + R"("}})", 201);
  json timer = Ok("POST", "/v1/timers",
                  R"({"name":"each-second","topic":"fires","schedule":"* * * * * *",)"
                  R"("misfire":"fire_all","template":{"target":{"url":")" +
                      target.url("/fire") + R"("}}})",
                  201);
  const std::string timer_id = std::to_string(timer["id"].get<uint64_t>());
  auto fires = [&] {
    std::vector<Received> out;
    for (const Received& r : target.received()) {
      if (r.path == "/fire") out.push_back(r);
    }
    return out;
  };
  ASSERT_TRUE(WaitUntil([&] { return !fires().empty(); }, 10s));
  // Down for two seconds: the fires missed then are made on restart, due
  // now, and say which fire they were.
  server_->Kill9();
  std::this_thread::sleep_for(2s);  // the downtime itself, not a wait for a condition
  server_->Restart();
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (Received& r : fires()) {
          if (ParseRfc3339(r.headers["delayd-fire-at"]) <
              ParseRfc3339(r.headers["delayd-due-at"]).value_or(0) - 1000) {
            return true;
          }
        }
        return false;
      },
      10s))
      << "a catch-up fire, due later than its fire time";
  for (Received& r : fires()) {
    const std::string& key = r.headers["delayd-key"];
    ASSERT_EQ(key.rfind("timer:" + timer_id + ":", 0), 0u) << key;
    EXPECT_EQ(r.headers["delayd-timer-id"], timer_id);
    const int64_t fire_ms = std::stoll(key.substr(key.rfind(':') + 1));
    EXPECT_EQ(ParseRfc3339(r.headers["delayd-fire-at"]), fire_ms) << key;
    EXPECT_LE(fire_ms, ParseRfc3339(r.headers["delayd-due-at"]).value_or(0));
  }
  std::vector<Received> keyed;
  for (const Received& r : target.received()) {
    if (r.path == "/keyed") keyed.push_back(r);
  }
  ASSERT_FALSE(keyed.empty());
  EXPECT_EQ(keyed[0].headers["delayd-key"], "a%20b%0D%0AX-Injected:%201%25");
  EXPECT_EQ(keyed[0].headers.count("x-injected"), 0u);
  EXPECT_EQ(keyed[0].headers.count("delayd-timer-id"), 0u);
}

TEST_F(ContractTest, LinkLocalTargetsAreRefusedWhereverATargetIsNamed) {
  auto field = [&](const std::string& method, const std::string& path, const std::string& body) {
    HttpReply r = Call(method, path, body);
    EXPECT_EQ(r.status, 400) << method << " " << path << ": " << r.body;
    return r.json().value("field", "");
  };
  EXPECT_EQ(field("POST", "/v1/topics/t/jobs",
                  R"({"target":{"url":"http://169.254.169.254/latest/meta-data/"}})"),
            "target.url");
  EXPECT_EQ(field("POST", "/v1/topics/t/jobs",
                  R"([{"body":1},{"target":{"url":"http://[::ffff:169.254.169.254]/"}}])"),
            "[1].target.url");
  EXPECT_EQ(field("PUT", "/v1/topics/t", R"({"target":{"url":"http://0.0.0.0:8080/"}})"),
            "target.url");
  EXPECT_EQ(field("PUT", "/v1/topics/t", R"({"alert":{"webhook":"http://[fe80::1]/hook"}})"),
            "alert.webhook");
  EXPECT_EQ(field("POST", "/v1/timers",
                  R"({"name":"n","topic":"t","schedule":"@daily",)"
                  R"("template":{"target":{"url":"http://169.254.1.1/"}}})"),
            "template.target.url");
  json j = Ok("POST", "/v1/topics/t/jobs", R"({"delay":"1h","body":1})", 201);
  EXPECT_EQ(field("PATCH", "/v1/jobs/" + std::to_string(j["id"].get<uint64_t>()),
                  R"({"target":{"url":"http://169.254.169.254/"}})"),
            "target.url");
  EXPECT_EQ(Ok("GET", "/v1/topics/t", "", 200)["counts"]["delayed"], 1) << "nothing else stored";
}

TEST_F(ContractTest, ADeniedAddressIsRefusedAtConnectionWhateverTheNameSaid) {
  // localhost passes the submission check (a name); its addresses are denied.
  server_ = std::make_unique<DelaydServer>(
      MakeTempDir("delayd-contract"),
      std::vector<std::string>{"--target-deny", "127.0.0.0/8", "--target-deny", "[::1]"});
  Receiver target;
  const std::string url = "http://localhost:" + std::to_string(target.port()) + "/hook";
  json j = Ok("POST", "/v1/topics/guarded/jobs",
              R"({"target":{"url":")" + url + R"("},"retry":{"max_attempts":1}})", 201);
  const std::string id = std::to_string(j["id"].get<uint64_t>());
  json job;
  ASSERT_TRUE(WaitUntil(
      [&] {
        job = Ok("GET", "/v1/jobs/" + id, "", 200);
        return job["state"] == "buried";
      },
      10s))
      << job.dump();
  EXPECT_NE(job["last_error"].get<std::string>().find("refused by the target policy"),
            std::string::npos)
      << job["last_error"];
  EXPECT_EQ(target.count(), 0u);
  // A literal address is refused at once.
  HttpReply r =
      Call("POST", "/v1/topics/guarded/jobs",
           R"({"target":{"url":"http://127.0.0.1:)" + std::to_string(target.port()) + R"(/"}})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.json()["detail"].get<std::string>().find("--target-deny 127.0.0.0/8"),
            std::string::npos);
}

TEST_F(ContractTest, AnAllowListAdmitsOnlyWhatItNames) {
  Receiver target;
  const std::string port = std::to_string(target.port());
  server_ = std::make_unique<DelaydServer>(
      MakeTempDir("delayd-contract"),
      std::vector<std::string>{"--target-allow", "localhost:" + port});
  EXPECT_EQ(Call("POST", "/v1/topics/a/jobs",
                 R"({"target":{"url":"http://127.0.0.1:)" + port + R"(/x"}})")
                .status,
            400);
  EXPECT_EQ(
      Call("POST", "/v1/topics/a/jobs", R"({"target":{"url":"http://localhost:1/x"}})").status,
      400);
  Ok("POST", "/v1/topics/a/jobs", R"({"target":{"url":"http://localhost:)" + port + R"(/x"}})",
     201);
  EXPECT_TRUE(target.WaitFor([](const std::vector<Received>& got) { return !got.empty(); }, 10s));
}

TEST_F(ContractTest, AnUnreadableTargetRuleStopsTheServerAtStart) {
  const std::string dir = MakeTempDir("delayd-contract");
  const std::string cmd = std::string(DELAYD_BIN) + " --data-dir " + dir +
                          " --beanstalk 127.0.0.1:0 --http 127.0.0.1:0 --target-deny 10.0.0.0/99 "
                          "> " +
                          dir + "/out 2>&1";
  const int status = std::system(cmd.c_str());
  EXPECT_NE(status, 0);
  EXPECT_NE(ReadFile(dir + "/out").find("'10.0.0.0/99'"), std::string::npos)
      << ReadFile(dir + "/out");
}

TEST_F(ContractTest, DeletingOverBeanstalkCancelsExactlyAsHttpDeleteDoes) {
  json j = Ok("POST", "/v1/topics/orders/jobs", R"({"key":"K3","delay":"1h","body":1})", 201);
  const std::string id = std::to_string(j["id"].get<uint64_t>());
  Client c(server_->port());
  EXPECT_EQ(c.Cmd("delete " + id), "DELETED\r\n");
  EXPECT_EQ(Call("GET", "/v1/jobs/" + id).status, 404) << "a cancelled job is not a done one";
  EXPECT_EQ(Call("DELETE", "/v1/jobs/" + id).status, 404);
  json again = Ok("POST", "/v1/topics/orders/jobs", R"({"key":"K3","delay":"1h","body":2})", 201);
  EXPECT_EQ(again["duplicate"], false) << "the key is free at once";
  EXPECT_NE(again["id"], j["id"]);

  // A job that ran and was finished is done, with its attempt; removing the
  // done record over HTTP frees its key.
  json ran = Ok("POST", "/v1/topics/work/jobs", R"({"key":"K4","body":1})", 201);
  const std::string ran_id = std::to_string(ran["id"].get<uint64_t>());
  EXPECT_EQ(c.Cmd("watch work"), "WATCHING 2\r\n");
  EXPECT_EQ(Number(c.Cmd("reserve-with-timeout 5")), ran["id"].get<uint64_t>());
  EXPECT_EQ(c.Cmd("delete " + ran_id), "DELETED\r\n");
  json done = Ok("GET", "/v1/jobs/" + ran_id, "", 200);
  EXPECT_EQ(done["state"], "done");
  EXPECT_EQ(done["attempts"], 1);
  EXPECT_EQ(Call("DELETE", "/v1/jobs/" + ran_id).status, 204);
  EXPECT_EQ(Call("GET", "/v1/jobs/" + ran_id).status, 404);
  EXPECT_EQ(Ok("POST", "/v1/topics/work/jobs", R"({"key":"K4"})", 201)["duplicate"], false);
}

TEST_F(ContractTest, APauseOfZeroIsOverAtTheVeryNextReserve) {
  Client admin(server_->port());
  Client worker(server_->port());
  EXPECT_EQ(admin.Cmd("use pt"), "USING pt\r\n");
  EXPECT_EQ(worker.Cmd("watch pt"), "WATCHING 2\r\n");
  EXPECT_EQ(worker.Cmd("ignore default"), "WATCHING 1\r\n");
  const uint64_t id = admin.Put("ready one");
  // It once failed about one run in three; fifty in a row make a regression
  // all but certain to show.
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(admin.Cmd("pause-tube pt 60"), "PAUSED\r\n");
    ASSERT_EQ(worker.Cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
    ASSERT_EQ(admin.Cmd("pause-tube pt 0"), "PAUSED\r\n");
    const std::string stats = admin.Cmd("stats-tube pt");
    EXPECT_EQ(Field(stats, "pause-time-left"), "0");
    ASSERT_EQ(Number(worker.Cmd("reserve-with-timeout 0")), id) << "round " << i;
    ASSERT_EQ(worker.Cmd("release " + std::to_string(id) + " 0 0"), "RELEASED\r\n");
  }
}

TEST_F(ContractTest, StatsVersionIsASemverThatClientsReadAsBeanstalkd112) {
  Client c(server_->port());
  std::string version = Field(c.Cmd("stats"), "version");
  ASSERT_GE(version.size(), 2u);
  ASSERT_EQ(version.front(), '"');
  version = version.substr(1, version.size() - 2);
  // SemVer 2.0.0's own regular expression, which npm semver's strict parse
  // implements: major.minor.patch, optional pre-release, optional build.
  const std::regex semver(
      R"(^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*))"
      R"((?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?)"
      R"((?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$)");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(version, m, semver)) << version;
  // No pre-release part: npm semver's satisfies() excludes pre-releases from
  // ">= 1.8.0" unless asked to include them.
  EXPECT_FALSE(m[4].matched) << version;
  const int major = std::stoi(m[1]), minor = std::stoi(m[2]);
  EXPECT_TRUE(major == 1 && minor >= 12) << version << " must satisfy >= 1.8.0 as 1.12 does";
  EXPECT_NE(m[5].str().find("delayd"), std::string::npos) << "it still says it is delayd";
  // npm semver's coerce() (what lenient clients use) takes the first number
  // run: it must find the same 1.12.
  std::smatch coerced;
  ASSERT_TRUE(std::regex_search(version, coerced, std::regex(R"((\d+)\.(\d+))")));
  EXPECT_EQ(coerced[1], "1");
  EXPECT_EQ(coerced[2], "12");
}

// A raw HTTP/1.1 exchange on one connection, for what HttpCall hides.
class RawHttp {
 public:
  explicit RawHttp(int port) : fd_(ConnectLoopback(port)) { EXPECT_GE(fd_, 0); }
  ~RawHttp() { close(fd_); }
  void Send(const std::string& s) { EXPECT_EQ(write(fd_, s.data(), s.size()), ssize_t(s.size())); }
  // What arrives until `until` is in it, or the deadline passes.
  std::string ReadUntil(const std::string& until, std::chrono::milliseconds deadline) {
    const auto end = std::chrono::steady_clock::now() + deadline;
    while (got_.find(until) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char buf[4096];
      ssize_t n = read(fd_, buf, sizeof buf);
      if (n <= 0) break;
      got_.append(buf, static_cast<size_t>(n));
    }
    return got_;
  }

 private:
  int fd_ = -1;
  std::string got_;
};

TEST_F(ContractTest, ExpectContinueGetsTheInterimReplyBeforeTheBody) {
  RawHttp h(server_->http_port());
  const std::string body = R"({"body":1})";
  h.Send(
      "POST /v1/topics/t/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\nExpect: 100-continue\r\n\r\n");
  // curl waits 1 s for it before sending anyway; a strict client waits forever.
  const std::string interim = h.ReadUntil("\r\n\r\n", 800ms);
  ASSERT_EQ(interim.rfind("HTTP/1.1 100 Continue\r\n", 0), 0u) << interim;
  h.Send(body);
  const std::string all = h.ReadUntil("}", 5s);
  EXPECT_NE(all.find("HTTP/1.1 201 Created"), std::string::npos) << all;
  // A body over the limit is refused without asking for it.
  RawHttp big(server_->http_port());
  big.Send(
      "POST /v1/topics/t/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 999999999\r\n"
      "Expect: 100-continue\r\n\r\n");
  const std::string refused = big.ReadUntil("\r\n\r\n", 5s);
  EXPECT_EQ(refused.rfind("HTTP/1.1 413", 0), 0u) << refused;
}

TEST_F(ContractTest, ATtrTooLargeIsCalledTooLarge) {
  HttpReply r = Call("POST", "/v1/topics/t/jobs", R"({"ttr_ms":4611686018427387904})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["field"], "ttr_ms");
  EXPECT_NE(r.json()["detail"].get<std::string>().find("too large"), std::string::npos) << r.body;
  r = Call("POST", "/v1/topics/t/jobs", R"({"ttr_ms":999})");
  EXPECT_NE(r.json()["detail"].get<std::string>().find("at least 1 s"), std::string::npos);
}

TEST_F(ContractTest, TheOpenApiDocumentSaysWhichRoutesNeedABody) {
  json doc = Ok("GET", "/v1/openapi.json", "", 200);
  int checked = 0;
  for (auto& [path, ops] : doc["paths"].items()) {
    for (auto& [method, op] : ops.items()) {
      if (!op.is_object() || !op.contains("requestBody")) continue;
      std::string target = std::regex_replace(path, std::regex(R"(\{topic\})"), "t");
      target = std::regex_replace(target, std::regex(R"(\{id\})"), "1");
      std::string m = method;
      for (char& ch : m) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      HttpReply r = Call(m, target);
      const bool required = op["requestBody"].value("required", false);
      const bool refused = r.status == 400 && r.json().value("field", "") == "body" &&
                           r.json().value("detail", "").find("required") != std::string::npos;
      EXPECT_EQ(refused, required) << m << " " << path << " -> " << r.status << " " << r.body;
      ++checked;
    }
  }
  EXPECT_GE(checked, 10);
}

}  // namespace
}  // namespace delayd::testing
