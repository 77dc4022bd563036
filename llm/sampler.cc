#include "llm/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace txscore::llm {

Sampler::Sampler(const SamplingOptions& options) : options_(options), state_(options.seed ^ 0x853c49e6748fea9bull) {}

double Sampler::NextUniform() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);  // SplitMix64: fully specified, same everywhere
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

int32_t Sampler::Sample(const std::vector<float>& logits, const std::vector<bool>* allowed) {
  auto ok = [&](size_t i) { return allowed == nullptr || (i < allowed->size() && (*allowed)[i]); };
  if (options_.temperature <= 0) {
    int32_t best = -1;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (ok(i) && (best < 0 || logits[i] > logits[static_cast<size_t>(best)])) best = static_cast<int32_t>(i);
    }
    return best;
  }
  std::vector<int32_t> candidates;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (ok(i)) candidates.push_back(static_cast<int32_t>(i));
  }
  if (candidates.empty()) return -1;
  // Highest logits first (ids break ties), so top-k and top-p are prefixes.
  std::stable_sort(candidates.begin(), candidates.end(), [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
  });
  if (options_.top_k > 0 && candidates.size() > static_cast<size_t>(options_.top_k)) {
    candidates.resize(static_cast<size_t>(options_.top_k));
  }
  const double top = logits[static_cast<size_t>(candidates[0])] / options_.temperature;
  std::vector<double> weights;
  double total = 0;
  for (int32_t id : candidates) {
    weights.push_back(std::exp(logits[static_cast<size_t>(id)] / options_.temperature - top));
    total += weights.back();
  }
  if (options_.top_p < 1.0) {
    double cumulative = 0;
    size_t keep = 0;
    while (keep < weights.size()) {
      cumulative += weights[keep] / total;
      ++keep;
      if (cumulative >= options_.top_p) break;
    }
    weights.resize(keep);
    candidates.resize(keep);
    total = std::accumulate(weights.begin(), weights.end(), 0.0);
  }
  double pick = NextUniform() * total;
  for (size_t i = 0; i < weights.size(); ++i) {
    pick -= weights[i];
    if (pick < 0) return candidates[i];
  }
  return candidates.back();
}

}  // namespace txscore::llm
