#include "pipelines/decision.h"

#include <algorithm>
#include <numeric>

namespace txscore::pipelines {

const char* DecisionName(Decision decision) {
  switch (decision) {
    case Decision::kApprove: return "APPROVE";
    case Decision::kReview: return "REVIEW";
    case Decision::kDecline: return "DECLINE";
  }
  return "UNKNOWN";
}

Decision Decide(double score, const DecisionStageConfig& rules) {
  if (score >= rules.decline_threshold) return Decision::kDecline;
  if (score >= rules.review_threshold) return Decision::kReview;
  return Decision::kApprove;
}

std::vector<Reason> TopReasons(const std::vector<float>& contributions, const float* values,
                               const fraud::FeatureSchema& schema, int max_reasons) {
  std::vector<size_t> order;
  for (size_t i = 0; i < schema.size() && i < contributions.size(); ++i) {
    if (contributions[i] > 0) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return contributions[a] > contributions[b]; });
  if (order.size() > static_cast<size_t>(max_reasons)) order.resize(static_cast<size_t>(max_reasons));
  std::vector<Reason> reasons;
  for (size_t i : order) {
    reasons.push_back({std::string(fraud::FeatureName(schema.at(i))), contributions[i], values[i]});
  }
  return reasons;
}

}  // namespace txscore::pipelines
