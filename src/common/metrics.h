// Metrics: the counters and histograms delayd's components record as work
// happens, for /metrics (http/metrics_page.cc). Gauges (jobs per state,
// connections, queue depths) are not here: the page reads them from their
// owners when it is scraped.
//
// Per-topic counters never reset while the process runs, even when a topic
// empties and its tube leaves memory, so that rates over them stay true.
// Topics past kMaxTopics share one set of counters, topic "_other", so that
// a client creating tubes without end cannot grow the page without end.
//
// Threading: the histograms are thread-safe (Histogram). Topic() and the
// HTTP route map are for the event loop thread only, like the engine, the
// dispatcher and the API that record them.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "common/histogram.h"
#include "common/target_kind.h"

namespace delayd {

struct TopicCounters {
  uint64_t submitted = 0;      // jobs accepted (put, submitted, timer fires)
  uint64_t fired = 0;          // delayed jobs made ready at their due time (one node)
  uint64_t delivered = 0;      // push deliveries answered 2xx
  uint64_t failed = 0;         // push attempts that did not succeed
  uint64_t retried = 0;        // failed push attempts scheduled again
  uint64_t dead_lettered = 0;  // push jobs given up on (buried)
  uint64_t alerts = 0;         // alert webhooks sent
};

class Metrics {
 public:
  static constexpr size_t kMaxTopics = 1000;
  static constexpr std::string_view kOtherTopic = "_other";

  Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // The counters of `topic`, made on first use. The reference stays valid
  // for the Metrics' lifetime.
  TopicCounters& Topic(std::string_view topic);
  const std::map<std::string, TopicCounters, std::less<>>& topics() const { return topics_; }

  // The histogram of HTTP requests of one route ("GET /v1/jobs/{id}").
  Histogram& HttpRoute(const std::string& route);
  const std::map<std::string, std::unique_ptr<Histogram>>& http_routes() const {
    return http_routes_;
  }

  // From a delayed job's due time to its being ready (pull) or handed to
  // the dispatcher (push): on one node the engine's tick, in cluster mode
  // the commit of the shard owner's promotion.
  Histogram fire_lateness;
  // Push attempts by their target's kind: the exchange, from sending to the
  // answer, the broker's confirm or the error; and their outcomes.
  struct KindMetrics {
    Histogram duration{Histogram::LatencyBounds()};
    uint64_t ok = 0, retry = 0, dead = 0;
  };
  KindMetrics& Kind(TargetKind k) { return kinds_[static_cast<size_t>(k)]; }
  const KindMetrics& Kind(TargetKind k) const { return kinds_[static_cast<size_t>(k)]; }

 private:
  std::map<std::string, TopicCounters, std::less<>> topics_;
  std::map<std::string, std::unique_ptr<Histogram>> http_routes_;
  std::array<KindMetrics, kTargetKinds.size()> kinds_;
};

}  // namespace delayd
