#include "service/metrics.h"

#include <gtest/gtest.h>

namespace txscore::service {
namespace {

TEST(MetricsRegistry, RendersCountersWithHelpTypeAndLabels) {
  MetricsRegistry registry;
  Counter* ok = registry.AddCounter("txscore_requests_total", "Requests.", {{"outcome", "ok"}});
  registry.AddCounter("txscore_requests_total", "Requests.", {{"outcome", "invalid"}});
  ok->Increment();
  ok->Increment(2);
  EXPECT_EQ(registry.RenderPrometheus(),
            "# HELP txscore_requests_total Requests.\n"
            "# TYPE txscore_requests_total counter\n"
            "txscore_requests_total{outcome=\"ok\"} 3\n"
            "txscore_requests_total{outcome=\"invalid\"} 0\n");
}

TEST(MetricsRegistry, SameNameAndLabelsGiveTheSameCounter) {
  MetricsRegistry registry;
  EXPECT_EQ(registry.AddCounter("c", "h", {{"a", "1"}}), registry.AddCounter("c", "h", {{"a", "1"}}));
  EXPECT_NE(registry.AddCounter("c", "h", {{"a", "1"}}), registry.AddCounter("c", "h", {{"a", "2"}}));
}

TEST(MetricsRegistry, RendersCumulativeHistogramBuckets) {
  MetricsRegistry registry;
  Histogram* h = registry.AddHistogram("latency_seconds", "Latency.", {{"stage", "fraud"}}, {0.001, 0.01});
  h->Observe(0.0005);
  h->Observe(0.001);  // on the bound: counts in le=0.001
  h->Observe(0.005);
  h->Observe(2.0);
  EXPECT_EQ(registry.RenderPrometheus(),
            "# HELP latency_seconds Latency.\n"
            "# TYPE latency_seconds histogram\n"
            "latency_seconds_bucket{stage=\"fraud\",le=\"0.001\"} 2\n"
            "latency_seconds_bucket{stage=\"fraud\",le=\"0.01\"} 3\n"
            "latency_seconds_bucket{stage=\"fraud\",le=\"+Inf\"} 4\n"
            "latency_seconds_sum{stage=\"fraud\"} 2.0065\n"
            "latency_seconds_count{stage=\"fraud\"} 4\n");
}

TEST(MetricsRegistry, InfoMetricIsAGaugeOfOneAndLabelValuesAreEscaped) {
  MetricsRegistry registry;
  registry.SetInfo("txscore_model_info", "Model.", {{"model_id", "fr\"aud\\x"}});
  EXPECT_EQ(registry.RenderPrometheus(),
            "# HELP txscore_model_info Model.\n"
            "# TYPE txscore_model_info gauge\n"
            "txscore_model_info{model_id=\"fr\\\"aud\\\\x\"} 1\n");
}

TEST(MetricsRegistry, SettingAnInfoMetricAgainReplacesItsLabels) {
  MetricsRegistry registry;
  registry.SetInfo("txscore_model_info", "Model.", {{"model_version", "1"}});
  registry.SetInfo("txscore_model_info", "Model.", {{"model_version", "2"}});
  EXPECT_EQ(registry.RenderPrometheus(),
            "# HELP txscore_model_info Model.\n"
            "# TYPE txscore_model_info gauge\n"
            "txscore_model_info{model_version=\"2\"} 1\n");
}

}  // namespace
}  // namespace txscore::service
