#include "common/metrics.h"

namespace delayd {

Metrics::Metrics() : fire_lateness(Histogram::LatencyBounds()) {}

TopicCounters& Metrics::Topic(std::string_view topic) {
  if (auto it = topics_.find(topic); it != topics_.end()) return it->second;
  if (topics_.size() >= kMaxTopics) topic = kOtherTopic;
  return topics_.try_emplace(std::string(topic)).first->second;
}

Histogram& Metrics::HttpRoute(const std::string& route) {
  auto& h = http_routes_[route];
  if (!h) h = std::make_unique<Histogram>(Histogram::LatencyBounds());
  return *h;
}

}  // namespace delayd
