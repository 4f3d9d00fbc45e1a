// PostgreSQL misbehaving under delayd. A crash: `pg_ctl stop -m immediate`
// (no shutdown checkpoint), then a start that recovers from the WAL, while
// clients put jobs over beanstalk and HTTP. While the database is down, writes get the
// documented retryable errors (beanstalk INTERNAL_ERROR, HTTP 503
// storage-unavailable) and what delayd holds in memory can still be read;
// delayd reconnects by itself; every acknowledged job is there afterwards.
// And a stall: a read PostgreSQL holds back holds up only the reply that
// needs it; and a failover to a synchronous standby. The tests run
// PostgreSQL servers of their own (scripts/pg-temp).
#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support/client.h"
#include "support/http.h"
#include "support/process.h"

namespace delayd::testing {
namespace {

using nlohmann::json;

// A PostgreSQL of the test's own, stopped and removed at the end.
class OwnPostgres {
 public:
  OwnPostgres() : dir_(MakeTempDir("delayd-pg-restart")) {
    if (Script("start") != 0) throw std::runtime_error("scripts/pg-temp start failed");
    ReadUri();
  }
  // A streaming standby of `primary`, its synchronous standby when `sync`.
  OwnPostgres(const OwnPostgres& primary, bool sync) : dir_(MakeTempDir("delayd-pg-standby")) {
    if (Script("standby", primary.dir_ + (sync ? " --sync" : "")) != 0) {
      throw std::runtime_error("scripts/pg-temp standby failed");
    }
    ReadUri();
  }
  ~OwnPostgres() { Script("stop"); }
  int Crash() { return Script("crash"); }
  int Recover() { return Script("recover"); }
  int Promote() { return Script("promote"); }
  int Kill() { return Script("kill"); }
  const std::string& uri() const { return uri_; }
  // "127.0.0.1:PORT", for a multi-host connection string.
  std::string host_port() const {
    const size_t at = uri_.find('@');
    return uri_.substr(at + 1, uri_.rfind('/') - at - 1);
  }

 private:
  int Script(const char* verb, const std::string& args = "") {
    const std::string cmd =
        std::string(DELAYD_PG_TEMP) + " " + verb + " " + dir_ + " " + args + " >/dev/null";
    return std::system(cmd.c_str());
  }
  void ReadUri() {
    uri_ = ReadFile(dir_ + "/uri");
    while (!uri_.empty() && uri_.back() == '\n') uri_.pop_back();
  }
  std::string dir_;
  std::string uri_;
};

// Puts under load while PostgreSQL misbehaves: `conns` clients putting
// over beanstalk and one over HTTP (to `topic`), each body unique, until
// Stop. It keeps what was acknowledged, the documented refusals met
// (beanstalk INTERNAL_ERROR, HTTP 503 storage-unavailable or
// outcome-unknown) and any other reply.
class PutLoad {
 public:
  PutLoad(const DelaydServer& server, int conns, const std::string& topic) {
    for (int t = 0; t < conns; ++t) {
      threads_.emplace_back([this, &server, t] {
        Client c(server.port());
        for (int i = 0; !stop_; ++i) {
          const std::string body = "b" + std::to_string(t) + "-" + std::to_string(i);
          const std::string reply =
              c.Cmd("put 0 3600 60 " + std::to_string(body.size()) + "\r\n" + body);
          std::lock_guard lock(mu_);
          if (reply.rfind("INSERTED ", 0) == 0) {
            acked_[Number(reply)] = body;
          } else if (reply == "INTERNAL_ERROR\r\n") {
            ++errors_["INTERNAL_ERROR"];
          } else {
            unexpected_.push_back(reply);
          }
        }
      });
    }
    threads_.emplace_back([this, &server, topic] {
      for (int i = 0; !stop_; ++i) {
        const std::string body = "\"h" + std::to_string(i) + "\"";
        HttpReply r = HttpCall(server.http_port(), "POST", "/v1/topics/" + topic + "/jobs",
                               R"({"delay":"1h","body":)" + body + "}");
        const json j = r.json();
        const std::string type = j.is_object() ? j.value("type", "") : "";
        std::lock_guard lock(mu_);
        if (r.status == 201) {
          acked_[j["id"].get<uint64_t>()] = body;
        } else if (r.status == 503 && type.ends_with("/storage-unavailable")) {
          ++errors_["503 storage-unavailable"];
        } else if (r.status == 503 && type.ends_with("/outcome-unknown")) {
          ++errors_["503 outcome-unknown"];
        } else {
          unexpected_.push_back(std::to_string(r.status) + " " + r.body);
        }
      }
    });
  }
  ~PutLoad() { Stop(); }

  void Stop() {
    stop_ = true;
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  size_t acked_count() const {
    std::lock_guard lock(mu_);
    return acked_.size();
  }
  bool WaitAcked(size_t n, std::chrono::seconds limit) const {
    return WaitUntil([&] { return acked_count() >= n; }, limit);
  }
  int refused() const {
    std::lock_guard lock(mu_);
    int n = 0;
    for (const auto& [reply, count] : errors_) n += count;
    return n;
  }
  // Once stopped: id -> body of each acknowledged put; refusals by reply;
  // replies of any other kind.
  const std::map<uint64_t, std::string>& acked() const { return acked_; }
  const std::map<std::string, int>& errors() const { return errors_; }
  const std::vector<std::string>& unexpected() const { return unexpected_; }

 private:
  mutable std::mutex mu_;
  std::map<uint64_t, std::string> acked_;
  std::map<std::string, int> errors_;
  std::vector<std::string> unexpected_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

TEST(PgRestartTest, ACrashOfPostgresLosesNoAcknowledgedJobAndDelaydRecoversByItself) {
  OwnPostgres pg;
  const std::string dir = MakeTempDir("delayd-pg-restart-data");
  DelaydServer server(dir + "/data", {"--store", pg.uri()});
  Client reader(server.port());
  const uint64_t ready_id = reader.Put("in memory");
  PutLoad load(server, 3, "restart");
  ASSERT_TRUE(load.WaitAcked(300, std::chrono::seconds(30))) << "no load before the restart";
  const size_t before = load.acked_count();
  ASSERT_EQ(pg.Crash(), 0);
  {
    // Down: writes fail as documented; what is in memory is still read.
    Client c(server.port());
    EXPECT_EQ(c.Cmd("put 0 0 60 1\r\nx"), "INTERNAL_ERROR\r\n");
    HttpReply r =
        HttpCall(server.http_port(), "POST", "/v1/topics/down/jobs", json{{"body", 1}}.dump());
    EXPECT_EQ(r.status, 503) << r.body;
    EXPECT_EQ(r.json().value("type", ""), "https://delayd.dev/problems/storage-unavailable");
    EXPECT_EQ(reader.Cmd("peek " + std::to_string(ready_id)),
              "FOUND " + std::to_string(ready_id) + " 9\r\nin memory\r\n");
    EXPECT_EQ(reader.Cmd("stats").rfind("OK ", 0), 0u);
    // The console's reads of the store say so; what memory counts answers.
    for (const char* target : {"/v1/forecast?bucket=minute", "/v1/dead-letters",
                               "/v1/jobs?state=buried", "/v1/jobs?body_field=x", "/readyz"}) {
      HttpReply down = HttpCall(server.http_port(), "GET", target);
      EXPECT_EQ(down.status, 503) << target << ": " << down.body;
    }
    HttpReply days = HttpCall(server.http_port(), "GET", "/v1/forecast?bucket=day&topic=restart");
    EXPECT_EQ(days.status, 200) << days.body;
    EXPECT_EQ(HttpCall(server.http_port(), "GET", "/metrics").status, 200);
    // A bulk operation whose first read fails ends failed, having done nothing
    // (every acknowledged job is checked below).
    HttpReply bulk = HttpCall(server.http_port(), "POST", "/v1/bulk",
                              R"({"action":"cancel","filter":{"topic":"restart"}})");
    ASSERT_EQ(bulk.status, 202) << bulk.body;
    const std::string op = "/v1/bulk/" + std::to_string(bulk.json()["id"].get<uint64_t>());
    json progress;
    EXPECT_TRUE(WaitUntil(
        [&] {
          progress = HttpCall(server.http_port(), "GET", op).json();
          return progress["state"] != "running";
        },
        std::chrono::seconds(10)));
    EXPECT_EQ(progress["state"], "failed") << progress;
    EXPECT_EQ(progress["applied"], 0) << progress;
    EXPECT_FALSE(progress["error"].get<std::string>().empty()) << progress;
  }
  // Down until the load meets the outage too: puts whose commit was in
  // flight at the crash wait (up to 5 s, PgStore::Settle) to learn whether
  // they were kept, and the load's next puts are refused.
  EXPECT_TRUE(WaitUntil([&] { return load.refused() > 0; }, std::chrono::seconds(20)))
      << "the load met no error while PostgreSQL was down";
  ASSERT_EQ(pg.Recover(), 0);
  const size_t at_restart = load.acked_count();
  // Without restarting delayd, puts are acknowledged again.
  const bool recovered = load.WaitAcked(at_restart + 300, std::chrono::seconds(30));
  load.Stop();
  ASSERT_TRUE(recovered) << "delayd did not recover from the restart within 30 s";

  EXPECT_TRUE(load.unexpected().empty()) << load.unexpected().front();
  EXPECT_GT(load.refused(), 0) << "the load met the documented errors while PostgreSQL was down";
  std::printf("acknowledged %zu before the restart, %zu in all; refused while down:", before,
              load.acked().size());
  for (auto& [reply, n] : load.errors()) std::printf(" %d x %s;", n, reply.c_str());
  std::printf("\n");

  // Every acknowledged job is there, byte for byte: in the running delayd,
  // and in the database (after a restart of delayd, which reads it afresh).
  auto check_all = [&](const char* when) {
    Client c(server.port());
    int missing = 0;
    for (auto& [id, body] : load.acked()) {
      // Reads come back once delayd has reconnected (with backoff) after the outage.
      std::string reply = c.Cmd("peek " + std::to_string(id));
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (reply == "INTERNAL_ERROR\r\n" && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        reply = c.Cmd("peek " + std::to_string(id));
      }
      if (reply != "FOUND " + std::to_string(id) + " " + std::to_string(body.size()) + "\r\n" +
                       body + "\r\n" &&
          reply.find(body) == std::string::npos) {
        if (++missing <= 5)
          ADD_FAILURE() << when << ": job " << id << " (" << body << "): " << reply;
      }
    }
    EXPECT_EQ(missing, 0) << when;
  };
  check_all("after the PostgreSQL restart");
  server.Restart();
  check_all("after a restart of delayd");
}

// What is left of the acknowledged jobs after a failover: the primary is
// lost under load (SIGKILL to all its processes) and the standby promoted,
// as a failover manager would, with delayd given both servers in one
// connection string (target_session_attrs=read-write). Before the loss the
// primary's WAL sender is stopped, so the primary holds commits the standby
// never received: a synchronous standby holds up the acknowledgements
// meanwhile, an asynchronous one does not.
struct Failover {
  std::map<uint64_t, std::string> acked;  // id -> body
  size_t acked_before_stall = 0;
  std::map<uint64_t, std::string> stored;  // what the promoted standby has of them
  std::vector<uint64_t> lost;              // acknowledged and not stored byte for byte
};

std::map<uint64_t, std::string> StoredJobs(const std::string& uri) {
  std::map<uint64_t, std::string> stored;
  PGconn* db = PQconnectdb(uri.c_str());
  EXPECT_EQ(PQstatus(db), CONNECTION_OK) << PQerrorMessage(db);
  PGresult* r = PQexec(db, "SELECT id, body FROM jobs");
  EXPECT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << PQerrorMessage(db);
  for (int i = 0; i < PQntuples(r); ++i) {
    size_t n = 0;
    unsigned char* bytes =
        PQunescapeBytea(reinterpret_cast<const unsigned char*>(PQgetvalue(r, i, 1)), &n);
    stored[std::stoull(PQgetvalue(r, i, 0))] = std::string(reinterpret_cast<char*>(bytes), n);
    PQfreemem(bytes);
  }
  PQclear(r);
  PQfinish(db);
  return stored;
}

// The first value `sql` reads from the server at `uri` ("" on an error).
std::string QueryOne(const std::string& uri, const char* sql) {
  PGconn* db = PQconnectdb(uri.c_str());
  PGresult* r = PQexec(db, sql);
  std::string v =
      PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "";
  PQclear(r);
  PQfinish(db);
  return v;
}

void RunFailover(bool sync, Failover* out) {
  OwnPostgres primary;
  OwnPostgres standby(primary, sync);
  const std::string both = "postgresql://delayd@" + primary.host_port() + "," +
                           standby.host_port() + "/postgres?target_session_attrs=read-write";
  DelaydServer server(MakeTempDir("delayd-pg-failover") + "/data", {"--store", both});
  PutLoad load(server, 2, "failover");
  ASSERT_TRUE(load.WaitAcked(300, std::chrono::seconds(30))) << "no load before the failover";

  // The WAL sender stopped: from here the standby receives nothing.
  const std::string sender = QueryOne(primary.uri(), "SELECT pid FROM pg_stat_replication");
  ASSERT_FALSE(sender.empty()) << "the standby is not streaming";
  ASSERT_EQ(kill(std::stoi(sender), SIGSTOP), 0);
  out->acked_before_stall = load.acked_count();
  if (sync) {
    // delayd's sync waits for the standby, holding up the acknowledgements.
    ASSERT_TRUE(WaitUntil(
        [&] {
          const std::string waiting = QueryOne(
              primary.uri(), "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'");
          return !waiting.empty() && waiting != "0";
        },
        std::chrono::seconds(10)))
        << "no commit waits for the synchronous standby";
  } else {
    ASSERT_TRUE(load.WaitAcked(out->acked_before_stall + 100, std::chrono::seconds(20)))
        << "the asynchronous standby held up acknowledgements";
  }
  ASSERT_EQ(primary.Kill(), 0);
  ASSERT_EQ(standby.Promote(), 0);
  const size_t at_failover = load.acked_count();
  const bool followed = load.WaitAcked(at_failover + 300, std::chrono::seconds(40));
  load.Stop();
  ASSERT_TRUE(followed) << "no put acknowledged on the promoted standby within 40 s\n"
                        << server.log();
  EXPECT_TRUE(load.unexpected().empty()) << load.unexpected().front();
  out->acked = load.acked();

  out->stored = StoredJobs(standby.uri());
  for (const auto& [id, body] : out->acked) {
    auto it = out->stored.find(id);
    if (it == out->stored.end() || it->second != body) out->lost.push_back(id);
  }
  // A delayd started afresh on the same connection string (the old primary
  // still gone) serves what the promoted server has.
  server.Restart();
  Client c(server.port());
  for (const auto& [id, body] : out->acked) {
    if (!out->stored.count(id)) continue;
    ASSERT_EQ(
        c.Cmd("peek " + std::to_string(id)),
        "FOUND " + std::to_string(id) + " " + std::to_string(body.size()) + "\r\n" + body + "\r\n");
  }
  std::printf("%s standby: acknowledged %zu (%zu before the stall), lost %zu\n",
              sync ? "synchronous" : "asynchronous", out->acked.size(), out->acked_before_stall,
              out->lost.size());
}

// The setup doc/operations.md advises: every acknowledged job, before the
// loss or after, is on the promoted standby.
TEST(PgRestartTest, AFailoverToASynchronousStandbyLosesNoAcknowledgedJob) {
  Failover f;
  RunFailover(/*sync=*/true, &f);
  EXPECT_TRUE(f.lost.empty()) << f.lost.size() << " acknowledged jobs lost, the first "
                              << f.lost.front();
}

// What the guide warns of: an asynchronous standby loses jobs that were
// acknowledged, those of its replication lag (the stall makes that lag
// 100 puts or more). It is also the proof that the test above can fail.
TEST(PgRestartTest, AFailoverToAnAsynchronousStandbyLosesWhatItHadNotReceived) {
  Failover f;
  RunFailover(/*sync=*/false, &f);
  EXPECT_FALSE(f.lost.empty()) << "the jobs acknowledged during the stall were kept";
  EXPECT_LE(f.lost.size(), f.acked.size() - f.acked_before_stall / 2) << "lost more than the lag's";
}

// A cluster node's counts (stats, topic counts) come from job_counts and the
// deltas not folded into it yet, which live in an unlogged table: a crash
// of PostgreSQL empties it. The next fold finds its mark gone and counts the
// jobs again, so once delayd is back the counts equal what was acknowledged.
// The last puts come just before the crash, inside the fold's second.
TEST(PgRestartTest, AClusterNodesCountsAreTrueAgainAfterACrashOfPostgres) {
  OwnPostgres pg;
  auto node = DelaydServer::Node(pg.uri());
  // Each ask on a connection of its own: while the node reconnects after the
  // crash a reply may come later than the client waits (which throws), and a
  // late reply must not answer the next command.
  auto ask = [&](const std::string& command) -> std::string {
    try {
      Client c(node->port());
      return c.Cmd(command);
    } catch (const std::exception& e) {
      return e.what();
    }
  };
  auto delayed = [&] {
    const std::string stats = ask("stats");
    return stats.rfind("OK ", 0) == 0 ? Field(stats, "current-jobs-delayed") : stats;
  };
  Client c(node->port());
  auto put = [&](int n) {
    for (int i = 0; i < n; ++i) ASSERT_GT(c.Put("counted", 0, 3600), 0u);
  };
  put(40);
  ASSERT_TRUE(WaitUntil([&] { return delayed() == "40"; }, std::chrono::seconds(10)))
      << "folded: " << delayed();
  put(25);
  ASSERT_EQ(pg.Crash(), 0);
  ASSERT_EQ(pg.Recover(), 0);
  std::string seen;
  EXPECT_TRUE(WaitUntil(
      [&] {
        seen = delayed();
        return seen == "65";
      },
      std::chrono::seconds(40)))
      << "current-jobs-delayed: " << seen;
}

// PostgreSQL crashes and comes back while delayd has nothing to write. Its
// connections were closed by the server meanwhile; the first write after
// finds that out before it sends anything (a batch sent on a closed
// connection would have its outcome in doubt, and a put in doubt is
// answered as failed). So a put made once the server is back is answered
// INSERTED and is in the table, on a single node and on a cluster node.
TEST(PgRestartTest, APutMadeOnceAnIdlePostgresIsBackIsKept) {
  auto check = [](OwnPostgres& pg, const DelaydServer& server) {
    Client c(server.port());
    ASSERT_GT(c.Put("before"), 0u);
    ASSERT_EQ(pg.Crash(), 0);
    ASSERT_EQ(pg.Recover(), 0);
    Client after(server.port());
    const std::string reply = after.Cmd("put 0 0 60 5\r\nafter");
    ASSERT_EQ(reply.rfind("INSERTED ", 0), 0u) << reply << "\n" << server.log();
    PGconn* db = PQconnectdb(pg.uri().c_str());
    const std::string id = std::to_string(std::stoull(reply.substr(9)));
    PGresult* r = PQexec(db, ("SELECT body FROM jobs WHERE id = " + id).c_str());
    ASSERT_EQ(PQntuples(r), 1) << PQerrorMessage(db);
    EXPECT_EQ(std::string(PQgetvalue(r, 0, 0), PQgetlength(r, 0, 0)), "\\x6166746572");
    PQclear(r);
    PQfinish(db);
  };
  {
    SCOPED_TRACE("single node");
    OwnPostgres pg;
    DelaydServer server(MakeTempDir("delayd-pg-idle") + "/data", {"--store", pg.uri()});
    check(pg, server);
  }
  {
    SCOPED_TRACE("cluster node");
    OwnPostgres pg;
    auto node = DelaydServer::Node(pg.uri());
    check(pg, *node);
  }
}

// Another session locks the jobs table, so every read of it waits. A peek
// of a job beyond the horizon needs such a read: its reply waits for the
// lock. The event loop does not: other clients are served from memory in
// the meantime (each reply within its 2 s deadline; none of them needs
// the store, reservations live in memory), and the peek is
// answered once the lock is gone.
TEST(PgRestartTest, AReadPostgresHoldsBackHoldsUpOnlyTheReplyThatNeedsIt) {
  OwnPostgres pg;
  const std::string dir = MakeTempDir("delayd-pg-stall-data");
  DelaydServer server(dir + "/data", {"--store", pg.uri()});
  Client c(server.port());
  const uint64_t ready = c.Put("ready");
  const uint64_t far = c.Put("far", 0, 3600);
  PGconn* locker = PQconnectdb(pg.uri().c_str());
  ASSERT_EQ(PQstatus(locker), CONNECTION_OK) << PQerrorMessage(locker);
  PGresult* r = PQexec(locker, "BEGIN; LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE");
  ASSERT_EQ(PQresultStatus(r), PGRES_COMMAND_OK) << PQerrorMessage(locker);
  PQclear(r);

  Client slow(server.port());
  slow.Send("peek " + std::to_string(far) + "\r\n");
  EXPECT_TRUE(slow.Silent(std::chrono::milliseconds(300))) << "answered without its read";
  Client other(server.port());
  const std::chrono::seconds limit(2);
  EXPECT_EQ(other.Cmd("peek " + std::to_string(ready), limit),
            "FOUND " + std::to_string(ready) + " 5\r\nready\r\n");
  EXPECT_EQ(Field(other.Cmd("stats", limit), "current-jobs-delayed"), "1");
  EXPECT_EQ(other.Cmd("reserve-with-timeout 0", limit),
            "RESERVED " + std::to_string(ready) + " 5\r\nready\r\n");
  EXPECT_EQ(other.Cmd("list-tubes", limit), "OK 14\r\n---\n- default\n\r\n");
  EXPECT_EQ(HttpCall(server.http_port(), "GET", "/v1/topics/default").status, 200);
  EXPECT_TRUE(slow.Silent(std::chrono::milliseconds(50))) << "answered while the lock is held";

  r = PQexec(locker, "COMMIT");
  EXPECT_EQ(PQresultStatus(r), PGRES_COMMAND_OK);
  PQclear(r);
  PQfinish(locker);
  EXPECT_EQ(slow.Reply(), "FOUND " + std::to_string(far) + " 3\r\nfar\r\n");
}

// "A failed put never appears": puts over HTTP while PostgreSQL crashes and
// recovers three times. A put answered 201 is kept; one answered 503
// storage-unavailable is not, ever; one whose commit was in flight when the
// connection broke is found out (201 or 503) or, when that cannot be learned
// in time, answered 503 outcome-unknown with its job id, and then reads back
// as kept or not, as it was.
TEST(PgRestartTest, APutAnsweredAsFailedNeverAppears) {
  OwnPostgres pg;
  const std::string dir = MakeTempDir("delayd-pg-false-failure");
  DelaydServer server(dir + "/data", {"--store", pg.uri()});
  std::mutex mu;
  std::map<std::string, uint64_t> acked;  // body -> id
  std::vector<std::string> failed;        // bodies answered storage-unavailable
  std::vector<uint64_t> unknown;          // ids answered outcome-unknown
  std::vector<std::string> unexpected;
  std::atomic<bool> stop{false};
  std::vector<std::thread> load;
  for (int t = 0; t < 2; ++t) {
    load.emplace_back([&, t] {
      for (int i = 0; !stop; ++i) {
        const std::string body = "\"p" + std::to_string(t) + "-" + std::to_string(i) + "\"";
        HttpReply r = HttpCall(server.http_port(), "POST", "/v1/topics/doubt/jobs",
                               R"({"delay":"1h","body":)" + body + "}");
        const json j = r.json();
        const std::string type = j.is_object() ? j.value("type", "") : "";
        std::lock_guard lock(mu);
        if (r.status == 201) {
          acked[body] = j["id"].get<uint64_t>();
        } else if (r.status == 503 && type.ends_with("/storage-unavailable")) {
          failed.push_back(body);
        } else if (r.status == 503 && type.ends_with("/outcome-unknown")) {
          for (const json& id : j["job_ids"]) unknown.push_back(id.get<uint64_t>());
        } else {
          unexpected.push_back(std::to_string(r.status) + " " + r.body);
        }
      }
    });
  }
  auto acked_count = [&] {
    std::lock_guard lock(mu);
    return acked.size();
  };
  for (int round = 0; round < 3; ++round) {
    const size_t before = acked_count();
    ASSERT_TRUE(WaitUntil([&] { return acked_count() >= before + 200; }, std::chrono::seconds(30)))
        << "no puts acknowledged before crash " << round;
    ASSERT_EQ(pg.Crash(), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // puts meet the outage
    ASSERT_EQ(pg.Recover(), 0);
  }
  const size_t at_end = acked_count();
  const bool recovered =
      WaitUntil([&] { return acked_count() >= at_end + 200; }, std::chrono::seconds(30));
  stop = true;
  for (auto& t : load) t.join();
  ASSERT_TRUE(recovered);
  EXPECT_TRUE(unexpected.empty()) << unexpected.front();
  EXPECT_FALSE(failed.empty()) << "the puts did meet the outages";
  // What the store has of the topic, every page.
  std::map<std::string, uint64_t> stored;  // body -> id
  ASSERT_TRUE(WaitUntil(
      [&] {
        stored.clear();
        std::string cursor;
        for (;;) {
          HttpReply page = HttpCall(
              server.http_port(), "GET",
              "/v1/jobs?topic=doubt&limit=1000" + (cursor.empty() ? "" : "&cursor=" + cursor));
          if (page.status != 200) return false;
          const json j = page.json();
          for (const json& job : j["jobs"]) stored[job["body"].dump()] = job["id"].get<uint64_t>();
          if (!j.contains("next_cursor") || j["next_cursor"].is_null()) return true;
          cursor = j["next_cursor"].get<std::string>();
        }
      },
      std::chrono::seconds(20)));
  for (const auto& [body, id] : acked) {
    EXPECT_EQ(stored.count(body), 1u) << "acknowledged job " << id << " " << body << " is missing";
  }
  for (const std::string& body : failed) {
    EXPECT_EQ(stored.count(body), 0u) << "a put answered storage-unavailable appeared: " << body;
  }
  // An unknown outcome reads back as what it was, kept or not.
  for (uint64_t id : unknown) {
    const int status = HttpCall(server.http_port(), "GET", "/v1/jobs/" + std::to_string(id)).status;
    EXPECT_TRUE(status == 200 || status == 404) << id << ": " << status;
  }
  std::printf("acknowledged %zu, refused %zu, outcome unknown %zu, stored %zu\n", acked.size(),
              failed.size(), unknown.size(), stored.size());
  EXPECT_EQ(
      stored.size(), acked.size() + [&] {
        size_t kept = 0;
        for (uint64_t id : unknown) {
          kept +=
              HttpCall(server.http_port(), "GET", "/v1/jobs/" + std::to_string(id)).status == 200;
        }
        return kept;
      }());
}

}  // namespace
}  // namespace delayd::testing
