#include "http/prometheus_text.h"

#include <gtest/gtest.h>

namespace delayd::http {
namespace {

TEST(PrometheusTextTest, LabelValuesAndHelpAreEscaped) {
  PrometheusText out;
  out.Family("x_total", "counter", "a \\ b\nc \"q\"");
  out.Sample("x_total", {{"topic", "a\"b\\c\nd"}}, uint64_t{7});
  EXPECT_EQ(out.text(),
            "# HELP x_total a \\\\ b\\nc \"q\"\n"
            "# TYPE x_total counter\n"
            "x_total{topic=\"a\\\"b\\\\c\\nd\"} 7\n");
}

TEST(PrometheusTextTest, AHistogramHasCumulativeBucketsThenSumAndCount) {
  Histogram h({0.001, 0.5});
  h.ObserveMicros(200);
  h.ObserveMicros(700000);
  PrometheusText out;
  out.Histogram("lat_seconds", {{"route", "GET /"}}, h.Read());
  EXPECT_EQ(out.text(),
            "lat_seconds_bucket{route=\"GET /\",le=\"0.001\"} 1\n"
            "lat_seconds_bucket{route=\"GET /\",le=\"0.5\"} 1\n"
            "lat_seconds_bucket{route=\"GET /\",le=\"+Inf\"} 2\n"
            "lat_seconds_sum{route=\"GET /\"} 0.7002\n"
            "lat_seconds_count{route=\"GET /\"} 2\n");
}

TEST(PrometheusTextTest, ASampleWithoutLabelsHasNoBraces) {
  PrometheusText out;
  out.Sample("up", {}, 1.5);
  EXPECT_EQ(out.text(), "up 1.5\n");
}

}  // namespace
}  // namespace delayd::http
