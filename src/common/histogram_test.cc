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

TEST(HistogramTest, QuantilesInterpolateWithinTheirBucketAsPrometheusDoes) {
  Histogram h({0.001, 0.002, 0.004});
  for (int i = 0; i < 50; ++i) h.ObserveMicros(500);   // (0, 1 ms]
  for (int i = 0; i < 50; ++i) h.ObserveMicros(1500);  // (1, 2 ms]
  HistogramSnapshot s = h.Read();
  EXPECT_DOUBLE_EQ(s.Quantile(0.5), 0.001);
  EXPECT_DOUBLE_EQ(s.Quantile(0.25), 0.0005);
  EXPECT_DOUBLE_EQ(s.Quantile(0.75), 0.0015);
  EXPECT_DOUBLE_EQ(s.Quantile(1.0), 0.002);
  h.ObserveMicros(9000);  // in +Inf: the largest bound is all that is known
  EXPECT_DOUBLE_EQ(h.Read().Quantile(1.0), 0.004);
  EXPECT_EQ(Histogram({1}).Read().Quantile(0.5), 0);
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
