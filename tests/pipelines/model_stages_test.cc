#include "pipelines/model_stages.h"

#include <gtest/gtest.h>

namespace txscore::pipelines {
namespace {

// The claims shape: features -> claims_model -> analysis (LLM) -> decision, the findings optional.
StageGraph ClaimsGraph() {
  StageKindRegistry kinds;
  RegisterBuiltinStageKinds(&kinds);
  std::vector<StageDeclaration> stages(4);
  stages[0].name = "features";
  stages[0].kind = "claim_features";
  stages[1].name = "claims_model";
  stages[1].kind = "xgboost";
  stages[1].after = {"features"};
  stages[2].name = "analysis";
  stages[2].kind = "llm_findings";
  stages[2].after = {"claims_model"};
  stages[2].when = "claims_model.score >= 0.5";
  stages[3].name = "decision";
  stages[3].kind = "decision";
  stages[3].after = {"claims_model", "analysis"};
  return StageGraph::Build(stages, kinds, "claims.yaml", "decision").value();
}

RequestValues Scored(double score, const std::string& risk_level) {
  RequestValues values(4);
  values[0].ran = values[1].ran = true;
  values[1].score = score;
  values[1].contributions = {{"claim_days_to_report", 1.5, 40}, {"claim_prior_claims", -0.5, 0}};
  if (!risk_level.empty()) {
    values[2].ran = true;
    values[2].findings = llm::Findings{risk_level, {"late_reporting"}, "summary", "m"};
  }
  return values;
}

TEST(RunDecisionStage, HighRiskFindingsTurnAnApproveIntoReview) {
  const StageGraph graph = ClaimsGraph();
  DecisionStageConfig rules;  // review at 0.5
  StageOutputs out;
  RunDecisionStage(graph, 3, rules, Scored(0.2, "high"), &out);
  EXPECT_EQ(out.decision, Decision::kReview);
  EXPECT_EQ(out.score, 0.2);
  ASSERT_EQ(out.reasons.size(), 1u);
  EXPECT_EQ(out.reasons[0].feature, "claim_days_to_report");
}

TEST(RunDecisionStage, WithoutFindingsOrWithLowRiskTheScoreDecides) {
  const StageGraph graph = ClaimsGraph();
  DecisionStageConfig rules;
  StageOutputs out;
  RunDecisionStage(graph, 3, rules, Scored(0.2, ""), &out);
  EXPECT_EQ(out.decision, Decision::kApprove);
  RunDecisionStage(graph, 3, rules, Scored(0.2, "medium"), &out);
  EXPECT_EQ(out.decision, Decision::kApprove);
  RunDecisionStage(graph, 3, rules, Scored(0.95, "low"), &out);
  EXPECT_EQ(out.decision, Decision::kDecline);  // findings never lower a decision
  rules.escalate_high_risk = false;
  RunDecisionStage(graph, 3, rules, Scored(0.2, "high"), &out);
  EXPECT_EQ(out.decision, Decision::kApprove);
}

}  // namespace
}  // namespace txscore::pipelines
