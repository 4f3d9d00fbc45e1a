// GET /metrics: what delayd has done and holds, in the Prometheus text
// format. Counters and histograms come from Metrics, recorded as work
// happens; gauges are read from their owners now. The jobs per topic and
// state are the cluster's in cluster mode (Engine::Topics); everything else
// is this node's. Metric names and meanings: doc/metrics.md.
#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <string_view>

#include "common/allocator.h"
#include "delivery/dispatcher.h"
#include "http/api.h"
#include "http/prometheus_text.h"

namespace delayd::http {

namespace {

// The label a topic's series carry: its own name for the topics shown, the
// one bucket kOtherTopic for the rest.
constexpr const char* kOtherTopic = "_other";
using Shown = std::set<std::string, std::less<>>;
std::string_view TopicLabel(const Shown& shown, std::string_view topic) {
  return shown.count(topic) != 0 ? topic : std::string_view(kOtherTopic);
}

void Counters(PrometheusText& out, const Metrics& m, const Shown& shown) {
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
    uint64_t other = 0;
    bool any_other = false;
    for (const auto& [topic, counters] : m.topics()) {
      if (shown.count(topic) == 0) {
        other += counters.*(c.field);
        any_other = true;
        continue;
      }
      out.Sample(c.name, {{"topic", topic}}, counters.*(c.field));
    }
    if (any_other) out.Sample(c.name, {{"topic", kOtherTopic}}, other);
  }
}

void Histograms(PrometheusText& out, const Metrics& m, const store::StoreStats* store) {
  out.Family("delayd_fire_lateness_seconds", "histogram",
             "From a delayed job's due time to its being ready or handed to delivery.");
  out.Histogram("delayd_fire_lateness_seconds", {}, m.fire_lateness.Read());
  out.Family("delayd_delivery_duration_seconds", "histogram",
             "A push attempt, from sending to the answer, the broker's confirm or the error, "
             "by target kind.");
  for (TargetKind k : kTargetKinds) {
    out.Histogram("delayd_delivery_duration_seconds", {{"kind", std::string(KindName(k))}},
                  m.Kind(k).duration.Read());
  }
  out.Family("delayd_push_attempts_total", "counter",
             "Push attempts by target kind and outcome: ok, retry (failed, tried again) or dead.");
  for (TargetKind k : kTargetKinds) {
    const Metrics::KindMetrics& km = m.Kind(k);
    for (const auto& [outcome, n] :
         {std::pair{"ok", km.ok}, {"retry", km.retry}, {"dead", km.dead}}) {
      out.Sample("delayd_push_attempts_total",
                 {{"kind", std::string(KindName(k))}, {"outcome", outcome}}, n);
    }
  }
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
    out.Family("delayd_info", "gauge", "Always 1; the version and the memory allocator as labels.");
    out.Sample("delayd_info", {{"version", options_.version}, {"allocator", MemoryAllocator()}},
               uint64_t{1});

    // Series of their own for the topics with the largest backlogs; the
    // rest summed under topic="_other", so the page stays bounded however
    // many topics there are.
    // A topic that emptied has left the engine's list but may still have
    // counters: it competes with a backlog of 0.
    std::map<std::string_view, uint64_t> backlog;
    for (const engine::TopicInfo& t : *r) {
      backlog[t.name] = t.ready + t.delayed + t.reserved + t.buried;
    }
    for (const auto& [topic, counters] : options_.metrics->topics()) backlog.try_emplace(topic, 0);
    backlog.erase(kOtherTopic);
    std::vector<std::pair<std::string_view, uint64_t>> by_backlog(backlog.begin(), backlog.end());
    const size_t n_shown = std::min(options_.metrics_topics, by_backlog.size());
    std::partial_sort(by_backlog.begin(), by_backlog.begin() + static_cast<ptrdiff_t>(n_shown),
                      by_backlog.end(), [](const auto& a, const auto& b) {
                        return a.second != b.second ? a.second > b.second : a.first < b.first;
                      });
    Shown shown;
    for (size_t i = 0; i < n_shown; ++i) shown.insert(std::string(by_backlog[i].first));
    out.Family("delayd_jobs", "gauge",
               "Jobs per topic and state (the cluster's in cluster mode); topics past "
               "--metrics-topics summed under topic=\"_other\".");
    std::map<std::string_view, std::array<uint64_t, 4>> jobs;
    for (const engine::TopicInfo& t : *r) {
      auto& sums = jobs[TopicLabel(shown, t.name)];
      sums[0] += t.ready;
      sums[1] += t.delayed;
      sums[2] += t.reserved;
      sums[3] += t.buried;
    }
    for (const auto& [topic, sums] : jobs) {
      static constexpr const char* kStates[] = {"ready", "delayed", "reserved", "buried"};
      for (size_t i = 0; i < 4; ++i) {
        out.Sample("delayd_jobs", {{"topic", topic}, {"state", kStates[i]}}, sums[i]);
      }
    }
    out.Family("delayd_topics", "gauge",
               "Topics, and how many of them have series of their own on this page.");
    out.Sample("delayd_topics", {{"shown", "true"}}, uint64_t{shown.size()});
    out.Sample("delayd_topics", {{"shown", "false"}}, uint64_t{by_backlog.size() - shown.size()});
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
    out.Family("delayd_store_unsound_rows", "gauge",
               "Stored job rows left out of memory because they break what the engine relies "
               "on (logged; they stay in the store).");
    out.Sample("delayd_store_unsound_rows", {}, engine_.unsound_rows());
    out.Family("delayd_held_write_failures_total", "counter",
               "Cluster mode: changes of held jobs (delete, release, bury, touch) answered once "
               "queued whose commit then failed; each job is delivered again.");
    out.Sample("delayd_held_write_failures_total", {}, engine_.held_write_failures());
    Counters(out, *options_.metrics, shown);
    Histograms(out, *options_.metrics, store ? &*store : nullptr);
    reply(Response{200, PrometheusText::kContentType, {}, out.text()});
  });
}

}  // namespace delayd::http
