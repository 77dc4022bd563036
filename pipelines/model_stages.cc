#include "pipelines/model_stages.h"

#include "pipelines/decision.h"

namespace txscore::pipelines {

Result<std::vector<PreparedStage>> PrepareStages(const PipelineConfig& config, const PipelinePlan& plan,
                                                 const FindingsStageConfig& findings) {
  std::vector<PreparedStage> stages(config.graph.size());
  for (size_t i = 0; i < stages.size(); ++i) {
    const GraphStage& stage = config.graph.stage(static_cast<int>(i));
    PreparedStage& prepared = stages[i];
    prepared.kind = stage.kind;
    if (const accelerator::Placement* p = plan.Find(stage.name)) prepared.device = p->device;
    if (const ModelStageConfig* m = config.FindModel(stage.name)) {
      fraud::XGBoostModelOptions model_options;
      model_options.nthread = m->nthread;
      model_options.schema_path = m->schema_path;
      model_options.fast_evaluator = m->fast_evaluator;
      Result<std::unique_ptr<fraud::XGBoostModel>> model = fraud::XGBoostModel::Load(m->model_path, model_options);
      if (!model.ok()) return model.error();
      prepared.model = std::move(model).value();
      prepared.budget_ms = m->budget_ms;
    } else if (const BlendStageConfig* b = config.FindBlend(stage.name)) {
      prepared.weights = b->weights;
    } else if (stage.kind == "llm_findings") {
      prepared.budget_ms = findings.budget_ms;
      prepared.device = findings.device_name;
    }
  }
  return stages;
}

Status RunXGBoostStage(const fraud::XGBoostModel& model, const fraud::FeatureVector& features, StageOutputs* out) {
  std::array<float, fraud::kFeatureCount> row;
  model.schema().Select(features, row.data());
  Result<std::vector<float>> prediction = model.Predict(row.data(), 1);
  if (!prediction.ok()) return prediction.error();
  Result<std::vector<float>> contributions = model.Contributions(row.data());
  if (!contributions.ok()) return contributions.error();
  out->score = (*prediction)[0];
  out->contributions = NamedContributions(*contributions, row.data(), model.schema());
  out->reasons = TopReasons(out->contributions, kModelReasons);
  return Status::Ok();
}

void RunBlendStage(const StageGraph& graph, int index, const std::vector<double>& weights, const RequestValues& values,
                   StageOutputs* out) {
  const std::vector<int>& joined = graph.stage(index).inputs[0].stages;
  const std::vector<double> equal(joined.size(), 1.0);
  Blend(values, joined, weights.empty() ? equal : weights, out);
  out->reasons = TopReasons(out->contributions, kModelReasons);
}

void RunDecisionStage(const StageGraph& graph, int index, const DecisionStageConfig& rules, const RequestValues& values,
                      StageOutputs* out) {
  const GraphStage& stage = graph.stage(index);
  out->score = values[static_cast<size_t>(stage.inputs[0].stages[0])].score;
  out->decision = Decide(out->score, rules);
  out->reasons = TopReasons(values[static_cast<size_t>(stage.inputs[1].stages[0])].contributions, rules.max_reasons);
  const int analysed = graph.InputStage(index, "findings");
  if (analysed < 0 || !rules.escalate_high_risk) return;
  const StageOutputs& findings = values[static_cast<size_t>(analysed)];
  if (findings.ran && findings.findings && findings.findings->risk_level == "high" &&
      out->decision == Decision::kApprove) {
    out->decision = Decision::kReview;
  }
}

}  // namespace txscore::pipelines
