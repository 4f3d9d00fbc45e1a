// delayctl as a script uses it: the real binary against a real delayd, every
// command, its output and its exit codes, and bad input refused with a
// clear message, the documented code and nothing changed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "support/http.h"
#include "support/process.h"

namespace delayd::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

struct Outcome {
  int rc = -1;
  std::string out, err;
};

class DelayctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("delayd-ctl");
    server_ = std::make_unique<DelaydServer>(dir_ + "/data", extra_);
  }
  // Starts delayctl with `args` (stdin from `input`), DELAYD_SERVER set to
  // the server; Finish waits for it.
  pid_t Spawn(const std::vector<std::string>& args, const std::string& input = "",
              const std::vector<std::string>& env = {}) {
    std::ofstream(dir_ + "/in") << input;
    pid_t pid = fork();
    if (pid == 0) {
      int i = open((dir_ + "/in").c_str(), O_RDONLY),
          o = open((dir_ + "/out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600),
          e = open((dir_ + "/err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(i, 0), dup2(o, 1), dup2(e, 2);
      setenv("DELAYD_SERVER", ("http://127.0.0.1:" + std::to_string(server_->http_port())).c_str(),
             1);
      unsetenv("DELAYD_TOKEN");
      for (const std::string& kv : env) putenv(strdup(kv.c_str()));
      std::vector<char*> argv{const_cast<char*>(DELAYCTL_BIN)};
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(DELAYCTL_BIN, argv.data());
      _exit(127);
    }
    return pid;
  }
  // Waits for delayctl `pid` to exit, 30 s at most: its code and output.
  Outcome Finish(pid_t pid) {
    Outcome r;
    int status = 0;
    for (auto deadline = std::chrono::steady_clock::now() + 30s;;) {
      if (waitpid(pid, &status, WNOHANG) == pid) break;
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        ADD_FAILURE() << "delayctl did not end within 30 s";
        break;
      }
      std::this_thread::sleep_for(5ms);
    }
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = ReadFile(dir_ + "/out");
    r.err = ReadFile(dir_ + "/err");
    return r;
  }
  Outcome Ctl(const std::vector<std::string>& args, const std::string& input = "",
              const std::vector<std::string>& env = {}) {
    return Finish(Spawn(args, input, env));
  }
  // Runs delayctl and expects exit code `rc`.
  Outcome Expect(int rc, const std::vector<std::string>& args, const std::string& input = "") {
    Outcome r = Ctl(args, input);
    std::string cmd;
    for (const auto& a : args) cmd += a + " ";
    EXPECT_EQ(r.rc, rc) << "delayctl " << cmd << "\nstdout: " << r.out << "\nstderr: " << r.err;
    return r;
  }
  json Api(const std::string& method, const std::string& target, const std::string& body = "") {
    return HttpCall(server_->http_port(), method, target, body).json();
  }
  uint64_t Count(const std::string& topic) {
    json t = Api("GET", "/v1/topics/" + topic);
    if (!t.contains("counts")) return 0;
    const json& c = t["counts"];
    return c["ready"].get<uint64_t>() + c["delayed"].get<uint64_t>() + c["buried"].get<uint64_t>() +
           c["reserved"].get<uint64_t>();
  }
  static size_t Lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }
  // The value of "name: value" in a table of fields; "?" when absent.
  static std::string FieldOf(const std::string& out, const std::string& name) {
    size_t at = out.rfind("\n" + name + ":", out.size());
    if (out.compare(0, name.size() + 1, name + ":") == 0)
      at = 0;
    else if (at == std::string::npos)
      return "?";
    else
      at += 1;
    size_t v = out.find_first_not_of(' ', at + name.size() + 1);
    return out.substr(v, out.find('\n', v) - v);
  }

  std::vector<std::string> extra_;
  std::string dir_;
  std::unique_ptr<DelaydServer> server_;
};

TEST_F(DelayctlTest, SubmitGetListAndTheOneJobActions) {
  // The body goes in and comes back byte for byte.
  Outcome s = Expect(0, {"submit", "orders", "--key", "order-1", "--delay", "30m", "--body",
                         R"({"total": 1.50, "items": [ 1,2 ]})"});
  EXPECT_NE(s.out.find("order-1"), std::string::npos) << s.out;
  Outcome got = Expect(0, {"get", "--topic", "orders", "--key", "order-1", "-o", "json"});
  EXPECT_NE(got.out.find(R"("body":{"total": 1.50, "items": [ 1,2 ]})"), std::string::npos)
      << got.out;
  const uint64_t id = json::parse(got.out)["id"];
  Outcome dup = Expect(0, {"submit", "orders", "--key", "order-1", "--body", "2"});
  EXPECT_NE(dup.out.find("yes"), std::string::npos) << "DUPLICATE column: " << dup.out;
  Outcome file = Expect(
      0, {"submit", "orders", "--file", "-", "--batch", "2"},
      "{\"key\":\"a\",\"delay\":\"1h\"}\n\n{\"key\":\"b\"}\n{\"key\":\"c\",\"delay\":5000}\n");
  EXPECT_EQ(Lines(file.out), 4u) << file.out;  // a header and three jobs
  EXPECT_EQ(Count("orders"), 4u);

  Outcome table = Expect(0, {"get", std::to_string(id)});
  EXPECT_EQ(FieldOf(table.out, "state"), "delayed") << table.out;
  Outcome list = Expect(0, {"list", "--topic", "orders", "--limit", "2"});
  EXPECT_EQ(Lines(list.out), 3u) << list.out;
  EXPECT_NE(list.err.find("--all"), std::string::npos) << "says there is more: " << list.err;
  Outcome all = Expect(0, {"list", "--topic", "orders", "--limit", "1", "--all"});
  EXPECT_EQ(Lines(all.out), 5u) << all.out;
  Outcome pages = Expect(0, {"list", "--state", "ready", "-o", "json"});
  EXPECT_EQ(json::parse(pages.out)["jobs"].size(), 1u) << pages.out;  // "b"
  Outcome by_body = Expect(
      0, {"list", "--topic", "orders", "--body-field", "items.1", "--body-value", "2", "--all"});
  EXPECT_EQ(Lines(by_body.out), 2u) << "a header and order-1: " << by_body.out;
  EXPECT_NE(by_body.out.find("order-1"), std::string::npos) << by_body.out;

  Expect(0, {"run-now", std::to_string(id)});
  EXPECT_EQ(Api("GET", "/v1/jobs/" + std::to_string(id))["state"], "ready");
  Outcome bury = Expect(0, {"bury", std::to_string(id)});
  EXPECT_EQ(bury.out, std::to_string(id) + ": buried\n");
  EXPECT_EQ(Api("GET", "/v1/jobs/" + std::to_string(id))["state"], "buried");
  Expect(0, {"kick", std::to_string(id)});
  Outcome cancel = Expect(0, {"cancel", std::to_string(id)});
  EXPECT_EQ(cancel.out, std::to_string(id) + ": cancelled\n");
  EXPECT_EQ(Count("orders"), 3u);
  json c = Api("GET", "/v1/topics/orders/keys/c");
  Expect(0, {"kick", std::to_string(c["id"].get<uint64_t>())});
  EXPECT_EQ(Api("GET", "/v1/topics/orders/keys/c")["state"], "ready");
  Outcome attempts = Expect(0, {"attempts", std::to_string(c["id"].get<uint64_t>())});
  EXPECT_EQ(Lines(attempts.out), 1u) << "a header, no attempts: " << attempts.out;
}

TEST_F(DelayctlTest, DeadLettersAreRetriedOneByOneOrInBulk) {
  Receiver gone([](const Received&, int) { return Answer(410); });
  std::string batch = "[";
  for (int i = 0; i < 4; ++i)
    batch += std::string(i ? "," : "") + R"({"target":{"url":")" + gone.url() + "\"}}";
  HttpCall(server_->http_port(), "POST", "/v1/topics/hooks/jobs", batch + "]");
  ASSERT_TRUE(
      WaitUntil([&] { return Api("GET", "/v1/dead-letters")["jobs"] == 4; }, 10s));  // in the store
  Outcome dead = Expect(0, {"list", "--state", "buried", "--error", "410"});
  EXPECT_EQ(Lines(dead.out), 5u) << dead.out;
  const std::string first = dead.out.substr(
      dead.out.find('\n') + 1, dead.out.find(' ', dead.out.find('\n')) - dead.out.find('\n') - 1);
  Expect(0, {"retry", first});
  ASSERT_TRUE(gone.WaitFor([](const std::vector<Received>& r) { return r.size() == 5; }, 10s));
  ASSERT_TRUE(
      WaitUntil([&] { return Api("GET", "/v1/dead-letters")["jobs"] == 4; }, 10s));  // in the store

  Outcome dry = Expect(0, {"bulk", "retry", "--state", "buried", "--error", "410", "--dry-run"});
  EXPECT_EQ(FieldOf(dry.out, "matched"), "4") << dry.out;
  EXPECT_EQ(gone.count(), 5u);
  Outcome bulk = Expect(0, {"bulk", "retry", "--state", "buried", "--error", "410"});
  EXPECT_EQ(FieldOf(bulk.out, "applied"), "4") << bulk.out;
  EXPECT_EQ(FieldOf(bulk.out, "state"), "done") << bulk.out;
  ASSERT_TRUE(gone.WaitFor([](const std::vector<Received>& r) { return r.size() == 9; }, 10s));

  Outcome ops = Expect(0, {"bulk", "list"});
  EXPECT_EQ(Lines(ops.out), 3u) << ops.out;
  Outcome status = Expect(0, {"bulk", "status", "2", "-o", "json"});
  EXPECT_EQ(json::parse(status.out)["applied"], 4);
  Outcome stop = Expect(0, {"bulk", "stop", "2"});
  EXPECT_EQ(FieldOf(stop.out, "stop_asked"), "true") << stop.out;
  Outcome nowait = Expect(0, {"bulk", "cancel", "--topic", "hooks", "--no-wait", "-o", "json"});
  EXPECT_EQ(json::parse(nowait.out)["action"], "cancel");
  ASSERT_TRUE(WaitUntil([&] { return Count("hooks") == 0; }, 10s));
  Outcome shifted = Expect(0, {"bulk", "reschedule", "--topic", "none", "--shift", "-1h"});
  EXPECT_EQ(FieldOf(shifted.out, "matched"), "0") << shifted.out;
}

TEST_F(DelayctlTest, TopicsTimersStatsAndHealth) {
  Expect(0, {"submit", "ranking", "--delay", "1h"});
  Outcome set = Expect(0, {"topics", "set", "ranking", "--json", R"({"rate_limit_per_s": 50})"});
  EXPECT_EQ(FieldOf(set.out, "rate_limit_per_s"), "50.0") << set.out;
  Expect(0, {"topics", "pause", "ranking", "--for", "1h"});
  EXPECT_EQ(Api("GET", "/v1/topics/ranking")["paused"], true);
  Outcome topics = Expect(0, {"topics"});
  EXPECT_NE(topics.out.find("ranking"), std::string::npos) << topics.out;
  EXPECT_NE(topics.out.find("yes"), std::string::npos) << "paused: " << topics.out;
  Expect(0, {"topics", "resume", "ranking"});
  EXPECT_EQ(Api("GET", "/v1/topics/ranking")["paused"], false);
  Expect(0, {"topics", "get", "ranking"});

  Outcome preview = Expect(0, {"timers", "preview", "--schedule", "0 9 * * *", "--timezone",
                               "Asia/Shanghai", "--count", "2"});
  EXPECT_EQ(Lines(preview.out), 2u) << preview.out;
  EXPECT_NE(preview.out.find("T01:00:00.000Z"), std::string::npos) << "09:00 in Shanghai";
  Outcome made = Expect(0, {"timers", "create", "--name", "tick", "--topic", "ticks", "--schedule",
                            "@every 1s", "--body", R"({"n": 1.0})", "-o", "json"});
  const std::string id = std::to_string(json::parse(made.out)["id"].get<uint64_t>());
  ASSERT_TRUE(WaitUntil([&] { return Count("ticks") >= 1; }, 5s)) << "the timer fires";
  Outcome fires = Expect(0, {"timers", "fires", id});
  EXPECT_GE(Lines(fires.out), 2u) << fires.out;
  Outcome list = Expect(0, {"timers"});
  EXPECT_NE(list.out.find("tick"), std::string::npos) << list.out;
  Expect(0, {"timers", "next", id});
  Expect(0, {"timers", "pause", id});
  EXPECT_EQ(Api("GET", "/v1/timers/" + id)["active"], false);
  Expect(0, {"timers", "resume", id});
  Expect(0, {"timers", "edit", id, "--json", R"({"schedule": "@every 1h"})"});
  EXPECT_EQ(Api("GET", "/v1/timers/" + id)["schedule"], "@every 1h");
  Expect(0, {"timers", "get", id});
  Expect(0, {"timers", "delete", id});
  Expect(3, {"timers", "get", id});

  Outcome stats = Expect(0, {"stats"});
  EXPECT_EQ(FieldOf(stats.out, "jobs.delayed"),
            std::to_string(Api("GET", "/v1/stats")["jobs"]["delayed"].get<uint64_t>()))
      << stats.out;
  Outcome health = Expect(0, {"health"});
  EXPECT_EQ(health.out, "ready\n");
  Expect(3, {"cluster"});  // one node: not a cluster
  Outcome completion = Expect(0, {"completion", "bash"});
  EXPECT_NE(completion.out.find("complete -F _delayctl delayctl"), std::string::npos);
  EXPECT_NE(completion.out.find("\" bulk\") words=\"cancel retry kick run-now reschedule"),
            std::string::npos)
      << completion.out;
  for (const char* cmd :
       {"submit", "get", "attempts", "list", "cancel", "retry", "run-now", "kick", "bury", "bulk",
        "topics", "timers", "stats", "cluster", "health", "completion"}) {
    Outcome help = Expect(0, {cmd, "--help"});
    EXPECT_NE(help.out.find("Usage:"), std::string::npos) << cmd;
  }
}

TEST_F(DelayctlTest, BadInputIsRefusedWithItsExitCodeAndChangesNothing) {
  Expect(0, {"submit", "t", "--key", "k", "--delay", "1h"});
  struct Case {
    int rc;
    std::vector<std::string> args;
    std::string input;
    const char* says;
  };
  const Case cases[] = {
      {2, {"submit", "t", "--body", "{\"a\":"}, "", "--body is not valid JSON"},
      {2, {"submit", "t", "--file", "-"}, "{\"key\":\"x\"}\n{\"key\":\n", "-:2: not a JSON object"},
      {2, {"submit", "t", "--file", "/nonexistent/jobs"}, "", "cannot read"},
      {2, {"submit", "t", "--file", "-", "--key", "x"}, "{}\n", "give no --body"},
      {1, {"submit", "t", "--delay", "soon"}, "", "(field [0].delay)"},
      {1, {"submit", "t", "--delay", "99999999999999999999"}, "", "(field [0].delay)"},
      {1, {"topics", "pause", "t", "--for", "-5"}, "", "(field for_ms)"},
      {2, {"submit"}, "", "topic is required"},
      {2, {"frobnicate"}, "", ""},
      {2, {"list", "--state", "sleeping"}, "", "sleeping"},
      {2, {"get"}, "", "get takes a job id"},
      {3, {"get", "424242"}, "", "HTTP 404"},
      {3, {"cancel", "424242"}, "", "job 424242 was not cancelled"},
      {2, {"bulk", "cancel"}, "", "bulk needs a filter"},
      {1, {"bulk", "cancel", "--due-before", "tomorrow"}, "", "(field filter.due_before)"},
      {1, {"bulk", "cancel", "--body-value", "x"}, "", "(field filter.body_value)"},
      {1, {"list", "--body-field", "a..b"}, "", "(field body_field)"},
      {2, {"topics", "set", "t", "--json", "{nope"}, "", "not valid JSON"},
      {1, {"topics", "set", "t", "--json", "{\"colour\":1}"}, "", "(field colour)"},
      {1, {"timers", "preview", "--schedule", "61 * * * *"}, "", "HTTP 400"},
      {2, {"timers", "create", "--name", "x"}, "", "needs --name, --topic and --schedule"},
      {2, {"-o", "yaml", "stats"}, "", "yaml"},
  };
  for (const Case& c : cases) {
    Outcome r = Expect(c.rc, c.args, c.input);
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args[0] << ": " << r.err;
  }
  EXPECT_EQ(Count("t"), 1u) << "nothing was submitted or cancelled";
  EXPECT_EQ(Api("GET", "/v1/topics/t")["rate_limit_per_s"], 0) << "settings unchanged";
  EXPECT_EQ(Api("GET", "/v1/timers")["timers"].size(), 0u);
  EXPECT_EQ(Api("GET", "/v1/bulk")["operations"].size(), 0u);

  // A reserved job cannot be cancelled: 4. No server: 6.
  Expect(0, {"run-now", std::to_string(Api("GET", "/v1/topics/t/keys/k")["id"].get<uint64_t>())});
  json reserved = Api("POST", "/v1/topics/t/reserve?timeout_ms=1000");
  ASSERT_TRUE(reserved.contains("id")) << reserved;
  Outcome conflict = Expect(4, {"cancel", std::to_string(reserved["id"].get<uint64_t>())});
  EXPECT_NE(conflict.err.find("HTTP 409"), std::string::npos) << conflict.err;
  Outcome down = Expect(6, {"--server", "http://127.0.0.1:1", "stats"});
  EXPECT_NE(down.err.find("no answer from the server"), std::string::npos) << down.err;
}

// Ctrl-C while delayctl follows a bulk operation stops the operation, which
// ends after the chunk in flight. To catch it in flight, another session of
// PostgreSQL holds the jobs table locked, so the first chunk's read waits.
TEST_F(DelayctlTest, CtrlCDuringABulkStopsItAfterTheChunkInFlight) {
  if (!DelaydServer::OnPostgres()) GTEST_SKIP() << "holds the operation up with a PostgreSQL lock";
  std::string batch = "[";
  for (int i = 0; i < 50; ++i) batch += std::string(i ? "," : "") + R"({"delay":"1h"})";
  for (int i = 0; i < 12; ++i) {  // 600 jobs: a chunk of 500 and one of 100
    ASSERT_EQ(HttpCall(server_->http_port(), "POST", "/v1/topics/slow/jobs", batch + "]").status,
              201);
  }
  PGconn* locker = PQconnectdb(server_->store_uri().c_str());
  ASSERT_EQ(PQstatus(locker), CONNECTION_OK) << PQerrorMessage(locker);
  PGresult* r = PQexec(locker, "BEGIN; LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE");
  ASSERT_EQ(PQresultStatus(r), PGRES_COMMAND_OK) << PQerrorMessage(locker);
  PQclear(r);

  pid_t ctl = Spawn({"bulk", "cancel", "--topic", "slow"});
  // Following the progress (its SIGINT handler set), the first read waiting.
  ASSERT_TRUE(
      WaitUntil([&] { return ReadFile(dir_ + "/err").find("running") != std::string::npos; }, 10s))
      << ReadFile(dir_ + "/err");
  ASSERT_EQ(kill(ctl, SIGINT), 0);
  EXPECT_TRUE(WaitUntil([&] { return Api("GET", "/v1/bulk/1")["stop_asked"] == true; }, 10s))
      << "delayctl asked the server to stop";
  EXPECT_EQ(Api("GET", "/v1/bulk/1")["state"], "running") << "the chunk is still in flight";
  r = PQexec(locker, "ROLLBACK");
  PQclear(r);
  PQfinish(locker);

  Outcome done = Finish(ctl);
  EXPECT_EQ(done.rc, 7) << "stopped: " << done.out << done.err;
  EXPECT_EQ(FieldOf(done.out, "state"), "stopped") << done.out;
  EXPECT_EQ(FieldOf(done.out, "applied"), "500") << done.out;
  EXPECT_EQ(Count("slow"), 100u) << "the second chunk never ran";
}

class DelayctlTokenTest : public DelayctlTest {
 protected:
  void SetUp() override {
    extra_ = {"--api-token", "s3cret"};
    DelayctlTest::SetUp();
  }
};

TEST_F(DelayctlTokenTest, TheTokenComesFromTheEnvironmentAndAWrongOneExitsFive) {
  Outcome none = Ctl({"stats"});
  EXPECT_EQ(none.rc, 5) << none.err;
  EXPECT_NE(none.err.find("HTTP 401"), std::string::npos) << none.err;
  EXPECT_EQ(Ctl({"stats"}, "", {"DELAYD_TOKEN=wrong"}).rc, 5);
  EXPECT_EQ(Ctl({"stats"}, "", {"DELAYD_TOKEN=s3cret"}).rc, 0);
  EXPECT_EQ(Ctl({"--token", "s3cret", "stats"}).rc, 0);
  Outcome sub = Ctl({"submit", "t", "--body", "1"}, "", {"DELAYD_TOKEN=s3cret"});
  EXPECT_EQ(sub.rc, 0) << sub.err;
}

// A server that is not delayd (a web server on the wrong port, a proxy's
// error page, another JSON API): delayctl says so and exits 6; it never
// prints a value it did not get.
TEST_F(DelayctlTest, AServerThatIsNotDelaydIsNamedAndExitsSix) {
  Receiver html([](const Received&, int) {
    Answer a(200, {"Content-Type: text/html"});
    a.body = "<html><body>welcome</body></html>";
    return a;
  });
  Receiver other_json([](const Received&, int) {
    Answer a(200, {"Content-Type: application/json"});
    a.body = R"({"hello":"world","jobs":"none"})";
    return a;
  });
  Receiver empty([](const Received&, int) {
    Answer a(200, {"Content-Type: application/json"});
    a.body = "";
    return a;
  });
  for (const Receiver* stranger : {&html, &other_json, &empty}) {
    const std::string server = "http://127.0.0.1:" + std::to_string(stranger->port());
    for (const std::vector<std::string>& cmd :
         std::vector<std::vector<std::string>>{{"stats"}, {"get", "1"}, {"health"}, {"topics"}}) {
      std::vector<std::string> args = {"--server", server};
      args.insert(args.end(), cmd.begin(), cmd.end());
      Outcome r = Ctl(args);
      EXPECT_EQ(r.rc, 6) << cmd[0] << " against " << server << "\nstdout: " << r.out
                         << "\nstderr: " << r.err;
      EXPECT_EQ(r.out, "") << cmd[0];
      EXPECT_NE(r.err.find(server), std::string::npos) << cmd[0] << ": " << r.err;
    }
  }
  // The real server still passes every check.
  Expect(0, {"stats"});
  Expect(0, {"health"});
}

}  // namespace
}  // namespace delayd::testing
