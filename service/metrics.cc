#include "service/metrics.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace txscore::service {
namespace {

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string FormatLabels(const Labels& labels, const std::pair<std::string, std::string>* extra = nullptr) {
  if (labels.empty() && extra == nullptr) return "";
  std::string out = "{";
  bool first = true;
  auto add = [&](const std::string& k, const std::string& v) {
    if (!first) out += ",";
    first = false;
    out += k + "=\"" + EscapeLabelValue(v) + "\"";
  };
  for (const auto& [k, v] : labels) add(k, v);
  if (extra) add(extra->first, extra->second);
  return out + "}";
}

// Shortest text that reads back as the same double, as Prometheus clients print values.
std::string FormatDouble(double v) {
  char buf[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), buckets_(new std::atomic<uint64_t>[upper_bounds_.size() + 1]) {
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::Observe(double value) {
  size_t i = 0;
  while (i < upper_bounds_.size() && value > upper_bounds_[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

uint64_t Histogram::cumulative_count(size_t i) const {
  uint64_t total = 0;
  for (size_t b = 0; b <= i && b <= upper_bounds_.size(); ++b) total += buckets_[b].load(std::memory_order_relaxed);
  return total;
}

std::vector<double> LatencyBucketsSeconds() {
  return {25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3,   2.5e-3, 5e-3,
          10e-3, 25e-3, 50e-3,  100e-3, 250e-3, 500e-3, 1.0,    2.5};
}

MetricsRegistry::Series* MetricsRegistry::FindOrAdd(const std::string& name, const std::string& help, Type type,
                                                    const Labels& labels, const std::function<void(Series*)>& init) {
  std::lock_guard<std::mutex> lock(mutex_);
  Series* series = FindOrAddLocked(name, help, type, labels);
  if (init) init(series);  // under the lock: a scrape may be rendering this family now
  return series;
}

MetricsRegistry::Series* MetricsRegistry::FindOrAddLocked(const std::string& name, const std::string& help, Type type,
                                                          const Labels& labels) {
  Family* family = nullptr;
  for (auto& f : families_) {
    if (f->name == name) family = f.get();
  }
  if (family == nullptr) {
    families_.push_back(std::make_unique<Family>(Family{name, help, type, {}}));
    family = families_.back().get();
  }
  for (auto& s : family->series) {
    if (s->labels == labels) return s.get();
  }
  family->series.push_back(std::make_unique<Series>());
  family->series.back()->labels = labels;
  return family->series.back().get();
}

Counter* MetricsRegistry::AddCounter(const std::string& name, const std::string& help, const Labels& labels) {
  return FindOrAdd(name, help, Type::kCounter, labels,
                   [](Series* s) {
                     if (!s->counter) s->counter = std::make_unique<Counter>();
                   })
      ->counter.get();
}

Histogram* MetricsRegistry::AddHistogram(const std::string& name, const std::string& help, const Labels& labels,
                                         std::vector<double> upper_bounds) {
  return FindOrAdd(name, help, Type::kHistogram, labels,
                   [&](Series* s) {
                     if (!s->histogram) s->histogram = std::make_unique<Histogram>(std::move(upper_bounds));
                   })
      ->histogram.get();
}

void MetricsRegistry::AddCounterFunction(const std::string& name, const std::string& help, const Labels& labels,
                                         std::function<uint64_t()> read) {
  FindOrAdd(name, help, Type::kCounter, labels, [&](Series* s) { s->read = std::move(read); });
}

void MetricsRegistry::AddFloatCounterFunction(const std::string& name, const std::string& help, const Labels& labels,
                                              std::function<double()> read) {
  FindOrAdd(name, help, Type::kCounter, labels, [&](Series* s) { s->gauge = std::move(read); });
}

void MetricsRegistry::AddGaugeFunction(const std::string& name, const std::string& help, const Labels& labels,
                                       std::function<double()> read) {
  FindOrAdd(name, help, Type::kGauge, labels, [&](Series* s) { s->gauge = std::move(read); });
}

void MetricsRegistry::SetInfo(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& f : families_) {
    if (f->name == name) f->series.clear();  // info series are never handed out: safe to drop
  }
  FindOrAddLocked(name, help, Type::kGauge, labels);
}

std::string MetricsRegistry::RenderPrometheus() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream out;
  for (const auto& f : families_) {
    out << "# HELP " << f->name << " " << f->help << "\n";
    out << "# TYPE " << f->name << " "
        << (f->type == Type::kCounter     ? "counter"
            : f->type == Type::kHistogram ? "histogram"
                                          : "gauge")
        << "\n";
    for (const auto& s : f->series) {
      if (f->type == Type::kCounter) {
        out << f->name << FormatLabels(s->labels) << " ";
        if (s->gauge) {
          out << FormatDouble(s->gauge());
        } else {
          out << (s->read ? s->read() : s->counter->value());
        }
        out << "\n";
      } else if (f->type == Type::kGauge) {
        out << f->name << FormatLabels(s->labels) << " " << (s->gauge ? FormatDouble(s->gauge()) : "1") << "\n";
      } else {
        const Histogram& h = *s->histogram;
        for (size_t i = 0; i < h.upper_bounds().size(); ++i) {
          const std::pair<std::string, std::string> le{"le", FormatDouble(h.upper_bounds()[i])};
          out << f->name << "_bucket" << FormatLabels(s->labels, &le) << " " << h.cumulative_count(i) << "\n";
        }
        // One total for +Inf and _count, so a scrape during updates is still consistent.
        const uint64_t total = h.cumulative_count(h.upper_bounds().size());
        const std::pair<std::string, std::string> inf{"le", "+Inf"};
        out << f->name << "_bucket" << FormatLabels(s->labels, &inf) << " " << total << "\n";
        out << f->name << "_sum" << FormatLabels(s->labels) << " " << FormatDouble(h.sum()) << "\n";
        out << f->name << "_count" << FormatLabels(s->labels) << " " << total << "\n";
      }
    }
  }
  return out.str();
}

std::vector<MetricsRegistry::SeriesValue> MetricsRegistry::Read(const std::set<std::string>& families) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<SeriesValue> values;
  for (const auto& f : families_) {
    if (families.count(f->name) == 0) continue;
    for (const auto& s : f->series) {
      SeriesValue value{f->name, s->labels};
      if (f->type == Type::kHistogram) {
        const Histogram& h = *s->histogram;
        value.upper_bounds = h.upper_bounds();
        for (size_t i = 0; i <= h.upper_bounds().size(); ++i) value.cumulative.push_back(h.cumulative_count(i));
        value.sum = h.sum();
      } else if (s->gauge) {
        value.value = s->gauge();
      } else if (f->type == Type::kGauge) {
        value.value = 1;  // an info series
      } else {
        value.value = static_cast<double>(s->read ? s->read() : s->counter->value());
      }
      values.push_back(std::move(value));
    }
  }
  return values;
}

}  // namespace txscore::service
