// PrometheusText: writes the Prometheus text exposition format, version
// 0.0.4 (https://prometheus.io/docs/instrumenting/exposition_formats/):
// each family's HELP and TYPE lines, then its samples, label values escaped.
// It checks nothing about names: callers write fixed, valid ones.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/histogram.h"

namespace delayd::http {

class PrometheusText {
 public:
  using Labels = std::vector<std::pair<std::string_view, std::string_view>>;
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

  // Starts a family; `type` is "counter", "gauge" or "histogram".
  void Family(std::string_view name, std::string_view type, std::string_view help);
  void Sample(std::string_view name, const Labels& labels, double value);
  void Sample(std::string_view name, const Labels& labels, uint64_t value);
  // A histogram's _bucket, _sum and _count samples (of the family just started).
  void Histogram(std::string_view name, const Labels& labels, const HistogramSnapshot& h);

  const std::string& text() const { return out_; }

 private:
  void Series(std::string_view name, const Labels& labels, std::string_view le);
  std::string out_;
};

}  // namespace delayd::http
