// Decision rules: score thresholds to APPROVE / REVIEW / DECLINE, and reason codes.
#pragma once

#include <string>
#include <vector>

#include "fraud/feature_schema.h"
#include "pipelines/values.h"

namespace txscore::pipelines {

struct DecisionThresholds {
  double review = 0.5;   // Default: score >= 0.5 -> REVIEW
  double decline = 0.9;  // Default: score >= 0.9 -> DECLINE
};

// score >= decline -> DECLINE; else score >= review -> REVIEW; else APPROVE.
Decision Decide(double score, const DecisionThresholds& thresholds);

// A model's per-feature contributions as named reasons, in schema order: `contributions` has
// one entry per schema feature (a trailing bias entry is ignored); `values` holds the row in
// schema order.
std::vector<Reason> NamedContributions(const std::vector<float>& contributions, const float* values,
                                       const fraud::FeatureSchema& schema);

// The features that pushed the score up the most: positive contributions only, largest
// first (ties in the given order), at most max_reasons.
std::vector<Reason> TopReasons(const std::vector<Reason>& contributions, int max_reasons);

// A blend stage's outputs: the weighted mean (weights normalised to sum 1) of the scores of
// the `joined` stages, and of their contributions matched by feature name (a feature one model
// lacks counts as 0 there), in first-seen order; each feature's value is from the first stage
// that has it.
void Blend(const RequestValues& values, const std::vector<int>& joined, const std::vector<double>& weights,
           StageOutputs* out);

}  // namespace txscore::pipelines
