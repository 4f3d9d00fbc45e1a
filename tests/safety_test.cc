// What a hostile web page, a hostile job or an operator slip must not do to
// delayd (issue 29): take a database another delayd holds, crash recovery
// with rows it cannot place, act through a browser from another origin or a
// rebound DNS name, fire a job early through an impossible time, reframe a
// push request, lock out the API with idle connections, or read the store's
// own error text. Each test speaks to the real binary as a client would; the
// store-dependent ones run on SQLite and, as "pg:" tests, on PostgreSQL.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <map>

#include "support/http.h"
#include "support/pg.h"
#include "support/process.h"

namespace delayd::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// Runs SQL on the server's store, stopped or not: its PostgreSQL database,
// or its SQLite file.
void StoreSql(const DelaydServer& server, const std::string& sql) {
  if (DelaydServer::OnPostgres()) {
    Query(server.store_uri(), sql);
    return;
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((server.data_dir() + "/delayd.db").c_str(), &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "") << " in " << sql;
  sqlite3_free(err);
  sqlite3_close(db);
}

// One request written as given (its Host and Origin headers among them) on
// a fresh connection; the server closes after the reply.
HttpReply Raw(int port, const std::string& request) {
  HttpReply r;
  int fd = ConnectLoopback(port);
  if (fd < 0) return r;
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) got.append(buf, n);
  ::close(fd);
  if (got.size() < 12) return r;
  r.status = std::stoi(got.substr(9, 3));
  const size_t end = got.find("\r\n\r\n");
  r.body = end == got.npos ? "" : got.substr(end + 4);
  return r;
}

class SafetyTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> extra = {}, std::vector<std::string> env = {}) {
    server_ = std::make_unique<DelaydServer>(MakeTempDir("delayd-safety"), std::move(extra),
                                             std::move(env));
  }
  HttpReply Call(const std::string& method, const std::string& target, const std::string& body = "",
                 const std::vector<std::string>& headers = {}) {
    return HttpCall(server_->http_port(), method, target, body, headers);
  }
  std::unique_ptr<DelaydServer> server_;
};

// Finding 1: a second delayd on the same store refuses to start, naming the
// holder, and writes nothing; the first goes on handing out its own ids.
TEST_F(SafetyTest, ASecondDelaydOnTheSameStoreRefusesToStartAndWritesNothing) {
  Start();
  ASSERT_EQ(Call("POST", "/v1/topics/t/jobs", R"({"body":1})").status, 201);
  std::vector<std::string> same = {"--beanstalk", "127.0.0.1:0", "--http",
                                   "127.0.0.1:0", "--data-dir",  server_->data_dir()};
  if (DelaydServer::OnPostgres()) {
    same.push_back("--store");
    same.push_back(server_->store_uri());
  }
  auto [status, log] = RefusedStart(same);
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_NE(WEXITSTATUS(status), 0) << log;
  EXPECT_NE(log.find("held by another delayd"), std::string::npos) << log;
  EXPECT_NE(log.find(std::to_string(server_->pid())), std::string::npos)
      << "the holder is named by its pid: " << log;
  EXPECT_NE(log.find("--cluster"), std::string::npos) << log;
  if (DelaydServer::OnPostgres()) {
    // A cluster node may not join a single node's database either.
    same.push_back("--cluster");
    auto [cluster_status, cluster_log] = RefusedStart(same);
    ASSERT_TRUE(WIFEXITED(cluster_status)) << cluster_log;
    EXPECT_NE(WEXITSTATUS(cluster_status), 0) << cluster_log;
    EXPECT_NE(cluster_log.find("a single node"), std::string::npos) << cluster_log;
  }
  // The first server is untouched: the next id follows its own.
  HttpReply next = Call("POST", "/v1/topics/t/jobs", R"({"body":2})");
  ASSERT_EQ(next.status, 201) << next.body;
  EXPECT_EQ(next.json()["id"], 2);
  EXPECT_EQ(Call("GET", "/v1/jobs/1").json()["body"], 1);
}

TEST_F(SafetyTest, ASingleNodeRefusesADatabaseThatClusterNodesShare) {
  if (!DelaydServer::OnPostgres()) GTEST_SKIP() << "cluster mode is PostgreSQL's";
  Start();
  const std::string uri = server_->store_uri();
  server_->Terminate();
  auto node = DelaydServer::Node(uri);
  auto [status, log] = RefusedStart({"--beanstalk", "127.0.0.1:0", "--http", "127.0.0.1:0",
                                     "--data-dir", MakeTempDir("delayd-single"), "--store", uri});
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_NE(WEXITSTATUS(status), 0) << log;
  EXPECT_NE(log.find("start this node with --cluster"), std::string::npos) << log;
  EXPECT_NE(log.find("delayd cluster"), std::string::npos) << "names the holder: " << log;
  // A second cluster node shares it.
  auto second = DelaydServer::Node(uri);
  EXPECT_EQ(HttpCall(second->http_port(), "GET", "/healthz").status, 200);
}

// Finding 1, the crash: rows recovery cannot place (two rows of one id, an
// unknown state, times past any calendar) are left out and counted, never
// dereferenced; the sound rows are served.
TEST_F(SafetyTest, RecoveryLeavesUnsoundRowsOutAndServesTheRest) {
  Start();
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(Call("POST", "/v1/topics/t/jobs", R"({"body":"ok","delay":"1h"})").status, 201);
  }
  server_->Terminate();
  if (DelaydServer::OnPostgres()) {
    // What two processes on one database wrote: job 1 twice, in two shards,
    // both ready.
    StoreSql(*server_, "UPDATE jobs SET state = 0 WHERE id = 1");
    StoreSql(*server_,
             "INSERT INTO jobs (shard, id, tube, pri, state, due_ms, due_min, delay_ms, ttr_ms, "
             "created_ms, run_at_ms, reserves, timeouts, releases, buries, kicks, body) "
             "SELECT (shard + 1) % 256, id, tube, pri, 0, due_ms, due_min, delay_ms, ttr_ms, "
             "created_ms, run_at_ms, 0, 0, 0, 0, 0, body FROM jobs WHERE id = 1");
  }
  StoreSql(*server_, "UPDATE jobs SET state = 0, tube = '' WHERE id = 2");
  StoreSql(*server_, "UPDATE jobs SET state = 0, due_ms = 9223372036854775000 WHERE id = 3");
  server_->Restart();
  json stats = Call("GET", "/v1/stats").json();
  const uint64_t want = DelaydServer::OnPostgres() ? 3 : 2;
  EXPECT_EQ(stats["unsound_rows"], want) << stats.dump();
  json ready = Call("GET", "/readyz").json();
  EXPECT_EQ(ready["status"], "ready");
  EXPECT_EQ(ready["unsound_rows"], want) << ready.dump();
  EXPECT_EQ(Call("GET", "/v1/jobs/4").json()["state"], "delayed");
  EXPECT_EQ(Call("GET", "/v1/jobs/1").json()["body"], "ok");
  // The server works on: a new job, and a restart.
  ASSERT_EQ(Call("POST", "/v1/topics/t/jobs", R"({"body":"new"})").status, 201);
  server_->Restart();
  EXPECT_EQ(Call("GET", "/healthz").status, 200);
}

// Finding 2: a page of another origin, or one whose DNS name was rebound
// to 127.0.0.1, gets nothing done; the server's own pages and clients that
// are not browsers work as before.
TEST_F(SafetyTest, CrossSiteRequestsAndForeignHostNamesAreRefused) {
  Start();
  ASSERT_EQ(Call("POST", "/v1/topics/t/jobs", R"({"body":1,"delay":"1h"})").status, 201);
  const std::string bulk = R"({"action":"cancel","filter":{"topic":"t"}})";
  const int port = server_->http_port();
  const std::string own = "127.0.0.1:" + std::to_string(port);
  // A form or fetch without preflight: text/plain.
  HttpReply plain = Raw(
      port, "POST /v1/bulk HTTP/1.1\r\nHost: " + own +
                "\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(bulk.size()) +
                "\r\nConnection: close\r\n\r\n" + bulk);
  EXPECT_EQ(plain.status, 415) << plain.body;
  // JSON from another origin.
  HttpReply foreign = Call("POST", "/v1/bulk", bulk, {"Origin: http://evil.example"});
  EXPECT_EQ(foreign.status, 403) << foreign.body;
  EXPECT_EQ(foreign.json()["type"], "https://delayd.dev/problems/cross-origin");
  // A rebound name: reads and writes refused alike.
  HttpReply rebound =
      Raw(port, "GET /v1/jobs HTTP/1.1\r\nHost: evil.example:" + std::to_string(port) +
                    "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(rebound.status, 403) << rebound.body;
  EXPECT_EQ(Call("GET", "/v1/topics/t").json()["counts"]["delayed"], 1) << "nothing cancelled";
  // The console's own pages, with its origin: allowed.
  EXPECT_EQ(Raw(port, "GET / HTTP/1.1\r\nHost: localhost:" + std::to_string(port) +
                          "\r\nConnection: close\r\n\r\n")
                .status,
            200);
  HttpReply same =
      Raw(port, "POST /v1/bulk HTTP/1.1\r\nHost: " + own + "\r\nOrigin: http://" + own +
                    "\r\nContent-Type: application/json\r\nContent-Length: " +
                    std::to_string(bulk.size()) + "\r\nConnection: close\r\n\r\n" + bulk);
  EXPECT_EQ(same.status, 202) << same.body;
}

TEST_F(SafetyTest, ListedOriginsAndHostsAreAllowed) {
  Start({"--http-allow-origin", "https://ops.example.com", "--http-allowed-hosts",
         "delayd.internal"});
  EXPECT_EQ(Call("POST", "/v1/topics/t/jobs", R"({"body":1})", {"Origin: https://ops.example.com"})
                .status,
            201);
  EXPECT_EQ(Raw(server_->http_port(),
                "GET /v1/stats HTTP/1.1\r\nHost: delayd.internal\r\nConnection: close\r\n\r\n")
                .status,
            200);
}

// Finding 3: every spelling of a duration or time goes through one checked
// parser; an impossible one is refused naming its field, and no job moves.
TEST_F(SafetyTest, ImpossibleTimesAndDurationsAreRefusedAndMoveNothing) {
  Start();
  HttpReply put = Call("POST", "/v1/topics/t/jobs", R"({"body":1,"delay":"1h"})");
  ASSERT_EQ(put.status, 201);
  const std::string due = put.json()["due_at"];
  for (const char* shift : {R"("2562047788h")", R"("999999999h")", R"("-2562047788h")",
                            "4294967296000", R"("99999999999999999999ms")", R"("1e3s")"}) {
    HttpReply r = Call(
        "POST", "/v1/bulk",
        std::string(R"({"action":"reschedule","filter":{"topic":"t"},"shift":)") + shift + "}");
    EXPECT_EQ(r.status, 400) << shift << ": " << r.body;
    EXPECT_EQ(r.json()["field"], "shift") << shift;
  }
  for (const char* job : {R"({"delay":"2562047788h"})", R"({"delay":"136y"})",
                          R"({"delay":4294967296000})", R"({"run_at":"0000-01-01T00:00:00Z"})",
                          R"({"run_at":"1969-12-31T23:59:59Z"})", R"({"ttr_ms":"999999999h"})"}) {
    HttpReply r = Call("POST", "/v1/topics/t/jobs", job);
    EXPECT_EQ(r.status, 400) << job << ": " << r.body;
    EXPECT_FALSE(r.json()["field"].get<std::string>().empty()) << job;
  }
  HttpReply bad_due = Call("POST", "/v1/bulk",
                           R"({"action":"reschedule","filter":{"topic":"t"},)"
                           R"("due_at":"10000-01-01T00:00:00Z"})");
  EXPECT_EQ(bad_due.status, 400) << bad_due.body;
  json job = Call("GET", "/v1/jobs/1").json();
  EXPECT_EQ(job["state"], "delayed");
  EXPECT_EQ(job["due_at"], due);
  // The largest shift allowed is applied, and reads back as RFC 3339.
  HttpReply max = Call("POST", "/v1/bulk",
                       R"({"action":"reschedule","filter":{"topic":"t"},"shift":"4294967295s"})");
  ASSERT_EQ(max.status, 202) << max.body;
  ASSERT_TRUE(WaitUntil([&] { return Call("GET", "/v1/jobs/1").json()["due_at"] != due; }, 10s));
  const std::string moved = Call("GET", "/v1/jobs/1").json()["due_at"];
  EXPECT_EQ(moved.size(), 24u) << moved;
  EXPECT_GT(moved, "2162") << moved;
}

// Finding 4: a job's headers cannot reframe its push request or imitate
// delayd's; delayd's own come first and once.
TEST_F(SafetyTest, TargetHeadersCannotReframeThePushRequest) {
  Receiver target;
  Start({"--target-allow", "127.0.0.1"});
  const std::string url = target.url();
  for (const char* name :
       {"Content-Length", "Transfer-Encoding", "connection", "Keep-Alive", "Upgrade", "TE",
        "Trailer", "Host", "Expect", "Proxy-Authorization", "Delayd-Signature", "delayd-job-id"}) {
    json job = {{"body", 1}, {"target", {{"url", url}, {"headers", {{name, "0"}}}}}};
    HttpReply r = Call("POST", "/v1/topics/t/jobs", job.dump());
    EXPECT_EQ(r.status, 400) << name << ": " << r.body;
    EXPECT_EQ(r.json()["field"], std::string("target.headers.") + name) << r.body;
    json topic = {{"target", {{"url", url}, {"headers", {{name, "0"}}}}}};
    EXPECT_EQ(Call("PUT", "/v1/topics/d", topic.dump()).status, 400) << name;
  }
  json timer = {{"name", "x"},
                {"topic", "t"},
                {"schedule", "0 0 * * * *"},
                {"template", {{"target", {{"url", url}, {"headers", {{"Delayd-Key", "k"}}}}}}}};
  EXPECT_EQ(Call("POST", "/v1/timers", timer.dump()).status, 400);
  json crlf = {{"body", 1}, {"target", {{"url", url}, {"headers", {{"X-A", "a\r\nX-B: b"}}}}}};
  EXPECT_EQ(Call("POST", "/v1/topics/t/jobs", crlf.dump()).status, 400);
  // An allowed header goes through, after delayd's own.
  json ok = {
      {"body", 1},
      {"target", {{"url", url}, {"headers", {{"X-Trace", "abc"}, {"Content-Type", "text/x"}}}}}};
  ASSERT_EQ(Call("POST", "/v1/topics/t/jobs", ok.dump()).status, 201);
  ASSERT_TRUE(target.WaitFor([](const auto& got) { return !got.empty(); }, 10s));
  const Received got = target.received().front();
  EXPECT_EQ(got.headers.at("x-trace"), "abc");
  EXPECT_EQ(got.headers.at("content-type"), "text/x");
  EXPECT_EQ(got.headers.at("delayd-job-id"), "1");
}

TEST_F(SafetyTest, AStoredTargetThatBreaksTheHeaderRulesIsNeverSent) {
  Receiver target;
  Start({"--target-allow", "127.0.0.1"});
  json job = {{"body", 1}, {"delay", "1h"}, {"target", {{"url", target.url()}}}};
  ASSERT_EQ(Call("POST", "/v1/topics/t/jobs", job.dump()).status, 201);
  server_->Terminate();
  // As a row written before the rule: the spec carries a forged header.
  const std::string spec = R"({"target":{"url":")" + target.url() +
                           R"(","headers":{"Content-Length":"0","Delayd-Job-Id":"999"}}})";
  StoreSql(*server_, DelaydServer::OnPostgres()
                         ? "UPDATE jobs SET spec = convert_to('" + spec + "', 'UTF8') WHERE id = 1"
                         : "UPDATE jobs SET spec = CAST('" + spec + "' AS BLOB) WHERE id = 1");
  server_->Restart();
  ASSERT_EQ(Call("POST", "/v1/jobs/1/run-now").status, 200);
  ASSERT_TRUE(
      WaitUntil([&] { return Call("GET", "/v1/jobs/1").json()["state"] == "buried"; }, 10s));
  json after = Call("GET", "/v1/jobs/1").json();
  EXPECT_NE(after["last_error"].get<std::string>().find("not sent"), std::string::npos)
      << after.dump();
  EXPECT_EQ(target.count(), 0u);
}

// Finding 5: connections that send part of a request and stop cannot keep
// others out; the oldest of them gives way.
TEST_F(SafetyTest, IdleHalfRequestsCannotLockOutTheApi) {
  Start({"--max-connections", "64"});
  std::vector<int> fds;
  for (int i = 0; i < 200; ++i) {
    int fd = ConnectLoopback(server_->http_port());
    ASSERT_GE(fd, 0);
    const std::string half = "GET /healthz HTTP/1.1\r\n";
    ::send(fd, half.data(), half.size(), MSG_NOSIGNAL);
    fds.push_back(fd);
  }
  for (const char* path : {"/healthz", "/readyz", "/metrics"}) {
    EXPECT_EQ(Call("GET", path).status, 200) << path;
  }
  for (int fd : fds) ::close(fd);
}

// Finding 9: what the store says stays in the log; the client gets an id.
TEST_F(SafetyTest, StoreErrorsReachClientsAsARequestIdAndReadyzSaysNotReady) {
  Start();
  ASSERT_EQ(Call("POST", "/v1/topics/t/jobs", R"({"body":1})").status, 201);
  // A jobs table that takes no more rows: on SQLite it is gone (renamed);
  // PostgreSQL's prepared statements follow a rename, so a constraint.
  StoreSql(*server_, DelaydServer::OnPostgres()
                         ? "ALTER TABLE jobs ADD CONSTRAINT no_more CHECK (id < 0) NOT VALID"
                         : "ALTER TABLE jobs RENAME TO jobs_moved");
  HttpReply ready;
  ASSERT_TRUE(WaitUntil([&] { return (ready = Call("GET", "/readyz")).status == 503; }, 10s))
      << ready.body;
  EXPECT_EQ(ready.body.find("jobs"), std::string::npos) << ready.body;
  HttpReply put = Call("POST", "/v1/topics/t/jobs", R"({"body":2})");
  EXPECT_EQ(put.status, 503) << put.body;
  const std::string detail = put.json()["detail"];
  EXPECT_EQ(detail.find("jobs"), std::string::npos) << "no SQL text: " << detail;
  const std::string id = put.headers["delayd-request-id"];
  ASSERT_FALSE(id.empty()) << put.body;
  EXPECT_NE(detail.find(id), std::string::npos);
  EXPECT_NE(server_->log().find("request " + id), std::string::npos) << "the log has the text";
}

TEST_F(SafetyTest, TimeZonesAreIanaNamesAndJsonMembersAppearOnce) {
  Start();
  for (const char* tz : {"/etc/localtime", "../../etc/localtime", "Fixed/UTC+01:00"}) {
    json timer = {{"name", "x"}, {"topic", "t"}, {"schedule", "0 0 9 * * *"}, {"timezone", tz}};
    HttpReply r = Call("POST", "/v1/timers", timer.dump());
    EXPECT_EQ(r.status, 400) << tz << ": " << r.body;
    EXPECT_EQ(r.json()["field"], "timezone") << r.body;
  }
  HttpReply twice = Call("POST", "/v1/topics/t/jobs", R"({"delay":"1h","body":1,"delay":0})");
  EXPECT_EQ(twice.status, 400) << twice.body;
  EXPECT_EQ(twice.json()["field"], "delay");
  HttpReply nested =
      Call("POST", "/v1/topics/t/jobs",
           R"({"target":{"url":"http://127.0.0.1:1/","url":"http://127.0.0.1:2/"}})");
  EXPECT_EQ(nested.status, 400);
  EXPECT_EQ(nested.json()["field"], "target.url");
  EXPECT_EQ(Call("GET", "/v1/topics/t").status, 404) << "nothing was created";
}

TEST_F(SafetyTest, TokensComeFromAFileOrTheEnvironmentAndTheReadTokenOnlyReads) {
  const std::string dir = MakeTempDir("delayd-token");
  { std::ofstream(dir + "/token") << "file-secret\n"; }
  Start({"--api-token-file", dir + "/token"}, {"DELAYD_API_READ_TOKEN=read-secret"});
  EXPECT_EQ(Call("GET", "/v1/stats").status, 401);
  EXPECT_EQ(Call("GET", "/v1/stats", "", {"Authorization: Bearer file-secret"}).status, 200);
  EXPECT_EQ(Call("GET", "/v1/stats", "", {"Authorization: Bearer read-secret"}).status, 200);
  HttpReply write =
      Call("POST", "/v1/topics/t/jobs", R"({"body":1})", {"Authorization: Bearer read-secret"});
  EXPECT_EQ(write.status, 403) << write.body;
  EXPECT_EQ(
      Call("POST", "/v1/topics/t/jobs", R"({"body":1})", {"Authorization: Bearer file-secret"})
          .status,
      201);
  // The token is nowhere on the command line.
  const std::string cmdline = ReadFile("/proc/" + std::to_string(server_->pid()) + "/cmdline");
  EXPECT_EQ(cmdline.find("secret"), std::string::npos);
}

// Issue 33: every operation the OpenAPI document lists, called with a read,
// a write and an admin token: each token is refused (403) exactly where the
// operation's scope is above its own, and the read token's walk changes
// nothing.
TEST_F(SafetyTest, EachTokenMayCallExactlyTheRoutesOfItsScope) {
  const std::string dir = MakeTempDir("delayd-tokens");
  WriteFile(dir + "/tokens", "# scope token\nadmin adm-1\nwrite wr-1\nread rd-1\n");
  Start({"--api-tokens-file", dir + "/tokens"});
  const std::vector<std::string> admin = {"Authorization: Bearer adm-1"};
  HttpReply put = Call("POST", "/v1/topics/scoped/jobs", R"({"key":"k","delay":"1h"})", admin);
  ASSERT_EQ(put.status, 201) << put.body;
  const std::string id = std::to_string(put.json()["id"].get<uint64_t>());
  HttpReply timer =
      Call("POST", "/v1/timers", R"({"name":"n","topic":"scoped","schedule":"@daily"})", admin);
  ASSERT_EQ(timer.status, 201) << timer.body;
  const std::string timer_id = timer.json()["id"].dump();
  const json doc = json::parse(Call("GET", "/v1/openapi.json", "", admin).body);
  auto target = [&](std::string path) {
    for (auto [from, to] :
         {std::pair<std::string, std::string>{"{topic}", "scoped"}, {"{key}", "k"}}) {
      if (size_t at = path.find(from); at != path.npos) path.replace(at, from.size(), to);
    }
    if (size_t at = path.find("{id}"); at != path.npos) {
      path.replace(at, 4, path.rfind("/v1/timers", 0) == 0 ? timer_id : id);
    }
    return path + "?timeout_ms=0";
  };
  // What the read token's walk must leave as it was.
  auto state = [&] {
    return Call("GET", "/v1/jobs?topic=scoped", "", admin).body +
           Call("GET", "/v1/topics/scoped", "", admin).body +
           Call("GET", "/v1/timers", "", admin).body;
  };
  const std::string before = state();
  // By rank: read, write, admin.
  const char* names[] = {"read", "write", "admin"};
  const char* tokens[] = {"rd-1", "wr-1", "adm-1"};
  int refused[3] = {0, 0, 0}, allowed[3] = {0, 0, 0};
  for (int t = 0; t < 3; ++t) {
    for (auto& [path, ops] : doc["paths"].items()) {
      if (path.rfind("/v1/", 0) != 0) continue;
      for (auto& [method, op] : ops.items()) {
        const std::string scope = op.at("x-delayd-scope");
        const int needed = scope == "read" ? 0 : scope == "write" ? 1 : 2;
        std::string upper = method;
        for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        HttpReply r = Call(upper, target(path), upper == "GET" ? "" : "{}",
                           {std::string("Authorization: Bearer ") + tokens[t]});
        const std::string what = std::string(names[t]) + " token, " + upper + " " + path;
        ASSERT_NE(r.status, 401) << what << ": " << r.body;
        if (t < needed) {
          ++refused[t];
          EXPECT_EQ(r.status, 403) << what << ": " << r.body;
          EXPECT_EQ(r.json().value("type", ""), "https://delayd.dev/problems/insufficient-scope")
              << what;
          EXPECT_NE(r.json().value("detail", "").find(scope), std::string::npos) << r.body;
        } else {
          ++allowed[t];
          EXPECT_NE(r.status, 403) << what << ": " << r.body;
        }
      }
    }
    if (t == 0) {
      EXPECT_EQ(state(), before) << "the read token changed something";
    }
  }
  EXPECT_EQ(refused[2], 0);
  EXPECT_EQ(refused[1], 3) << "a topic's settings, pause and resume";
  EXPECT_GT(refused[0], 20) << "every route that changes something";
  EXPECT_GT(allowed[0], 15);
}

// The tokens file is read again on SIGHUP: a revoked token stops working, a
// new one starts; a file that cannot be used keeps the tokens in use.
TEST_F(SafetyTest, TokensAreReadAgainOnSighup) {
  const std::string dir = MakeTempDir("delayd-tokens");
  WriteFile(dir + "/tokens", "admin old-admin\nread reader\n");
  Start({"--api-tokens-file", dir + "/tokens"});
  auto status = [&](const char* token) {
    return Call("GET", "/v1/stats", "", {std::string("Authorization: Bearer ") + token}).status;
  };
  ASSERT_EQ(status("old-admin"), 200);
  ASSERT_EQ(status("new-admin"), 401);
  WriteFile(dir + "/tokens", "admin new-admin\nread reader\n");
  ASSERT_EQ(kill(server_->pid(), SIGHUP), 0);
  ASSERT_TRUE(WaitUntil([&] { return status("new-admin") == 200; }, 10s)) << server_->log();
  EXPECT_EQ(status("old-admin"), 401) << "revoked";
  EXPECT_EQ(status("reader"), 200);
  // Emptied, then bad: refused, and the tokens in use stay.
  for (const char* text : {"# nobody\n", "admin new-admin\nroot x\n"}) {
    const size_t logged = server_->log().size();
    WriteFile(dir + "/tokens", text);
    ASSERT_EQ(kill(server_->pid(), SIGHUP), 0);
    ASSERT_TRUE(WaitUntil(
        [&] {
          return server_->log().find("SIGHUP: kept the API tokens in use", logged) !=
                 std::string::npos;
        },
        10s))
        << server_->log();
    EXPECT_EQ(status("new-admin"), 200) << text;
    EXPECT_EQ(status("x"), 401) << text;
    EXPECT_EQ(Call("GET", "/v1/stats").status, 401) << "an emptied file does not open the API";
  }
  EXPECT_EQ(server_->log().find("new-admin"), std::string::npos) << "no token in the log";
}

TEST_F(SafetyTest, AReadOnlyConsoleCannotAct) {
  Start({"--console", "read-only"});
  const std::string own = "Origin: http://127.0.0.1";  // HttpCall's Host is 127.0.0.1
  HttpReply act = Call("POST", "/v1/topics/t/jobs", R"({"body":1})", {own});
  EXPECT_EQ(act.status, 403) << act.body;
  EXPECT_EQ(act.json()["type"], "https://delayd.dev/problems/console-read-only");
  EXPECT_EQ(Call("GET", "/v1/stats", "", {own}).status, 200);
  EXPECT_EQ(Call("POST", "/v1/topics/t/jobs", R"({"body":1})").status, 201) << "scripts still may";
}

// README: "a job never becomes ready before its delay has passed", over both
// front doors, pulled and pushed, and across a restart in between.
TEST_F(SafetyTest, AJobIsNeverEarly) {
  Receiver target;
  Start({"--target-allow", "127.0.0.1"});
  using Clock = std::chrono::steady_clock;
  struct Sent {
    Clock::time_point at;  // before the request left: the job's due time is later
    int delay_ms;
  };
  std::map<uint64_t, Sent> pulled;
  std::map<std::string, Sent> pushed;  // by body
  for (int i = 0; i < 12; ++i) {
    const int delay = 300 + 150 * i;
    const auto at = Clock::now();
    HttpReply r = Call("POST", "/v1/topics/pull/jobs",
                       json{{"delay", std::to_string(delay) + "ms"}, {"body", i}}.dump());
    ASSERT_EQ(r.status, 201) << r.body;
    pulled[r.json()["id"].get<uint64_t>()] = {at, delay};
    const std::string body = "push-" + std::to_string(i);
    const auto push_at = Clock::now();
    r = Call("POST", "/v1/topics/push/jobs",
             json{{"delay", delay}, {"body", body}, {"target", {{"url", target.url()}}}}.dump());
    ASSERT_EQ(r.status, 201) << r.body;
    pushed["\"" + body + "\""] = {push_at, delay};
  }
  server_->Restart();  // before most are due: the clock resumes from the store
  size_t got = 0;
  while (got < pulled.size()) {
    HttpReply r = Call("POST", "/v1/topics/pull/reserve?timeout_ms=5000");
    ASSERT_EQ(r.status, 200) << r.body;
    const auto now = Clock::now();
    const Sent& sent = pulled.at(r.json()["id"].get<uint64_t>());
    EXPECT_GE(now - sent.at, std::chrono::milliseconds(sent.delay_ms))
        << "job " << r.json()["id"] << " reserved early";
    ++got;
  }
  ASSERT_TRUE(target.WaitFor([&](const auto& all) { return all.size() >= pushed.size(); }, 20s));
  for (const Received& r : target.received()) {
    const Sent& sent = pushed.at(r.body);
    const auto arrived = Clock::now() - (std::chrono::system_clock::now() - r.at);
    EXPECT_GE(arrived - sent.at, std::chrono::milliseconds(sent.delay_ms))
        << r.body << " delivered early";
  }
}

}  // namespace
}  // namespace delayd::testing
