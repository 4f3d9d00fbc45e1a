#include "common/histogram.h"

#include <gtest/gtest.h>

#include <thread>

namespace delayd {
namespace {

TEST(HistogramTest, AnObservationCountsInTheFirstBucketAtOrAboveIt) {
  Histogram h({0.001, 0.01, 0.1});
  h.ObserveMicros(1000);    // exactly the first bound: "le" is inclusive
  h.ObserveMicros(1001);    // just above it
  h.ObserveMicros(-5);      // a clock step back counts as 0
  h.ObserveMicros(500000);  // past every bound: +Inf only
  HistogramSnapshot s = h.Read();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 3, 3}));
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(s.sum, (1000 + 1001 + 0 + 500000) / 1e6);
}

TEST(HistogramTest, ObservationsFromSeveralThreadsAreAllCounted) {
  Histogram h(Histogram::LatencyBounds());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < 10000; ++i) h.ObserveMicros(t * 1000 + i % 7);
    });
  }
  for (auto& t : threads) t.join();
  HistogramSnapshot s = h.Read();
  EXPECT_EQ(s.count, 40000u);
  EXPECT_EQ(s.cumulative.back(), 40000u);  // all under 10 s
}

}  // namespace
}  // namespace delayd
