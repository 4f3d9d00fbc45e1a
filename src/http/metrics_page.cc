// GET /metrics: what delayd has done and holds, in the Prometheus text
// format. Counters and histograms come from Metrics, recorded as work
// happens; gauges are read from their owners now. The jobs per topic and
// state are the cluster's in cluster mode (Engine::Topics); everything else
// is this node's. Metric names and meanings: doc/metrics.md.
#include "delivery/dispatcher.h"
#include "http/api.h"
#include "http/prometheus_text.h"

namespace delayd::http {

namespace {

void Counters(PrometheusText& out, const Metrics& m) {
  struct Counter {
    const char* name;
    const char* help;
    uint64_t TopicCounters::*field;
  };
  static constexpr Counter kCounters[] = {
      {"delayd_jobs_submitted_total", "Jobs accepted (put, submitted, or made by a timer's fire).",
       &TopicCounters::submitted},
      {"delayd_jobs_fired_total",
       "Delayed jobs made ready at their due time by this node's clock (one node; in cluster "
       "mode see delayd_fire_lateness_seconds_count).",
       &TopicCounters::fired},
      {"delayd_push_delivered_total", "Push deliveries the target answered with 2xx.",
       &TopicCounters::delivered},
      {"delayd_push_failed_total", "Push delivery attempts that did not succeed.",
       &TopicCounters::failed},
      {"delayd_push_retried_total", "Failed push attempts scheduled to be tried again.",
       &TopicCounters::retried},
      {"delayd_dead_letters_total", "Push jobs given up on and buried as dead letters.",
       &TopicCounters::dead_lettered},
      {"delayd_alerts_total", "Alert webhooks sent.", &TopicCounters::alerts},
  };
  for (const Counter& c : kCounters) {
    out.Family(c.name, "counter", c.help);
    for (const auto& [topic, counters] : m.topics()) {
      out.Sample(c.name, {{"topic", topic}}, counters.*(c.field));
    }
  }
}

void Histograms(PrometheusText& out, const Metrics& m, const store::StoreStats* store) {
  out.Family("delayd_fire_lateness_seconds", "histogram",
             "From a delayed job's due time to its being ready or handed to delivery.");
  out.Histogram("delayd_fire_lateness_seconds", {}, m.fire_lateness.Read());
  out.Family("delayd_delivery_duration_seconds", "histogram",
             "A push delivery's HTTP exchange, from sending to the answer or error.");
  out.Histogram("delayd_delivery_duration_seconds", {}, m.delivery_duration.Read());
  if (store != nullptr) {
    out.Family("delayd_store_commit_seconds", "histogram",
               "A group commit's transaction, from its first statement to its commit.");
    out.Histogram("delayd_store_commit_seconds", {}, store->commit_seconds);
    out.Family("delayd_store_sync_seconds", "histogram",
               "A sync that makes commits survive a power cut.");
    out.Histogram("delayd_store_sync_seconds", {}, store->sync_seconds);
  }
  out.Family("delayd_http_request_duration_seconds", "histogram",
             "HTTP requests, from routing to the reply (long polls included), by route.");
  for (const auto& [route, h] : m.http_routes()) {
    out.Histogram("delayd_http_request_duration_seconds", {{"route", route}}, h->Read());
  }
}

}  // namespace

void Api::MetricsPage(Call& c) {
  if (options_.metrics == nullptr) {
    return c.reply(ProblemResponse(Status::NotFound("metrics are off on this server")));
  }
  engine_.Topics([this, reply = std::move(c.reply)](Result<std::vector<engine::TopicInfo>> r) {
    if (!r.ok()) return reply(ProblemResponse(r.status()));
    PrometheusText out;
    out.Family("delayd_info", "gauge", "Always 1; the version as a label.");
    out.Sample("delayd_info", {{"version", options_.version}}, uint64_t{1});

    out.Family("delayd_jobs", "gauge", "Jobs per topic and state (the cluster's in cluster mode).");
    for (const engine::TopicInfo& t : *r) {
      for (auto [state, n] : {std::pair{"ready", t.ready},
                              {"delayed", t.delayed},
                              {"reserved", t.reserved},
                              {"buried", t.buried}}) {
        out.Sample("delayd_jobs", {{"topic", t.name}, {"state", state}}, n);
      }
    }
    const engine::EngineStats e = engine_.Stats();
    out.Family("delayd_waiting_consumers", "gauge",
               "Consumers blocked in a reserve (beanstalk and HTTP long polls).");
    out.Sample("delayd_waiting_consumers", {}, e.waiting);
    out.Family("delayd_connections", "gauge", "Open client connections by protocol.");
    if (options_.beanstalk_connections) {
      out.Sample("delayd_connections", {{"protocol", "beanstalk"}},
                 options_.beanstalk_connections());
    }
    if (options_.http_connections) {
      out.Sample("delayd_connections", {{"protocol", "http"}}, options_.http_connections());
    }
    if (dispatcher_ != nullptr) {
      out.Family("delayd_deliveries_in_flight", "gauge", "Push deliveries awaiting an answer.");
      out.Sample("delayd_deliveries_in_flight", {}, dispatcher_->stats().in_flight);
    }
    std::optional<store::StoreStats> store;
    if (options_.store_stats) {
      store = options_.store_stats();
      out.Family("delayd_store_queue_depth", "gauge",
                 "Writes waiting for the store's writer (group commit).");
      out.Sample("delayd_store_queue_depth", {}, store->queued);
      out.Family("delayd_store_failing", "gauge",
                 "1 while the store's last commit or sync failed, else 0.");
      out.Sample("delayd_store_failing", {}, uint64_t{store->failing ? 1u : 0u});
    }
    Counters(out, *options_.metrics);
    Histograms(out, *options_.metrics, store ? &*store : nullptr);
    reply(Response{200, PrometheusText::kContentType, {}, out.text()});
  });
}

}  // namespace delayd::http
