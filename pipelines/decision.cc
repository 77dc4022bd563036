#include "pipelines/decision.h"

#include <algorithm>
#include <array>

namespace txscore::pipelines {

const char* DecisionName(Decision decision) {
  switch (decision) {
    case Decision::kApprove:
      return "APPROVE";
    case Decision::kReview:
      return "REVIEW";
    case Decision::kDecline:
      return "DECLINE";
  }
  return "UNKNOWN";
}

const char* ValueTypeName(ValueType type) {
  switch (type) {
    case ValueType::kFeatures:
      return "features";
    case ValueType::kNumber:
      return "number";
    case ValueType::kContributions:
      return "contributions";
    case ValueType::kDecision:
      return "decision";
    case ValueType::kReasons:
      return "reasons";
    case ValueType::kFindings:
      return "findings";
    case ValueType::kVerdict:
      return "verdict";
  }
  return "unknown";
}

Decision Decide(double score, const DecisionThresholds& thresholds) {
  if (score >= thresholds.decline) return Decision::kDecline;
  if (score >= thresholds.review) return Decision::kReview;
  return Decision::kApprove;
}

std::vector<Reason> NamedContributions(const std::vector<float>& contributions, const float* values,
                                       const fraud::FeatureSchema& schema) {
  std::vector<Reason> named;
  for (size_t i = 0; i < schema.size() && i < contributions.size(); ++i) {
    named.push_back({std::string(fraud::FeatureName(schema.at(i))), contributions[i], values[i], schema.at(i)});
  }
  return named;
}

std::vector<Reason> TopReasons(const std::vector<Reason>& contributions, int max_reasons) {
  std::vector<Reason> reasons;
  for (const Reason& r : contributions) {
    if (r.contribution > 0) reasons.push_back(r);
  }
  std::stable_sort(reasons.begin(), reasons.end(),
                   [](const Reason& a, const Reason& b) { return a.contribution > b.contribution; });
  if (reasons.size() > static_cast<size_t>(max_reasons)) reasons.resize(static_cast<size_t>(max_reasons));
  return reasons;
}

void Blend(const RequestValues& values, const std::vector<int>& joined, const std::vector<double>& weights,
           StageOutputs* out) {
  double total_weight = 0;
  for (double w : weights) total_weight += w;
  std::vector<Reason> merged;
  std::array<int, fraud::kFeatureCount> position;  // by FeatureId: where in `merged`, or -1
  position.fill(-1);
  out->score = 0;
  for (size_t k = 0; k < joined.size(); ++k) {
    const StageOutputs& in = values[static_cast<size_t>(joined[k])];
    const double w = weights[k] / total_weight;
    out->score += w * in.score;
    for (const Reason& r : in.contributions) {
      if (r.id == fraud::FeatureId::kCount) {  // no identity to merge by: kept as it came
        merged.push_back({r.feature, w * r.contribution, r.value, r.id});
        continue;
      }
      int& at = position[static_cast<size_t>(r.id)];
      if (at < 0) {
        at = static_cast<int>(merged.size());
        merged.push_back({r.feature, 0, r.value, r.id});
      }
      merged[static_cast<size_t>(at)].contribution += w * r.contribution;
    }
  }
  out->contributions = std::move(merged);
}

}  // namespace txscore::pipelines
