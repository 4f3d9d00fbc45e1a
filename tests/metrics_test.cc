// /metrics and /readyz as Prometheus and a load balancer see them: the page
// parses with Prometheus's Python client parser, and its counters and
// histograms count exactly what was done to the server.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>

#include "support/client.h"
#include "support/http.h"
#include "support/process.h"

namespace delayd::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

struct Sample {
  std::string family, type, name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// The page as prometheus_client's parser reads it (tests/support/prom_parse.py).
std::vector<Sample> Parse(const std::string& text) {
  const std::string in = MakeTempDir("delayd-metrics") + "/metrics.txt";
  std::ofstream(in) << text;
  const std::string cmd =
      std::string("/usr/bin/python3 ") + DELAYD_PROM_PARSE + " < " + in + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) throw std::runtime_error("cannot run " + cmd);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int rc = pclose(p);
  if (rc != 0) throw std::runtime_error("parser failed: " + out);
  std::vector<Sample> samples;
  size_t start = 0;
  for (size_t end; (end = out.find('\n', start)) != out.npos; start = end + 1) {
    json j = json::parse(out.substr(start, end - start));
    samples.push_back({j["family"], j["type"], j["name"],
                       j["labels"].get<std::map<std::string, std::string>>(),
                       j["value"].get<double>()});
  }
  return samples;
}

// The value of the one sample `name` with exactly `labels`; -1 when absent.
double Value(const std::vector<Sample>& samples, const std::string& name,
             const std::map<std::string, std::string>& labels = {}) {
  for (const Sample& s : samples) {
    if (s.name == name && s.labels == labels) return s.value;
  }
  return -1;
}

std::vector<Sample> Scrape(int http_port) {
  HttpReply r = HttpCall(http_port, "GET", "/metrics");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
  return Parse(r.body);
}

double Seconds(std::chrono::system_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

TEST(MetricsTest, ThePageParsesAndCountsWhatWasDone) {
  Receiver targets([](const Received& r, int) { return Answer(r.path == "/ok" ? 200 : 500); });
  DelaydServer server(MakeTempDir("delayd-metrics"));
  const int http = server.http_port();
  auto post = [&](const std::string& target, const json& body) {
    HttpReply r = HttpCall(http, "POST", target, body.dump());
    EXPECT_LT(r.status, 300) << target << ": " << r.body;
  };
  HttpReply put =
      HttpCall(http, "PUT", "/v1/topics/hooks-fail",
               json{{"target", {{"url", targets.url("/fail")}}},
                    {"retry", {{"max_attempts", 2}, {"initial_backoff_ms", 10}, {"jitter", false}}},
                    {"alert", {{"webhook", targets.url("/alert")}, {"on_dead_letter", true}}}}
                   .dump());
  ASSERT_EQ(put.status, 200) << put.body;

  // Push jobs due now: delivered, or failed twice and dead-lettered.
  post("/v1/topics/hooks/jobs", json::array({{{"target", {{"url", targets.url("/ok")}}}},
                                             {{"target", {{"url", targets.url("/ok")}}}},
                                             {{"target", {{"url", targets.url("/ok")}}}}}));
  post("/v1/topics/hooks-fail/jobs", {{"body", 1}});

  ASSERT_TRUE(targets.WaitFor(
      [](const std::vector<Received>& got) {
        int ok = 0, fail = 0, alert = 0;
        for (const Received& r : got) (r.path == "/ok" ? ok : r.path == "/fail" ? fail : alert)++;
        return ok == 3 && fail == 2 && alert == 1;
      },
      10s));
  // The dead letter is recorded right after its answer; wait for it.
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Value(Scrape(http), "delayd_jobs", {{"topic", "hooks-fail"}, {"state", "buried"}}) ==
               1;
      },
      5s));

  // The failed job's retry was a delayed job too: lateness so far.
  const std::vector<Sample> before = Scrape(http);
  EXPECT_EQ(Value(before, "delayd_jobs_fired_total", {{"topic", "hooks-fail"}}), 1);
  EXPECT_EQ(Value(before, "delayd_fire_lateness_seconds_count"), 1);

  // Beanstalk: 10 jobs delayed a second, 5 ready at once, all reserved.
  Client c(server.port());
  const auto sent = std::chrono::system_clock::now();
  for (int i = 0; i < 10; ++i) c.Put("late", 0, 1);
  for (int i = 0; i < 5; ++i) c.Put("now");
  double client_lateness = 0;  // each delayed job's, from its due time as the client sees it
  for (int i = 0; i < 15; ++i) {
    std::string r = c.Cmd("reserve-with-timeout 5");
    ASSERT_EQ(r.rfind("RESERVED ", 0), 0u) << r;
    if (r.find("late") != r.npos)
      client_lateness += Seconds(std::chrono::system_clock::now() - sent - 1s);
    ASSERT_EQ(c.Cmd("delete " + std::to_string(Number(r))), "DELETED\r\n");
  }
  const std::vector<Sample> m = Scrape(http);
  auto topic = [](const std::string& t) {
    return std::map<std::string, std::string>{{"topic", t}};
  };
  EXPECT_EQ(Value(m, "delayd_jobs_submitted_total", topic("default")), 15);
  EXPECT_EQ(Value(m, "delayd_jobs_submitted_total", topic("hooks")), 3);
  EXPECT_EQ(Value(m, "delayd_jobs_submitted_total", topic("hooks-fail")), 1);
  EXPECT_EQ(Value(m, "delayd_jobs_fired_total", topic("default")), 10);
  EXPECT_EQ(Value(m, "delayd_jobs_fired_total", topic("hooks")), 0);  // never delayed: no fire
  EXPECT_EQ(Value(m, "delayd_push_delivered_total", topic("hooks")), 3);
  EXPECT_EQ(Value(m, "delayd_push_failed_total", topic("hooks")), 0);
  EXPECT_EQ(Value(m, "delayd_push_failed_total", topic("hooks-fail")), 2);
  EXPECT_EQ(Value(m, "delayd_push_retried_total", topic("hooks-fail")), 1);
  EXPECT_EQ(Value(m, "delayd_dead_letters_total", topic("hooks-fail")), 1);
  EXPECT_EQ(Value(m, "delayd_alerts_total", topic("hooks-fail")), 1);
  EXPECT_EQ(Value(m, "delayd_delivery_duration_seconds_count", {{"kind", "http"}}), 5);
  EXPECT_EQ(Value(m, "delayd_delivery_duration_seconds_count", {{"kind", "amqp"}}), 0);
  EXPECT_EQ(Value(m, "delayd_push_attempts_total", {{"kind", "http"}, {"outcome", "ok"}}), 3);
  EXPECT_EQ(Value(m, "delayd_push_attempts_total", {{"kind", "http"}, {"outcome", "retry"}}), 1);
  EXPECT_EQ(Value(m, "delayd_push_attempts_total", {{"kind", "http"}, {"outcome", "dead"}}), 1);
  EXPECT_EQ(Value(m, "delayd_push_attempts_total", {{"kind", "kafka"}, {"outcome", "ok"}}), 0);
  EXPECT_EQ(Value(m, "delayd_jobs", {{"topic", "default"}, {"state", "ready"}}), 0);
  EXPECT_EQ(Value(m, "delayd_connections", {{"protocol", "beanstalk"}}), 1);
  EXPECT_EQ(Value(m, "delayd_waiting_consumers"), 0);
  EXPECT_EQ(Value(m, "delayd_deliveries_in_flight"), 0);
  EXPECT_GT(Value(m, "delayd_store_commit_seconds_count"), 0);
  EXPECT_EQ(Value(m, "delayd_store_failing"), 0);
  EXPECT_EQ(Value(m, "delayd_http_request_duration_seconds_count",
                  {{"route", "POST /v1/topics/{topic}/jobs"}}),
            2);

  // Fire lateness: one observation per fired job; each ends before its
  // consumer got the job, and the server's due time is no earlier than the
  // client's, so the server's total cannot exceed the client's.
  EXPECT_EQ(Value(m, "delayd_fire_lateness_seconds_count"), 11);
  const double sum = Value(m, "delayd_fire_lateness_seconds_sum") -
                     Value(before, "delayd_fire_lateness_seconds_sum");
  EXPECT_GE(sum, 0);
  EXPECT_LE(sum, client_lateness);
  double last = 0;
  for (const Sample& s : m) {
    if (s.name != "delayd_fire_lateness_seconds_bucket") continue;
    EXPECT_GE(s.value, last) << "buckets are cumulative, le=" << s.labels.at("le");
    last = s.value;
  }
  EXPECT_EQ(last, 11);  // the +Inf bucket, last
  // The sample dashboard asks only for metrics the page has.
  std::ifstream dash(DELAYD_DASHBOARD);
  const std::string text((std::istreambuf_iterator<char>(dash)), {});
  ASSERT_FALSE(text.empty()) << DELAYD_DASHBOARD;
  size_t asked = 0;
  for (size_t at = 0; (at = text.find("delayd_", at)) != text.npos;) {
    size_t end = text.find_first_not_of("abcdefghijklmnopqrstuvwxyz_", at);
    const std::string name = text.substr(at, end - at);
    at = end;
    if (name == "delayd_" || text.compare(end, 1, "-") == 0)
      continue;  // the uid, "delayd-overview"
    ++asked;
    EXPECT_TRUE(std::any_of(m.begin(), m.end(), [&](const Sample& s) { return s.name == name; }))
        << "the dashboard asks for " << name;
  }
  EXPECT_GT(asked, 10u);
  std::printf("fire lateness: server %.3f ms mean, client %.3f ms mean (10 jobs)\n", sum * 100,
              client_lateness * 100);
}

// The build's allocator is what runs: jemalloc in a release build
// (CMake's DELAYD_JEMALLOC), the sanitizer's elsewhere.
TEST(MetricsTest, TheInfoSeriesNamesTheVersionAndTheAllocatorThatRuns) {
  DelaydServer server(MakeTempDir("delayd-metrics"));
  const std::vector<Sample> m = Scrape(server.http_port());
  const auto info =
      std::find_if(m.begin(), m.end(), [](const Sample& s) { return s.name == "delayd_info"; });
  ASSERT_NE(info, m.end());
  EXPECT_EQ(info->value, 1);
  EXPECT_EQ(info->labels.at("version"), DELAYD_VERSION);
  const std::string allocator = info->labels.at("allocator");
#if DELAYD_EXPECT_JEMALLOC
  EXPECT_EQ(allocator.rfind("jemalloc 5.", 0), 0u) << allocator;
#else
  EXPECT_EQ(allocator, "system");
#endif
}

// An operator's `top -H` and `ps -L` tell delayd's threads apart by name
// (common/thread_name.h), and the event loop keeps the process's name, which
// `pgrep delayd` matches.
TEST(MetricsTest, TheServersThreadsCarryTheNamesOfWhatTheyDo) {
  DelaydServer server(MakeTempDir("delayd-metrics"));
  ASSERT_EQ(HttpCall(server.http_port(), "GET", "/readyz").status, 200);
  const auto [first, names] = ThreadNamesOf(server.pid());
  EXPECT_EQ(first, "delayd");
  EXPECT_EQ(names.count("store-writer"), 1u);
  EXPECT_EQ(names.count("store-syncer"), 1u);
  EXPECT_EQ(names.count("http-client"), 1u);
  if (DelaydServer::OnPostgres()) {
    EXPECT_EQ(names.count("pg-reader"), 1u);
    EXPECT_EQ(names.count("pg-claimer"), 0u);  // a cluster node's only
  } else {
    EXPECT_EQ(names.count("sqlite-ahead"), 1u);
    EXPECT_EQ(names.count("sqlite-ckpt"), 1u);
  }
}

TEST(MetricsTest, MetricsAreOpenUnlessMetricsAuthAsksForTheToken) {
  DelaydServer open(MakeTempDir("delayd-metrics"), {"--api-token", "s3cret"});
  EXPECT_EQ(HttpCall(open.http_port(), "GET", "/metrics").status, 200);
  EXPECT_EQ(HttpCall(open.http_port(), "GET", "/v1/stats").status, 401);

  DelaydServer closed(MakeTempDir("delayd-metrics"), {"--api-token", "s3cret", "--metrics-auth"});
  EXPECT_EQ(HttpCall(closed.http_port(), "GET", "/metrics").status, 401);
  EXPECT_EQ(
      HttpCall(closed.http_port(), "GET", "/metrics", "", {"Authorization: Bearer nope"}).status,
      401);
  HttpReply ok =
      HttpCall(closed.http_port(), "GET", "/metrics", "", {"Authorization: Bearer s3cret"});
  EXPECT_EQ(ok.status, 200);
  EXPECT_FALSE(Parse(ok.body).empty());
  // Readiness stays open: a load balancer's probe has no token.
  EXPECT_EQ(HttpCall(closed.http_port(), "GET", "/readyz").status, 200);
}

// Finding 8: the page stays bounded however many topics there are: series
// of their own for the --metrics-topics largest backlogs, the rest summed
// under topic="_other", with the same totals.
TEST(MetricsTest, PerTopicSeriesAreBoundedAndTheRestSummed) {
  DelaydServer server(MakeTempDir("delayd-metrics"), {"--metrics-topics", "3"});
  const int http = server.http_port();
  uint64_t total = 0;
  for (int t = 0; t < 40; ++t) {
    json batch = json::array();
    for (int i = 0; i <= t % 7; ++i) batch.push_back({{"delay", "1h"}, {"body", i}});
    total += batch.size();
    HttpReply r =
        HttpCall(http, "POST", "/v1/topics/t" + std::to_string(t) + "/jobs", batch.dump());
    ASSERT_EQ(r.status, 201) << r.body;
  }
  const std::vector<Sample> page = Scrape(http);
  std::set<std::string> topics;
  double delayed = 0, submitted = 0;
  for (const Sample& s : page) {
    if (s.labels.count("topic")) topics.insert(s.labels.at("topic"));
    if (s.name == "delayd_jobs" && s.labels.at("state") == "delayed") delayed += s.value;
    if (s.name == "delayd_jobs_submitted_total") submitted += s.value;
  }
  EXPECT_EQ(topics.size(), 4u) << "three topics and _other";
  EXPECT_EQ(topics.count("_other"), 1u);
  // The three largest backlogs (7 jobs: t6, t13, t20, ... the first by name).
  for (const char* big : {"t13", "t20", "t27"}) EXPECT_EQ(topics.count(big), 1u) << big;
  EXPECT_EQ(delayed, static_cast<double>(total));
  EXPECT_EQ(submitted, static_cast<double>(total));
  EXPECT_EQ(Value(page, "delayd_topics", {{"shown", "true"}}), 3);
  EXPECT_EQ(Value(page, "delayd_topics", {{"shown", "false"}}), 38) << "40 topics and default";
}

}  // namespace
}  // namespace delayd::testing
