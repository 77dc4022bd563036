#include "llm/conformance.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace txscore::llm {
namespace {

double Cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += static_cast<double>(a[i]) * b[i];
    na += static_cast<double>(a[i]) * a[i];
    nb += static_cast<double>(b[i]) * b[i];
  }
  return na == 0 || nb == 0 ? (na == nb ? 1.0 : 0.0) : dot / std::sqrt(na * nb);
}

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

ConformanceThresholds ThresholdsFor(accelerator::Dtype dtype) {
  if (dtype == accelerator::Dtype::kFloat32) return {.min_cosine = 0.99999, .min_agreement = 1.0};
  return {.min_cosine = 0.999, .min_agreement = 0.0};
}

ConformanceThresholds Int8Thresholds() { return {.min_cosine = 0.99, .min_agreement = 0.0}; }

Result<ConformanceReport> CompareDecoders(const Decoder& reference, const Decoder& candidate,
                                          const std::vector<int32_t>& prompt, int steps,
                                          const ConformanceThresholds& thresholds) {
  if (reference.config().vocab_size != candidate.config().vocab_size) {
    return InvalidArgument("the decoders have different vocabularies");
  }
  if (prompt.empty() || steps < 1) return InvalidArgument("need a prompt and at least one step");
  const int max_tokens = static_cast<int>(prompt.size()) + steps;
  auto reference_cache = reference.NewCache(1, max_tokens);
  auto candidate_cache = candidate.NewCache(1, max_tokens);
  ConformanceReport report;
  std::vector<int32_t> step = prompt;
  for (int t = 0; t < steps; ++t) {
    Result<std::vector<std::vector<float>>> want = reference.Forward(reference_cache.get(), {step});
    if (!want.ok()) return want.error();
    Result<std::vector<std::vector<float>>> got = candidate.Forward(candidate_cache.get(), {step});
    if (!got.ok()) return got.error();
    const std::vector<float>& a = (*want)[0];
    const std::vector<float>& b = (*got)[0];
    double max_abs = 0;
    for (size_t i = 0; i < a.size(); ++i) max_abs = std::max(max_abs, static_cast<double>(std::fabs(a[i] - b[i])));
    report.cosine.push_back(Cosine(a, b));
    report.max_abs_difference.push_back(max_abs);
    report.min_cosine = std::min(report.min_cosine, report.cosine.back());
    report.max_abs = std::max(report.max_abs, max_abs);
    const int32_t next = Argmax(a);
    report.same_tokens += next == Argmax(b);
    step = {next};  // both follow the reference
  }
  report.steps = steps;
  const double agreement = static_cast<double>(report.same_tokens) / steps;
  char why[160];
  if (report.min_cosine < thresholds.min_cosine) {
    std::snprintf(why, sizeof why, "cosine %.6f at some step is below %.6f", report.min_cosine, thresholds.min_cosine);
    report.failure = why;
  } else if (agreement < thresholds.min_agreement) {
    std::snprintf(why, sizeof why, "%d of %d greedy tokens agree, below %.0f%%", report.same_tokens, steps,
                  thresholds.min_agreement * 100);
    report.failure = why;
  }
  report.passed = report.failure.empty();
  return report;
}

}  // namespace txscore::llm
