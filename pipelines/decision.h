// Decision rules: score thresholds to APPROVE / REVIEW / DECLINE, and reason codes.
#pragma once

#include <string>
#include <vector>

#include "fraud/feature_schema.h"
#include "pipelines/config.h"

namespace txscore::pipelines {

// Values match the Thrift Decision enum.
enum class Decision { kApprove = 1, kReview = 2, kDecline = 3 };
const char* DecisionName(Decision decision);  // "APPROVE", "REVIEW", "DECLINE"

// score >= decline_threshold -> DECLINE; else score >= review_threshold -> REVIEW; else APPROVE.
Decision Decide(double score, const DecisionStageConfig& rules);

struct Reason {
  std::string feature;
  double contribution = 0;  // log-odds
  double value = 0;         // NaN when missing
};

// The features that pushed the score up the most: positive contributions only, largest
// first (ties by schema order), at most max_reasons. `contributions` has one entry per schema
// feature (a trailing bias entry is ignored); `values` holds the row in schema order.
std::vector<Reason> TopReasons(const std::vector<float>& contributions, const float* values,
                               const fraud::FeatureSchema& schema, int max_reasons);

}  // namespace txscore::pipelines
