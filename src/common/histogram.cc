#include "common/histogram.h"

#include <algorithm>
#include <cmath>

namespace delayd {

namespace {

std::vector<int64_t> ToMicros(const std::vector<double>& bounds) {
  std::vector<int64_t> out;
  out.reserve(bounds.size());
  for (double b : bounds) out.push_back(static_cast<int64_t>(std::llround(b * 1e6)));
  return out;
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_us_(ToMicros(bounds)),
      bounds_(std::move(bounds)),
      buckets_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {}

std::vector<double> Histogram::LatencyBounds() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
}

void Histogram::ObserveMicros(int64_t us) {
  us = std::max<int64_t>(us, 0);
  // The first bound at or above the observation ("le", less or equal).
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_us_.begin(), bounds_us_.end(), us) -
                                       bounds_us_.begin());
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_us_.fetch_add(static_cast<uint64_t>(us), std::memory_order_relaxed);
}

HistogramSnapshot Histogram::Read() const {
  HistogramSnapshot s;
  s.bounds = bounds_;
  uint64_t running = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(running);
  }
  s.count = running + buckets_[bounds_.size()].load(std::memory_order_relaxed);
  s.sum = static_cast<double>(sum_us_.load(std::memory_order_relaxed)) / 1e6;
  return s;
}

}  // namespace delayd
