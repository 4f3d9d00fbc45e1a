// Cluster mode under faults, black box: three delayd nodes on one test
// database under a steady load of puts (ready and delayed) and reserves
// through every node, push jobs submitted through every node to a local
// receiver, and a timer firing every second, while a bounded loop kills a
// node with SIGKILL, stops another past its lease with SIGSTOP and resumes
// it, and starts and stops a fourth. Afterwards every acknowledged put must
// have been reserved, and the tube must be empty in the database (a delete
// whose reply was lost with its node either committed or comes back to be
// reserved again); every acknowledged push job delivered, none after its
// success was recorded; the timer's fires one per second, none twice and
// none skipped. Redeliveries (at-least-once, after a holder died) are
// counted, and the loop's figures printed: failover after each kill, and
// the fencing refusals the stopped node met when it woke.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "store/testing/pg_test_db.h"
#include "support/client.h"
#include "support/http.h"
#include "support/pg.h"
#include "support/process.h"

namespace delayd::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr int kCycles = 4;
constexpr int64_t kLeaseMs = 1500;

class Chaos {
 public:
  explicit Chaos(std::string uri) : uri_(std::move(uri)) {}

  void Start(const std::string& id) {
    auto node = DelaydServer::Node(uri_, {"--node-id", id, "--lease-ms", std::to_string(kLeaseMs)});
    std::lock_guard lock(mu_);
    nodes_[id] = std::move(node);
    serving_.insert(id);
  }
  // Takes `id` out of the nodes workers may pick, then runs `fn` on it.
  template <class Fn>
  void Unserve(const std::string& id, Fn fn) {
    DelaydServer* node;
    {
      std::lock_guard lock(mu_);
      serving_.erase(id);
      node = nodes_.at(id).get();
    }
    fn(*node);
  }
  void Serve(const std::string& id) {
    std::lock_guard lock(mu_);
    serving_.insert(id);
  }
  // The beanstalk (or HTTP) port of a random serving node, or 0.
  int PickPort(std::mt19937& rng, bool http = false) {
    std::lock_guard lock(mu_);
    if (serving_.empty()) return 0;
    auto it = serving_.begin();
    std::advance(it, std::uniform_int_distribution<size_t>(0, serving_.size() - 1)(rng));
    return http ? nodes_.at(*it)->http_port() : nodes_.at(*it)->port();
  }
  DelaydServer& node(const std::string& id) {
    std::lock_guard lock(mu_);
    return *nodes_.at(id);
  }
  json View(const std::string& via) {
    return HttpCall(node(via).http_port(), "GET", "/v1/cluster").json();
  }
  // Waits until node `id` owns a shard.
  bool Owns(const std::string& id, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      const json v = View(id);
      for (const json& n : v["nodes"]) {
        if (n["id"] == id && n["shards_owned"].get<size_t>() > 0) return true;
      }
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
  // Waits until every shard is owned, by a live node of `owners` only.
  bool OwnedBy(const std::string& via, const std::set<std::string>& owners,
               std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      json v = View(via);
      bool ok = v.is_object() && !v["shards"].empty();
      for (const json& s : ok ? v["shards"] : json::array()) {
        if (!s["live"].get<bool>() || s["owner"].is_null() ||
            !owners.count(s["owner"].get<std::string>())) {
          ok = false;
          break;
        }
      }
      if (ok) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

 private:
  const std::string uri_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<DelaydServer>> nodes_;
  std::set<std::string> serving_;
};

// One command with a short deadline; "" when the node did not answer (it
// died or is stopped): the caller connects elsewhere.
std::string Try(Client& c, const std::string& line) {
  try {
    return c.Cmd(line, 3s);
  } catch (const std::exception&) {
    return "";
  }
}

TEST(ClusterChaosTest, NoAcknowledgedJobIsLostWhileNodesDieStallAndComeAndGo) {
  store::testing::PgTestDb db;
  ASSERT_FALSE(db.uri().empty()) << db.error();
  Chaos chaos(db.uri());
  const std::vector<std::string> core = {"n1", "n2", "n3"};
  for (const auto& id : core) chaos.Start(id);
  ASSERT_TRUE(chaos.OwnedBy("n1", {core.begin(), core.end()}, 15s));

  std::atomic<bool> producing{true};
  std::atomic<bool> consuming{true};
  std::mutex mu;
  std::set<std::string> acked;          // bodies whose put was answered INSERTED
  std::map<std::string, int> reserved;  // body -> times reserved
  std::map<std::string, int> deleted;   // body -> times deleted (DELETED answered)
  std::atomic<uint64_t> reserves{0}, lost_reservations{0}, retries{0};

  auto producer = [&](int w) {
    std::mt19937 rng(w);
    uint64_t seq = 0;
    while (producing) {
      const int port = chaos.PickPort(rng);
      if (port == 0) continue;
      try {
        Client c(port);
        if (Try(c, "use chaos") != "USING chaos\r\n") continue;
        for (int k = 0; k < 50 && producing; ++k) {
          const std::string body = "w" + std::to_string(w) + "-" + std::to_string(++seq);
          const int delay = seq % 3 == 0 ? 1 : 0;
          const std::string r = Try(c, "put 0 " + std::to_string(delay) + " 2 " +
                                           std::to_string(body.size()) + "\r\n" + body);
          if (r.rfind("INSERTED", 0) != 0) {
            ++retries;
            break;  // unknown: not acknowledged
          }
          std::lock_guard lock(mu);
          acked.insert(body);
        }
      } catch (const std::exception&) {
        ++retries;
      }
    }
  };
  auto consumer = [&](int w) {
    std::mt19937 rng(100 + w);
    while (consuming) {
      const int port = chaos.PickPort(rng);
      if (port == 0) continue;
      try {
        Client c(port);
        if (Try(c, "watch chaos").rfind("WATCHING", 0) != 0) continue;
        for (int k = 0; k < 50 && consuming; ++k) {
          const std::string r = Try(c, "reserve-with-timeout 1");
          if (r == "TIMED_OUT\r\n") continue;
          if (r.rfind("RESERVED", 0) != 0) break;
          ++reserves;
          std::string body = r.substr(r.find("\r\n") + 2);
          body.resize(body.size() - 2);
          {
            std::lock_guard lock(mu);
            ++reserved[body];
          }
          const std::string d = Try(c, "delete " + std::to_string(Number(r)));
          if (d == "DELETED\r\n") {
            std::lock_guard lock(mu);
            ++deleted[body];
          } else {
            ++lost_reservations;  // its ttr ran out meanwhile, or the node went away
            if (d.empty()) break;
          }
        }
      } catch (const std::exception&) {
        ++retries;
      }
    }
  };
  // Push jobs through every node, due now or within a second, to a receiver
  // that answers 200 and notes when each came.
  Receiver rx;
  std::set<uint64_t> pushed;  // push jobs whose submission was answered 201
  auto pusher = [&](int w) {
    std::mt19937 rng(200 + w);
    uint64_t seq = 0;
    while (producing) {
      const int port = chaos.PickPort(rng, /*http=*/true);
      if (port == 0) continue;
      const json job = {{"delay", (++seq % 5) * 250},
                        {"body", {{"w", w}, {"seq", seq}}},
                        {"target", {{"url", rx.url("/push")}}}};
      // The node may die between the pick and the connect (HttpCall throws):
      // the submission was not acknowledged, and the next goes elsewhere.
      HttpReply r;
      try {
        r = HttpCall(port, "POST", "/v1/topics/pushes/jobs", job.dump());
      } catch (const std::exception&) {
      }
      if (r.status != 201) {
        ++retries;
        continue;
      }
      std::lock_guard lock(mu);
      pushed.insert(r.json()["id"].get<uint64_t>());
      std::this_thread::sleep_for(5ms);
    }
  };
  // A timer firing every second, its jobs pushed to the receiver too.
  HttpReply timer = HttpCall(chaos.node("n2").http_port(), "POST", "/v1/timers",
                             json{{"name", "chaos-tick"},
                                  {"topic", "ticks"},
                                  {"schedule", "* * * * * *"},
                                  {"template", {{"target", {{"url", rx.url("/tick")}}}}}}
                                 .dump());
  ASSERT_EQ(timer.status, 201) << timer.body;
  const std::string timer_id = std::to_string(timer.json()["id"].get<uint64_t>());

  std::vector<std::thread> workers;
  // The workers stop and are joined however the test ends.
  struct Join {
    std::atomic<bool>& producing;
    std::atomic<bool>& consuming;
    std::vector<std::thread>& workers;
    ~Join() {
      producing = false;
      consuming = false;
      for (auto& t : workers) {
        if (t.joinable()) t.join();
      }
    }
  } join{producing, consuming, workers};
  for (int w = 0; w < 3; ++w) workers.emplace_back(producer, w);
  for (int w = 0; w < 3; ++w) workers.emplace_back(consumer, w);
  for (int w = 0; w < 2; ++w) workers.emplace_back(pusher, w);

  std::mt19937 rng(42);
  auto pick = [&](const std::vector<std::string>& from) {
    return from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
  };
  std::vector<int64_t> failovers;
  uint64_t refusals = 0;
  for (int cycle = 1; cycle <= kCycles; ++cycle) {
    // kill -9 of a node: the others own its shards within the lease.
    const std::string victim = pick(core);
    std::vector<std::string> rest;
    for (const auto& id : core) {
      if (id != victim) rest.push_back(id);
    }
    const auto killed = std::chrono::steady_clock::now();
    chaos.Unserve(victim, [](DelaydServer& n) { n.Kill9(); });
    ASSERT_TRUE(chaos.OwnedBy(rest[0], {rest.begin(), rest.end()}, 15s)) << "cycle " << cycle;
    failovers.push_back(std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - killed)
                            .count());
    chaos.node(victim).Restart();
    chaos.Serve(victim);

    // SIGSTOP of another past its lease, then SIGCONT: it wakes with
    // leases it lost, and the database refuses what it does as their owner.
    const std::string stale = pick(rest);
    chaos.Unserve(stale, [](DelaydServer& n) { ::kill(n.pid(), SIGSTOP); });
    std::this_thread::sleep_for(std::chrono::milliseconds(kLeaseMs + 1000));
    ::kill(chaos.node(stale).pid(), SIGCONT);
    chaos.Serve(stale);
    ASSERT_TRUE(chaos.OwnedBy(stale, {core.begin(), core.end()}, 15s)) << "cycle " << cycle;
    std::this_thread::sleep_for(1500ms);  // its figures, recorded every second
    const json view = chaos.View(stale);
    for (const json& n : view["nodes"]) {
      if (n["id"] == stale && n["figures"].is_object()) {
        const uint64_t r = n["figures"]["fencing_refusals"].get<uint64_t>();
        std::printf(
            "cycle %d: %s stopped for %lld ms (lease %lld ms), met %llu fencing "
            "refusals\n",
            cycle, stale.c_str(), static_cast<long long>(kLeaseMs + 1000),
            static_cast<long long>(kLeaseMs), static_cast<unsigned long long>(r));
        refusals += r;
      }
    }

    // A fourth node joins and leaves (SIGTERM).
    chaos.Start("n4");
    ASSERT_TRUE(chaos.Owns("n4", 15s)) << "cycle " << cycle << ": " << chaos.View("n4").dump();
    chaos.Unserve("n4", [](DelaydServer& n) { EXPECT_EQ(n.Terminate(), 0); });
    ASSERT_TRUE(chaos.OwnedBy("n1", {core.begin(), core.end()}, 15s)) << "cycle " << cycle;
  }
  producing = false;
  // The timer stops through another node than the one that made it.
  const int64_t timer_deleted_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count();
  ASSERT_EQ(HttpCall(chaos.node("n3").http_port(), "DELETE", "/v1/timers/" + timer_id).status, 204);

  // Every acknowledged put is reserved, and the tube drained, sooner or
  // later; every push job and timer fire delivered and recorded.
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  auto unreserved = [&] {
    std::lock_guard lock(mu);
    size_t n = 0;
    for (const auto& b : acked) n += reserved.count(b) ? 0 : 1;
    return n;
  };
  auto left = [&] {
    auto rows = Query(db.uri(), "SELECT count(*) FROM jobs WHERE tube='chaos' AND state<>3");
    return rows.empty() ? -1 : std::stoll(rows[0][0]);
  };
  auto undone = [&] {
    auto rows =
        Query(db.uri(), "SELECT count(*) FROM jobs WHERE tube IN ('pushes', 'ticks') AND state<>3");
    return rows.empty() ? -1 : std::stoll(rows[0][0]);
  };
  while ((unreserved() > 0 || left() != 0 || undone() != 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(200ms);
  }
  consuming = false;
  for (auto& t : workers) t.join();

  std::lock_guard lock(mu);
  size_t twice = 0;
  for (const auto& [body, n] : reserved) twice += n > 1 ? 1 : 0;
  std::vector<int64_t> sorted = failovers;
  std::sort(sorted.begin(), sorted.end());
  std::printf(
      "chaos: %d cycles, %zu acknowledged puts, %llu reserves, %zu reserved more than once "
      "(at-least-once after a holder died), %llu reservations lost before their delete, "
      "%llu reconnects\n",
      kCycles, acked.size(), static_cast<unsigned long long>(reserves.load()), twice,
      static_cast<unsigned long long>(lost_reservations.load()),
      static_cast<unsigned long long>(retries.load()));
  std::printf(
      "chaos: kill -9 -> shards owned by live nodes again, lease %lld ms: median %lld ms, "
      "max %lld ms; fencing refusals met by stopped nodes: %llu\n",
      static_cast<long long>(kLeaseMs), static_cast<long long>(sorted[sorted.size() / 2]),
      static_cast<long long>(sorted.back()), static_cast<unsigned long long>(refusals));
  EXPECT_GT(acked.size(), 100u) << "the load did not run";
  size_t lost = 0;
  for (const auto& b : acked) {
    if (!reserved.count(b)) {
      if (++lost > 10) continue;
      std::string row;
      for (const auto& r : Query(db.uri(),
                                 "SELECT id, state, coalesce(reserved_by, ''), deadline_ms, shard, "
                                 "due_ms, ver, reserves, timeouts FROM jobs WHERE body='" +
                                     b + "'")) {
        for (const auto& v : r) row += v + " ";
      }
      ADD_FAILURE() << "acknowledged job " << b << " was never reserved; its row (id state "
                    << "reserved_by deadline shard due ver reserves timeouts): " << row;
    }
  }
  EXPECT_EQ(lost, 0u);

  // Push jobs and timer fires: each delivery of a job came before its
  // success was recorded (its done time), never after; each acknowledged
  // push job was delivered, and is done.
  std::map<uint64_t, std::vector<int64_t>> deliveries;  // job -> when it came (ms)
  for (const Received& r : rx.received()) {
    deliveries[std::stoull(r.headers.at("delayd-job-id"))].push_back(
        std::chrono::duration_cast<std::chrono::milliseconds>(r.at.time_since_epoch()).count());
  }
  std::map<uint64_t, int64_t> done_at;
  for (const auto& r : Query(db.uri(),
                             "SELECT id, done_ms FROM jobs WHERE tube IN ('pushes', "
                             "'ticks') AND state=3")) {
    done_at[std::stoull(r[0])] = std::stoll(r[1]);
  }
  size_t redelivered = 0, after_success = 0, undelivered = 0;
  for (const auto& [id, times] : deliveries) {
    redelivered += times.size() > 1 ? 1 : 0;
    auto done = done_at.find(id);
    for (int64_t at : times) {
      if (done != done_at.end() && at > done->second) {
        ++after_success;
        ADD_FAILURE() << "job " << id << " delivered at " << at << ", after its success was "
                      << "recorded at " << done->second;
      }
    }
  }
  for (uint64_t id : pushed) {
    if (deliveries.count(id) && done_at.count(id)) continue;
    if (++undelivered > 10) continue;
    std::string row;
    for (const auto& r : Query(db.uri(),
                               "SELECT state, shard, due_ms, done_ms, ver, reserves, "
                               "coalesce(reserved_by, ''), coalesce(last_error, '') "
                               "FROM jobs WHERE id=" +
                                   std::to_string(id))) {
      for (const auto& v : r) row += v + " ";
    }
    ADD_FAILURE() << "acknowledged push job " << id << " delivered "
                  << (deliveries.count(id) ? deliveries[id].size() : 0) << " times; its row "
                  << "(state shard due done ver reserves reserved_by last_error): "
                  << (row.empty() ? "none" : row);
  }
  EXPECT_EQ(undelivered, 0u) << "acknowledged push jobs never delivered, or not done";
  EXPECT_GT(pushed.size(), 50u) << "the push load did not run";
  // The timer's fires: one job per second from the first to the last, none
  // twice (the keys are unique per fire time, and so is the count).
  const auto fires = Query(db.uri(),
                           "SELECT count(*), count(DISTINCT key), coalesce((max(run_at_ms) - "
                           "min(run_at_ms)) / 1000 + 1, 0), coalesce(max(run_at_ms), 0) FROM jobs "
                           "WHERE key LIKE 'timer:" +
                               timer_id + ":%'");
  ASSERT_FALSE(fires.empty());
  // It fired until it was deleted (through every failover).
  EXPECT_GT(std::stoll(fires[0][3]), timer_deleted_ms - 3000)
      << "the timer stopped firing " << timer_deleted_ms - std::stoll(fires[0][3])
      << " ms before its delete";
  EXPECT_EQ(fires[0][0], fires[0][1]) << "a fire time made two jobs";
  EXPECT_EQ(fires[0][0], fires[0][2]) << "fire times were skipped";
  EXPECT_GT(std::stoll(fires[0][0]), 10) << "the timer did not run";
  std::printf(
      "chaos: %zu acknowledged push jobs and %s timer fires (one per second, none twice, none "
      "skipped) delivered; %zu delivered more than once (a node died or stalled mid-delivery), "
      "%zu after their success was recorded\n",
      pushed.size(), fires[0][0].c_str(), redelivered, after_success);
  if (left() != 0) {
    std::string rows;
    for (const auto& r : Query(db.uri(),
                               "SELECT id, state, coalesce(reserved_by, ''), "
                               "deadline_ms, shard, due_ms, ver, encode(body, 'escape') "
                               "FROM jobs WHERE tube='chaos' AND state<>3 LIMIT 10")) {
      for (const auto& v : r) rows += v + " ";
      rows += "\n";
    }
    ADD_FAILURE() << "jobs left undelivered (id state reserved_by deadline shard due ver "
                     "body):\n"
                  << rows;
  }
  for (int64_t f : failovers) EXPECT_LT(f, 3 * kLeaseMs) << "failover slower than the lease";
}

}  // namespace
}  // namespace delayd::testing
