#include "pipelines/stages/decision_stage.h"

#include <cstdio>

namespace txscore::pipelines {
namespace {

class PreparedDecisionStage : public PreparedStage {
 public:
  explicit PreparedDecisionStage(DecisionStageSettings settings) : settings_(std::move(settings)) {}

  Status Run(const StageInputs& inputs, const ScoredItem&, StageOutputs* out, StageReport*) const override {
    out->score = inputs.Get(kDecisionScore)->score;
    out->reasons = TopReasons(inputs.Get(kDecisionContributions)->contributions, settings_.max_reasons);
    // Every verdict stage it comes after, in `after:` order: all their rule hits, and the first
    // forced decision.
    for (int from : inputs.Joined(kDecisionVerdict)) {
      const StageOutputs& verdict = inputs.values()[static_cast<size_t>(from)];
      if (!verdict.ran) continue;
      out->rule_hits.insert(out->rule_hits.end(), verdict.rule_hits.begin(), verdict.rule_hits.end());
      if (!out->forced_decision) out->forced_decision = verdict.forced_decision;
    }
    if (out->forced_decision) {
      out->decision = *out->forced_decision;
      return Status::Ok();
    }
    out->decision = Decide(out->score, settings_.thresholds);
    const StageOutputs* findings = inputs.Get(kDecisionFindings);
    if (settings_.escalate_high_risk && findings != nullptr && findings->findings &&
        findings->findings->risk_level == llm::RiskLevel::kHigh && out->decision == Decision::kApprove) {
      out->decision = Decision::kReview;
    }
    return Status::Ok();
  }
  std::string Describe() const override {
    char text[128];
    std::snprintf(text, sizeof text, "review at >= %g, decline at >= %g", settings_.thresholds.review,
                  settings_.thresholds.decline);
    return text;
  }

 private:
  DecisionStageSettings settings_;
};

class DecisionStageKind : public StageKind {
 public:
  DecisionStageKind() {
    spec_.kind = "decision";
    spec_.inputs = {{"score", ValueType::kNumber},
                    {"contributions", ValueType::kContributions},
                    {"findings", ValueType::kFindings, false, /*optional=*/true},
                    {"verdict", ValueType::kVerdict, /*each_upstream=*/true, /*optional=*/true}};
    spec_.outputs = {{"decision", ValueType::kDecision},
                     {"reasons", ValueType::kReasons},
                     {"score", ValueType::kNumber},
                     {"verdict", ValueType::kVerdict}};
    spec_.keys = {"review_threshold", "decline_threshold", "max_reasons", "escalate_high_risk"};
    spec_.sink = true;
  }
  const StageKindSpec& spec() const override { return spec_; }

  Result<std::shared_ptr<const StageSettings>> Parse(const YamlReader& r, const YAML::Node& stage,
                                                     const StageDeclaration&) const override {
    auto d = std::make_shared<DecisionStageSettings>();
    TXSCORE_RETURN_IF_ERROR(r.ReadBool(stage, "escalate_high_risk", &d->escalate_high_risk));
    TXSCORE_RETURN_IF_ERROR(r.ReadDouble(stage, "review_threshold", 0.0, 1.0, &d->thresholds.review));
    TXSCORE_RETURN_IF_ERROR(r.ReadDouble(stage, "decline_threshold", 0.0, 1.0, &d->thresholds.decline));
    if (d->thresholds.review > d->thresholds.decline) {
      return r.ErrorAt(stage["review_threshold"] ? stage["review_threshold"] : stage,
                       "review_threshold must not exceed decline_threshold");
    }
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "max_reasons", 0, 64, &d->max_reasons));
    return std::shared_ptr<const StageSettings>(std::move(d));
  }

  Result<std::unique_ptr<PreparedStage>> Prepare(const StageSettings& settings, const PrepareContext&) const override {
    return std::unique_ptr<PreparedStage>(
        new PreparedDecisionStage(static_cast<const DecisionStageSettings&>(settings)));
  }

 private:
  StageKindSpec spec_;
};

}  // namespace

std::unique_ptr<StageKind> MakeDecisionStageKind() { return std::make_unique<DecisionStageKind>(); }

}  // namespace txscore::pipelines
