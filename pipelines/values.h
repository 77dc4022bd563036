// The typed values that flow along a pipeline's edges, and what one request has produced so
// far. Every stage output has one of the types below; a stage's input is bound at load time to
// an upstream output of the same type (pipelines/stage_graph.h), so at run time a value is
// found by (stage index, type) with no lookup by name.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fraud/features.h"
#include "llm/claim_analysis.h"

namespace txscore::pipelines {

enum class ValueType {
  kFeatures,       // the transaction's feature vector (fraud/features.h)
  kNumber,         // a score in [0, 1]
  kContributions,  // one Reason per model feature, in the model's schema order
  kDecision,       // APPROVE, REVIEW or DECLINE
  kReasons,        // the largest contributions towards fraud, largest first
  kFindings,       // an LLM's structured findings
};
// "features", "number", "contributions", "decision", "reasons", "findings".
const char* ValueTypeName(ValueType type);

// Values match the Thrift Decision enum.
enum class Decision { kApprove = 1, kReview = 2, kDecline = 3 };
const char* DecisionName(Decision decision);  // "APPROVE", "REVIEW", "DECLINE"

struct Reason {
  std::string feature;
  double contribution = 0;  // log-odds
  double value = 0;         // NaN when missing
};

// One stage's outputs for one request. A stage writes the fields of its output types only.
struct StageOutputs {
  bool ran = false;  // false: the stage did not run (its condition was false, or it was skipped)
  fraud::FeatureVector features{};
  double score = 0;
  std::vector<Reason> contributions;
  Decision decision = Decision::kApprove;
  std::vector<Reason> reasons;
  std::optional<llm::Findings> findings;
};

// What a request has produced: one entry per stage, indexed like the pipeline's stages.
using RequestValues = std::vector<StageOutputs>;

}  // namespace txscore::pipelines
