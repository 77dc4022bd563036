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

TEST(MetricsRegistry, ReadGivesTheNamedFamiliesAsAScrapeWouldSeeThem) {
  MetricsRegistry registry;
  Histogram* h = registry.AddHistogram("latency_seconds", "Latency.", {{"stage", "fraud"}}, {0.001, 0.01});
  h->Observe(0.0005);
  h->Observe(2.0);
  registry.AddCounter("requests_total", "Requests.", {{"outcome", "ok"}})->Increment(5);
  registry.AddGaugeFunction("open", "Open now.", {}, [] { return 7.5; });
  registry.AddCounterFunction("elsewhere_total", "Counted elsewhere.", {}, [] { return uint64_t{9}; });
  const std::vector<MetricsRegistry::SeriesValue> values =
      registry.Read({"latency_seconds", "requests_total", "open", "elsewhere_total"});
  ASSERT_EQ(values.size(), 4u);
  EXPECT_EQ(values[0].name, "latency_seconds");
  EXPECT_EQ(values[0].labels, (Labels{{"stage", "fraud"}}));
  EXPECT_EQ(values[0].upper_bounds, (std::vector<double>{0.001, 0.01}));
  EXPECT_EQ(values[0].cumulative, (std::vector<uint64_t>{1, 1, 2}));
  EXPECT_DOUBLE_EQ(values[0].sum, 2.0005);
  EXPECT_EQ(values[1].value, 5);
  EXPECT_EQ(values[2].value, 7.5);
  EXPECT_EQ(values[3].value, 9);
  EXPECT_TRUE(registry.Read({"nothing"}).empty());
  EXPECT_EQ(registry.Read({"open"}).size(), 1u);
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
