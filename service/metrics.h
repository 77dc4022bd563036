// Prometheus metrics, rendered in the text exposition format (version 0.0.4).
//
// Metrics are registered at start-up; the request path only increments atomics through the
// pointers registration returned (no locks, no allocation, no map lookups by default).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace txscore::service {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void Increment(uint64_t by = 1) { value_.fetch_add(by, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

class Histogram {
 public:
  // Upper bounds, strictly increasing; +Inf is implicit.
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }
  // Observations <= upper_bounds()[i] (cumulative, as Prometheus wants).
  uint64_t cumulative_count(size_t i) const;

 private:
  std::vector<double> upper_bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bucket, non-cumulative; last is +Inf
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

// Latency buckets in seconds, 25 us to 2.5 s.
std::vector<double> LatencyBucketsSeconds();

class MetricsRegistry {
 public:
  // Registration is thread-safe (a reload registers its new stages' series while serving). The returned pointer lives
  // as long as the registry. Registering the same name and labels twice returns the same metric.
  Counter* AddCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram* AddHistogram(const std::string& name, const std::string& help, const Labels& labels,
                          std::vector<double> upper_bounds = LatencyBucketsSeconds());
  // A counter whose value is read from `read` at each scrape (for counts kept elsewhere).
  void AddCounterFunction(const std::string& name, const std::string& help, const Labels& labels,
                          std::function<uint64_t()> read);
  // The same for a count that is not whole (seconds of CPU time).
  void AddFloatCounterFunction(const std::string& name, const std::string& help, const Labels& labels,
                               std::function<double()> read);
  // A gauge whose value is read from `read` at each scrape (e.g. connections open now, a
  // fraction in use).
  void AddGaugeFunction(const std::string& name, const std::string& help, const Labels& labels,
                        std::function<double()> read);
  // A constant 1 with descriptive labels, e.g. txscore_model_info{model_id=...}; replaces the
  // series of that name set before (after a reload, the new model's labels only).
  void SetInfo(const std::string& name, const std::string& help, const Labels& labels);

  std::string RenderPrometheus() const;

  // Each series of the families named, as a scrape would read it now, for readers in this
  // process (the dashboard).
  struct SeriesValue {
    std::string name;
    Labels labels;
    double value = 0;                  // a counter's or gauge's value
    std::vector<double> upper_bounds;  // a histogram's buckets,
    std::vector<uint64_t> cumulative;  // their cumulative counts, then the +Inf one (the count)
    double sum = 0;                    // and the histogram's sum
  };
  std::vector<SeriesValue> Read(const std::set<std::string>& families) const;

 private:
  enum class Type { kCounter, kHistogram, kGauge };
  struct Series {
    Labels labels;
    std::unique_ptr<Counter> counter;
    std::function<uint64_t()> read;  // instead of `counter`, for AddCounterFunction
    std::function<double()> gauge;   // for AddGaugeFunction and AddFloatCounterFunction
    std::unique_ptr<Histogram> histogram;
  };
  struct Family {
    std::string name;
    std::string help;
    Type type;
    std::vector<std::unique_ptr<Series>> series;
  };
  // `init` runs under the registry's lock, on the series found or added.
  Series* FindOrAdd(const std::string& name, const std::string& help, Type type, const Labels& labels,
                    const std::function<void(Series*)>& init = nullptr);
  Series* FindOrAddLocked(const std::string& name, const std::string& help, Type type, const Labels& labels);

  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Family>> families_;
};

}  // namespace txscore::service
