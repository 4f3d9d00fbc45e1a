// Histogram: counts of observed durations in fixed buckets, the shape
// Prometheus histograms have (cumulative counts per upper bound, a count and
// a sum). Observing is a few relaxed atomic adds, so any thread may observe
// (the store's writer records its commits) while another reads.
//
// Threading: Observe and Read are thread-safe; a Read while observations go
// on sees each bucket at some moment of its own, so count and buckets may
// disagree by the observations in flight.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace delayd {

struct HistogramSnapshot {
  std::vector<double> bounds;        // upper bounds in seconds, rising
  std::vector<uint64_t> cumulative;  // observations <= bounds[i]
  uint64_t count = 0;                // all observations (the +Inf bucket)
  double sum = 0;                    // seconds
};

class Histogram {
 public:
  // `bounds`: upper bounds in seconds, rising.
  explicit Histogram(std::vector<double> bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void ObserveMicros(int64_t us);  // negative counts as 0
  HistogramSnapshot Read() const;

  // Bounds for latencies from 100 us to 10 s: fire lateness, commits, HTTP.
  static std::vector<double> LatencyBounds();

 private:
  const std::vector<int64_t> bounds_us_;
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bound, not cumulative, +1 for +Inf
  std::atomic<uint64_t> sum_us_{0};
};

}  // namespace delayd
