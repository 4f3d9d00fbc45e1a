// Api: the HTTP/JSON API of design.md over the engine: jobs, pull, topics,
// stats, the OpenAPI document and health. Routes are data (Routes()), so a
// test can check that the OpenAPI document covers every one.
//
// One class, its handlers in a file per resource: router.cc (the table, the
// checks every request passes, dispatch), problem.cc (answers and
// problems), job_api.cc, pull_api.cc, topic_api.cc (with stats),
// timer_api.cc, bulk_api.cc, forecast.cc, metrics_page.cc; api.cc the rest
// (construction, console files, readiness).
//
// Threading: event loop thread only (the engine's).
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/metrics.h"
#include "common/version.h"
#include "engine/engine.h"
#include "http/access.h"
#include "http/console.h"
#include "http/job_json.h"
#include "http/server.h"

namespace delayd::delivery {
class Dispatcher;
}
namespace delayd::timer {
class TimerService;
struct TimerInfo;
}  // namespace delayd::timer

namespace delayd::http {

class PullWaiter;
class BulkOps;

struct ApiOptions {
  // Tokens and browser defences (access.h): with a token, every /v1 route
  // needs "Authorization: Bearer <token>" (the read token: GET routes only).
  AccessOptions access;
  size_t max_batch = 1000;  // jobs per submission
  int64_t max_reserve_wait_ms = 60'000;
  JobLimits limits;
  std::string version = kVersion;
  // Cluster mode: reads the cluster view (GET /v1/cluster); null: not a
  // cluster node, and the route answers 404.
  std::function<void(std::function<void(Result<nlohmann::json>)>)> cluster_view = {};
  // GET /metrics: the counters and histograms components record; null: the
  // route answers 404. With `metrics_need_token`, it needs the token too.
  Metrics* metrics = nullptr;
  bool metrics_need_token = false;
  // Topics with series of their own on /metrics (the largest backlogs); the
  // rest are summed under topic="_other".
  size_t metrics_topics = 100;
  // The store's figures, for /metrics; null: none.
  std::function<store::StoreStats()> store_stats = {};
  // Open connections, for /metrics; null: not counted.
  std::function<uint64_t()> beanstalk_connections = {};
  std::function<uint64_t()> http_connections = {};
  // The web console at "/": on, read-only (its pages offer no actions; the
  // API still answers what the token allows) or off (404).
  ConsoleMode console = ConsoleMode::kOn;
  // GET /readyz: calls its argument with why this node should not take
  // traffic now ("" when it should), now or later; null: always ready.
  std::function<void(std::function<void(std::string)>)> not_ready = {};
};

struct RouteSpec {
  const char* method;
  const char* pattern;  // "/v1/jobs/{id}", as the OpenAPI document writes paths
};

class Api final : public Handler {
 public:
  // All references must outlive the Api; `dispatcher` and `timers` may be
  // null (the timer routes then answer 503).
  Api(boost::asio::io_context& io, engine::Engine& engine, const Clock& clock,
      delivery::Dispatcher* dispatcher, std::function<nlohmann::json()> server_stats,
      ApiOptions options, timer::TimerService* timers = nullptr);
  ~Api() override;
  void Handle(Request req, Reply reply) override;

  // Shutting down: every waiting HTTP reserve answers 503 now.
  void EndLongPolls();

  // The tokens read again (SIGHUP); requests from now on are checked
  // against these.
  void SetTokens(Tokens tokens) { options_.access.tokens = std::move(tokens); }

  static const std::vector<RouteSpec>& Routes();
  // The scope a route asks of the request's token: reading routes (GET, and
  // a timer's preview, which changes nothing) read; a topic's settings and
  // its pause admin; every other route write.
  static Scope RequiredScope(const RouteSpec& route);
  static const std::string& OpenApiDocument();

 private:
  using Params = std::vector<std::string>;  // path parameters in pattern order
  struct Call {
    Request req;
    Params params;
    std::vector<std::pair<std::string, std::string>> query;
    Reply reply;
  };
  struct Route {
    RouteSpec spec;
    void (*handle)(Api&, Call&);
  };
  // router.cc
  static const std::vector<Route>& Table();
  void Dispatch(const Route& route, Call& c);
  // `reply`, recording the time until it is called in the route's histogram.
  Reply Timed(const RouteSpec& spec, Reply reply);
  // job_api.cc
  void SubmitJobs(Call& c);
  void GetJob(Call& c);
  void PatchJob(Call& c);
  void DeleteJob(Call& c);
  void GetByKey(Call& c);
  void ListJobs(Call& c);
  void Action(Call& c, const std::string& action);
  void Attempts(Call& c);
  // pull_api.cc
  void Reserve(Call& c);
  void Settle(Call& c, engine::Engine::Settle how);
  // topic_api.cc
  // The topic as GET /v1/topics/{topic} shows it (the cluster's in cluster mode).
  void ReplyTopic(Reply reply, const std::string& name);
  void ListTopics(Call& c);
  void GetTopic(Call& c);
  void PutTopic(Call& c);
  void PauseTopic(Call& c, bool pause);
  void Stats(Call& c);
  void Forecast(Call& c);          // forecast.cc
  void DeadLetterGroups(Call& c);  // bulk_api.cc
  void MetricsPage(Call& c);       // metrics_page.cc
  // api.cc
  void ConsoleFile(Call& c, std::string_view name);
  void Ready(Call& c);
  // timer_api.cc
  void CreateTimer(Call& c);
  void ListTimers(Call& c);
  void GetTimer(Call& c);
  void PatchTimer(Call& c);
  void DeleteTimer(Call& c);
  void SetTimerActive(Call& c, bool active);
  void NextFires(Call& c);
  void PreviewTimer(Call& c);
  void TimerFires(Call& c);
  void ReplyTimer(const Reply& reply, Result<timer::TimerInfo> r, int status = 200);
  // bulk_api.cc
  void StartBulk(Call& c);
  void ListBulk(Call& c);
  void GetBulk(Call& c);
  void StopBulk(Call& c);

  nlohmann::json RenderTopic(const engine::TopicInfo& t) const;
  // Replies with the job as it now reads, or the status as a problem.
  void ReplyJob(const Reply& reply, uint64_t id, int status = 200);

  boost::asio::io_context& io_;
  engine::Engine& engine_;
  const Clock& clock_;
  delivery::Dispatcher* dispatcher_;
  std::function<nlohmann::json()> server_stats_;
  ApiOptions options_;
  std::unordered_set<std::shared_ptr<PullWaiter>> waiters_;  // HTTP reserves still waiting
  timer::TimerService* timers_;
  std::unique_ptr<BulkOps> bulk_;
  // Hour and day forecasts by query (forecast.cc).
  static constexpr int64_t kForecastMaxAgeMs = 15'000;
  struct CachedForecast {
    std::optional<Response> answer;  // the last read
    int64_t read_ms = 0;             // when it was read
    bool reading = false;
    std::vector<Reply> waiting;  // for the first read
  };
  std::map<std::string, CachedForecast> forecasts_;
};

// A problem+json response (RFC 9457) of `status`, its type
// https://delayd.dev/problems/<slug>, naming the refused `field` if any.
Response Problem(int status, const char* slug, const std::string& title, const std::string& detail,
                 const std::string& field = "");
// A problem+json response (RFC 9457) for a failed status (common/problem.h:
// a store failure's text is logged under a request id, which the response
// gives in its detail and its Delayd-Request-Id header instead).
Response ProblemResponse(const Status& s);
Response JsonResponse(int status, const nlohmann::json& body);
Response JsonTextResponse(int status, std::string text);  // `text` is JSON already

}  // namespace delayd::http
