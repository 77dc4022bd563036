#include "pipelines/stages/decision_stage.h"

#include <gtest/gtest.h>

namespace txscore::pipelines {
namespace {

// The claims shape with rules: features -> claims_model, rules -> analysis (LLM) -> decision,
// the findings and the verdict optional inputs of the decision.
class DecisionStageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<StageDeclaration> stages;
    const auto add = [&](const char* name, const char* kind, std::vector<std::string> after, const char* when = "") {
      StageDeclaration d;
      d.name = name;
      d.kind = kind;
      d.after = std::move(after);
      d.when = when;
      stages.push_back(std::move(d));
    };
    add("features", "claim_features", {});
    add("claims_model", "xgboost", {"features"});
    add("rules", "rules", {"features"});
    add("analysis", "llm_findings", {"claims_model"}, "claims_model.score >= 0.5");
    add("decision", "decision", {"claims_model", "analysis", "rules"});
    graph_ = StageGraph::Build(stages, BuiltinStageKinds(), "claims.yaml").value();
    Prepare(DecisionStageSettings{});
  }
  void Prepare(const DecisionStageSettings& settings) {
    stage_ = BuiltinStageKinds().Find("decision")->Prepare(settings, {}).value();
  }

  // The values before the decision: a score, contributions, and optionally findings of
  // `risk_level` and a verdict forcing `forced`.
  RequestValues Scored(double score, std::optional<llm::RiskLevel> risk_level,
                       std::optional<Decision> forced = std::nullopt) {
    RequestValues values(5);
    values[0].ran = values[1].ran = true;
    values[1].score = score;
    values[1].contributions = {{"claim_days_to_report", 1.5, 40}, {"claim_prior_claims", -0.5, 0}};
    if (risk_level) {
      values[3].ran = true;
      values[3].findings = llm::Findings{*risk_level, {"late_reporting"}, "summary", "m"};
    }
    if (forced) {
      values[2].ran = true;
      values[2].rule_hits = {{"N01", std::nullopt}, {"R17", forced}};
      values[2].forced_decision = forced;
    }
    return values;
  }
  StageOutputs Decide(const RequestValues& values) {
    StageOutputs out;
    StageReport report;
    EXPECT_TRUE(stage_->Run(StageInputs(graph_.stage(4), values), {}, &out, &report).ok());
    return out;
  }

  StageGraph graph_;
  std::unique_ptr<PreparedStage> stage_;
};

TEST_F(DecisionStageTest, HighRiskFindingsTurnAnApproveIntoReview) {
  const StageOutputs out = Decide(Scored(0.2, llm::RiskLevel::kHigh));
  EXPECT_EQ(out.decision, Decision::kReview);
  EXPECT_EQ(out.score, 0.2);
  ASSERT_EQ(out.reasons.size(), 1u);
  EXPECT_EQ(out.reasons[0].feature, "claim_days_to_report");
}

TEST_F(DecisionStageTest, WithoutFindingsOrWithLowRiskTheScoreDecides) {
  EXPECT_EQ(Decide(Scored(0.2, std::nullopt)).decision, Decision::kApprove);
  EXPECT_EQ(Decide(Scored(0.2, llm::RiskLevel::kMedium)).decision, Decision::kApprove);
  EXPECT_EQ(Decide(Scored(0.95, llm::RiskLevel::kLow)).decision,
            Decision::kDecline);  // findings never lower a decision
  DecisionStageSettings no_escalation;
  no_escalation.escalate_high_risk = false;
  Prepare(no_escalation);
  EXPECT_EQ(Decide(Scored(0.2, llm::RiskLevel::kHigh)).decision, Decision::kApprove);
}

TEST_F(DecisionStageTest, ARulesForcedDecisionOverridesTheScoreAndItsHitsAreReported) {
  StageOutputs out = Decide(Scored(0.1, std::nullopt, Decision::kDecline));
  EXPECT_EQ(out.decision, Decision::kDecline);
  EXPECT_EQ(out.score, 0.1);  // the model's score is still reported
  ASSERT_EQ(out.rule_hits.size(), 2u);
  EXPECT_EQ(out.rule_hits[0].rule, "N01");
  EXPECT_EQ(out.rule_hits[1].rule, "R17");
  // A forced APPROVE (an allow list) is final: high-risk findings do not escalate it.
  out = Decide(Scored(0.95, llm::RiskLevel::kHigh, Decision::kApprove));
  EXPECT_EQ(out.decision, Decision::kApprove);
}

TEST_F(DecisionStageTest, AVerdictWithoutAForcedDecisionLeavesTheScoreToDecide) {
  RequestValues values = Scored(0.6, std::nullopt);
  values[2].ran = true;
  values[2].rule_hits = {{"N05", std::nullopt}};
  const StageOutputs out = Decide(values);
  EXPECT_EQ(out.decision, Decision::kReview);
  ASSERT_EQ(out.rule_hits.size(), 1u);
  EXPECT_EQ(out.rule_hits[0].rule, "N05");
}

}  // namespace
}  // namespace txscore::pipelines
