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
  kVerdict,        // rules that matched, and the decision they force if any (RuleHit)
};
// "features", "number", "contributions", "decision", "reasons", "findings", "verdict".
const char* ValueTypeName(ValueType type);

// Values match the Thrift Decision enum.
enum class Decision { kApprove = 1, kReview = 2, kDecline = 3 };
const char* DecisionName(Decision decision);  // "APPROVE", "REVIEW", "DECLINE"

struct Reason {
  std::string feature;
  double contribution = 0;  // log-odds
  double value = 0;         // NaN when missing
  // The feature's identity, which a blend merges by: set on every model contribution
  // (kCount: none, and a blend keeps the contribution unmerged).
  fraud::FeatureId id = fraud::FeatureId::kCount;
};

// A rule that matched an item (a rules stage's verdict): its id is the reason code reported
// in the result and the audit record.
struct RuleHit {
  std::string rule;                  // e.g. "R17"
  std::optional<Decision> decision;  // what the rule forces; none: it only reports its reason
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
  // kVerdict: the rules that matched, in rule order, and the decision the first of them that
  // forces one forces (none: the score decides).
  std::vector<RuleHit> rule_hits;
  std::optional<Decision> forced_decision;
};

// What a request has produced: one entry per stage, indexed like the pipeline's stages.
using RequestValues = std::vector<StageOutputs>;

}  // namespace txscore::pipelines
