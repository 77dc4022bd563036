// The decision stage kind, every pipeline's sink: its score thresholds turn the score it reads
// into APPROVE / REVIEW / DECLINE, with the largest contributions towards fraud as reasons.
//
//   - {name: decision, kind: decision, after: [fraud, rules], review_threshold: 0.6}
//
// Two optional inputs change the decision when they are bound and ran:
//   verdict   (every rules stage it comes after, in `after:` order): the first matching rule
//             that forces a decision decides, and the score does not; every matching rule's
//             id is reported as a reason code.
//   findings  (an LLM stage): an APPROVE whose findings say risk "high" becomes REVIEW, so a
//             person looks at it (escalate_high_risk). A rule's forced decision is final.
//
// Keys (defaults beside them):
//   review_threshold    Default: 0.5; score >= it -> REVIEW
//   decline_threshold   Default: 0.9; score >= it -> DECLINE (at least review_threshold)
//   max_reasons         Default: 3 reasons, 0..64
//   escalate_high_risk  Default: true
#pragma once

#include <memory>

#include "pipelines/decision.h"
#include "pipelines/stage_kind.h"

namespace txscore::pipelines {

struct DecisionStageSettings : StageSettings {
  DecisionThresholds thresholds;
  int max_reasons = 3;
  bool escalate_high_risk = true;
};

// The decision's input ports, in order.
enum DecisionInput : size_t { kDecisionScore, kDecisionContributions, kDecisionFindings, kDecisionVerdict };

std::unique_ptr<StageKind> MakeDecisionStageKind();

}  // namespace txscore::pipelines
